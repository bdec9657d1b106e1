"""The rollout memory of on-policy agents: the latest chunk(s), kept by reference."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from digideep.memory import frames
from digideep.memory.log import Readback
from digideep.memory.ring import KeySpec, RingState, validate_chunk


class RolloutMemory:
    """Holds the latest ``keep`` chunks (1 for PPO/A2C) of ``num_workers`` workers by reference (the
    Explorer returns fresh arrays each time; read them as read-only); with ``frames``, stacked uint8
    frames (Atari's) one frame per row, rebuilt exactly on read (:mod:`~digideep.memory.frames`).
    Nothing is kept on disk, so it is a :class:`~digideep.memory.TrajectoryMemory` but not a durable
    one: after a resume the next explore refills it, as an on-policy agent needs.
    """

    def __init__(self, num_workers: int, keep: int = 1, name: str = "rollout", frames: bool = True) -> None:
        if not isinstance(num_workers, int | np.integer) or num_workers < 1:
            raise ValueError(f"RolloutMemory num_workers must be an integer >= 1, got {num_workers!r}")
        if keep < 1:
            raise ValueError(f"RolloutMemory keep must be >= 1, got {keep!r}")
        self.name = name
        self.frames = bool(frames)
        self.num_workers = int(num_workers)
        self._chunks: deque[dict[str, frames.Column]] = deque(maxlen=keep)
        self._specs: dict[str, KeySpec] = {}
        self._stored = 0

    @classmethod
    def from_params(cls, *, location: str, num_workers: int, name: str, **args: Any) -> RolloutMemory:
        """Build from a params ``memory`` entry; ``location`` is ignored (nothing is persisted)."""
        return cls(num_workers=num_workers, name=name, **args)

    @property
    def size(self) -> int:
        """Transition rows ``T`` per worker of the latest chunk (0 when empty)."""
        if not self._chunks:
            return 0
        return next(iter(self._chunks[-1].values())).shape[1] - 1

    @property
    def chunks(self) -> list[dict[str, np.ndarray]]:
        """The held chunks, oldest first (decoded)."""
        return [frames.decode_chunk(chunk) for chunk in self._chunks]

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays held, all chunks (encoded frames counted as held)."""
        return sum(column.nbytes for chunk in self._chunks for column in chunk.values())

    def keys(self) -> list[str]:
        """Keys of the latest chunk."""
        return list(self._chunks[-1]) if self._chunks else []

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __getitem__(self, key: str) -> np.ndarray:
        """``(W, T + 1, ...)`` array of ``key`` in the latest chunk."""
        chunk = self._last(key)
        return frames.decode(chunk[key], chunk)

    def _last(self, key: str | None = None) -> dict[str, frames.Column]:
        """The latest chunk, encoded; ``key`` must be one of its keys."""
        if not self._chunks:
            raise ValueError(f"rollout memory '{self.name}' holds no chunk yet; store one first")
        chunk = self._chunks[-1]
        if key is not None and key not in chunk:
            raise KeyError(f"rollout memory '{self.name}' has no key {key!r}; it holds {list(chunk)}")
        return chunk

    def last_chunk(self) -> dict[str, np.ndarray]:
        """The latest chunk, ``(W, T + 1, ...)`` per key (a new dict; frame stacks rebuilt, other
        arrays the stored ones)."""
        return frames.decode_chunk(self._last())

    def gather(self, key: str, workers: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``(n, *row_shape)`` values of ``key`` at the (worker, row) pairs of the latest chunk (frame
        stacks rebuilt for those rows only)."""
        chunk = self._last(key)
        return frames.decode_rows(chunk[key], workers, rows, chunk)

    def store(self, chunk: Mapping[str, np.ndarray]) -> None:
        """Keep ``chunk`` (by reference), dropping the oldest beyond ``keep``; a chunk that does not fit
        is refused (``TypeError``, ``ValueError``), nothing changed."""
        _, new_specs = validate_chunk(chunk, self.num_workers, self._specs, None, self.name)
        self._specs.update(new_specs)
        self._chunks.append(frames.encode_chunk(chunk) if self.frames else dict(chunk))
        self._stored += 1

    def state_dict(self) -> dict[str, int]:
        """Counters only: ``{"stored": chunks stored so far}``."""
        return {"stored": self._stored}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self._stored = int(state["stored"])

    def prepare_restore(self, state: Mapping[str, int]) -> Readback:
        """Nothing to read or check: the restore gives the checkpoint's counters (whole, no ring)."""
        return Readback(RingState(), RingState())

    def restore(self, state: Mapping[str, int], prepared: Readback | None = None) -> None:
        """Return to a checkpoint's counters (the chunks are not kept: the next explore refills it)."""
        self.load_state_dict(state)
