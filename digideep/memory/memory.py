"""The replay memory (a RAM ring and an append-only Zarr log), and what the Runner needs of a memory."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from digideep.memory.log import Readback, ZarrLog
from digideep.memory.ring import DeviceMirror, KeySpec, Ring, RingState, ring_slices, validate_chunk
from digideep.memory.writer import LogWriter
from digideep.storage.location import Location
from digideep.utility.placeholders import placeholder_array


@runtime_checkable
class TrajectoryMemory(Protocol):
    """What the Runner needs of every memory of trajectory chunks: it stores each explored chunk,
    saves its counters in a checkpoint and returns to a checkpoint's state (checked first by
    ``prepare_restore``, then applied by ``restore``)."""

    name: str
    num_workers: int

    def store(self, chunk: Mapping[str, np.ndarray]) -> None: ...
    def prepare_restore(self, state: Mapping[str, int]) -> Readback: ...
    def restore(self, state: Mapping[str, int], prepared: Readback | None = None) -> None: ...
    def state_dict(self) -> dict[str, int]: ...


@runtime_checkable
class DurableMemory(TrajectoryMemory, Protocol):
    """A memory that keeps its rows in the session and writes them behind the training thread: the
    Runner guards its writes by the session's lease, flushes it before each checkpoint, tells it
    which checkpoints are committed (its log keeps what they need) and closes it at the run's end."""

    def guard_writes(self, guard: Callable[[], None]) -> None: ...
    def flush(self) -> None: ...
    def checkpoint_committed(self, state: Mapping[str, int] | None = None, keep: int = 0) -> None: ...
    def close(self) -> None: ...


class Memory:
    """Circular memory of trajectory chunks, ``capacity`` rows (steps) per worker.

    Args:
        path: the log's place, a local folder or an fsspec URL (``s3://bucket/.../train.zarr``);
            ``None`` keeps the memory in RAM only.
        num_workers: ``W``, the explorer's worker count; every chunk must have it.
        capacity: ``C``, rows per worker (so ``W * C`` rows in all); at least 2.
        mode: ``"ram"`` (default): sampling reads the ring, the log is written behind the training
            thread; ``"disk"``: no ring, :meth:`store` writes the log and sampling reads it
            (memories larger than RAM, far slower).
        zarr_chunk_rows: rows per Zarr chunk; ``None``: at most 1/16 of the ring and about 4 MiB
            of all workers (``"ram"``) or 256 KiB of one worker (``"disk"``).
        compression: ``None`` (default), ``"zstd"`` or ``"lz4"`` (level 1); ``"images"``: zstd for
            uint8 image keys only (Atari frame stacks).
        name: shown in messages and logs; defaults to the path's stem.
        write_behind: ``"ram"`` mode: write the log on a background thread (default) or in :meth:`store`.
        max_pending: ``"ram"`` mode: writes that may wait for the background thread.
    """

    def __init__(
        self,
        path: str | Path | None,
        num_workers: int,
        capacity: int,
        mode: str = "ram",
        zarr_chunk_rows: int | None = None,
        compression: str | None = None,
        name: str | None = None,
        write_behind: bool = True,
        max_pending: int = 16,
    ) -> None:
        for arg, value, low in (("num_workers", num_workers, 1), ("capacity", capacity, 2)):
            if not isinstance(value, int | np.integer) or value < low:
                raise ValueError(f"Memory {arg} must be an integer >= {low}, got {value!r}")
        if zarr_chunk_rows is not None and zarr_chunk_rows < 1:
            raise ValueError(f"Memory zarr_chunk_rows must be >= 1 or None, got {zarr_chunk_rows!r}")
        if mode not in ("ram", "disk"):
            raise ValueError(f"Memory mode must be 'ram' or 'disk', got {mode!r}")
        if mode == "disk" and path is None:
            raise ValueError("Memory mode 'disk' needs a path or URL for its Zarr log")
        self.location = None if path is None else Location(path)
        self.name = name or (self.location.stem if self.location is not None else "memory")
        self.mode = mode
        self.num_workers, self.capacity = int(num_workers), int(capacity)
        W, C = self.num_workers, self.capacity
        self.state = RingState()
        self.specs: dict[str, KeySpec] = {}  # keys stored so far, in the order they came
        self.ring = Ring(W, C) if mode == "ram" else None
        self.log: ZarrLog | None = None
        self.writer: LogWriter | None = None
        if self.location is not None:
            disk = mode == "disk"  # sampling reads the log: every store writes it through, in store()
            self.log = ZarrLog(self.location, W, C, self.name, zarr_chunk_rows, compression, disk)
            self.writer = LogWriter(self.log, write_behind and not disk, max_pending, through=disk)
        self._prestep: dict[str, np.ndarray] = {}  # the final prestep row of every key, (W, *row_shape)
        self.mirrors: dict[tuple[torch.device, bool | None], DeviceMirror] = {}

    @classmethod
    def from_params(cls, *, location: str, num_workers: int, name: str, **args: Any) -> Memory:
        """Build from a params ``memory`` entry: ``args`` plus what the Runner knows (see ``components``)."""
        return cls(location, num_workers=num_workers, name=name, **args)

    @property
    def size(self) -> int:
        """Valid transition rows per worker (the final prestep is not one)."""
        return self.state.size

    @property
    def pos(self) -> int:
        """Physical row of the final prestep, which the next chunk overwrites."""
        return self.state.pos

    @property
    def total(self) -> int:
        """Rows stored since the memory was created (``T`` per chunk)."""
        return self.state.total

    @property
    def path(self) -> str | None:
        """The log's place as given (a path or URL), ``None`` for a RAM-only memory."""
        return None if self.location is None else str(self.location)

    def keys(self) -> list[str]:
        """Flat keys stored so far, in the order they first appeared."""
        return list(self.specs)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self.specs))

    def __repr__(self) -> str:
        return f"Memory({self.name!r}, {self.mode}, W={self.num_workers}, C={self.capacity}, {self.state})"

    def __getitem__(self, key: str) -> np.ndarray:
        """The ``(W, C, ...)`` ring of ``key`` (in "disk" mode a copy read from the log)."""
        if self.ring is not None:
            return self.ring.arrays[self._known(key)]
        spec = self.specs[self._known(key)]
        ring = placeholder_array((self.num_workers, self.capacity, *spec.shape), spec.dtype)
        rows = self._rows(key, self.state.first, self.total + 1)
        ring[:, (self.state.first + np.arange(rows.shape[1])) % self.capacity] = rows
        return ring

    def physical_rows(self, logical: np.ndarray) -> np.ndarray:
        """Physical rows of valid rows ``logical`` (int array, ``0`` = oldest .. ``size - 1`` = newest)."""
        rows = logical + (self.state.pos - self.state.size)
        if self.state.pos < self.state.size:  # the valid window wraps: fold the negative rows back
            rows %= self.capacity
        return rows

    def valid_rows(self) -> np.ndarray:
        """Physical rows of every valid transition, oldest first: ``(size,)`` int64."""
        return self.physical_rows(np.arange(self.size, dtype=np.int64))

    def gather(self, key: str, workers: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Rows ``(workers[i], rows[i])`` (physical) of ``key``: ``(n, *row_shape)``, a new array."""
        self._known(key)
        if self.ring is not None:
            return self.ring.gather(key, workers, rows)
        return self._log.gather(key, workers, self.state.total - (self.state.pos - rows) % self.capacity)

    def last_chunk(self) -> dict[str, np.ndarray]:
        """The latest stored chunk, ``(W, T + 1, ...)`` per key (views of the ring unless it wraps)."""
        rows = self.state.last_chunk_rows
        if rows == 0:
            raise ValueError(f"memory '{self.name}' holds no chunk yet; store one first")
        return {key: self._rows(key, self.total - rows + 1, self.total + 1) for key in self.specs}

    def _rows(self, key: str, start: int, stop: int) -> np.ndarray:
        """Global rows ``start .. stop - 1`` of ``key`` (``stop <= total + 1``, at most ``C`` rows),
        ``(W, stop - start, ...)``: views of the ring where they do not wrap, or read from the log."""
        if self.ring is not None:
            ring, pieces = (
                self.ring.arrays[key],
                ring_slices(start % self.capacity, stop - start, self.capacity),
            )
            parts = [ring[:, a:b] for a, b, _ in pieces]
        else:
            parts = [self._log.read(key, start, min(stop, self.total))]
            if stop > self.total and key in self._prestep:
                parts.append(self._prestep[key][:, None])
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)

    def mirror(
        self, device: torch.device | str, keys: Sequence[str], copy: bool | None = None
    ) -> DeviceMirror:
        """The rings of ``keys`` on ``device`` (:class:`~digideep.memory.ring.DeviceMirror`), kept equal
        to the RAM ring by every later :meth:`store`, the same object on later calls; refuses a key
        not stored yet or a ``mode="disk"`` memory (no RAM ring)."""
        if self.ring is None:
            raise ValueError(
                f"memory '{self.name}' reads Zarr (mode 'disk'): it has no RAM ring to mirror on "
                f"{device}; sample it on the host (the agent's replay_device: host)"
            )
        device = torch.device(device)
        mirror = self.mirrors.get((device, copy)) or DeviceMirror(self.ring, device, self.name, copy)
        mirror.add([self._known(key) for key in keys])
        self.mirrors[device, copy] = mirror  # kept once filled: a refused mirror is never written
        return mirror

    def _known(self, key: str) -> str:
        if key not in self.specs:
            raise KeyError(f"memory '{self.name}' has no key {key!r}; it holds {list(self.specs)}")
        return key

    @property
    def _log(self) -> ZarrLog:
        assert self.log is not None
        return self.log

    def store(self, chunk: Mapping[str, np.ndarray]) -> None:
        """Append a chunk, ``(W, T + 1, ...)`` per key, into the ring and, with a path, the log; raises
        (``TypeError``, ``ValueError``, changing nothing) if it does not fit, or a failed background
        write's error."""
        rows, new_specs = validate_chunk(chunk, self.num_workers, self.specs, self.capacity, self.name)
        if self.writer is not None:
            self.writer.check()  # refuse before changing anything
        pieces = ring_slices(self.state.pos, rows, self.capacity)
        self.specs.update(new_specs)
        if self.ring is not None:
            self.ring.store(chunk, pieces, new_specs)
        W = self.num_workers
        self._prestep = {
            key: chunk[key][:, -1].copy() if key in chunk else placeholder_array((W, *spec.shape), spec.dtype)
            for key, spec in self.specs.items()
        }
        if self.writer is not None:
            self.writer.append(chunk, self.state.total, rows - 1, self.specs, new_specs)
        self.state = self.state.advance(rows, self.capacity)
        for mirror in self.mirrors.values():
            mirror.write(pieces)

    def guard_writes(self, guard: Callable[[], None]) -> None:
        """Call ``guard()`` (the session's lease check) before every write made behind the training
        thread; a write is skipped when it raises, and the next store raises its error."""
        if self.writer is not None and self.ring is not None:
            self.writer.guard = guard

    def flush(self) -> None:
        """Make the stored rows durable: write the chunks being filled, then commit the pointers."""
        if self.writer is not None:
            self.writer.flush(self.state, self.specs, self._prestep if self.state.last_chunk_rows else {})

    def wait(self) -> None:
        """Wait until the background writer appended every stored chunk (nothing is committed)."""
        if self.writer is not None:
            self.writer.wait()

    def checkpoint_committed(self, state: Mapping[str, int] | None = None, keep: int = 0) -> None:
        """Say that a checkpoint holding ``state`` (default: the current one, which must be flushed) is
        durable: the log keeps the rows of the newest ``keep`` such checkpoints (``0``: all) and
        deletes older chunks."""
        if self.writer is not None:
            self.writer.checkpoint(self.state if state is None else self._ring_state(state), keep)

    def load(self) -> None:
        """Return to the log's last commit.

        Raises:
            FileNotFoundError, ValueError: nothing was flushed at :attr:`path`; it is another memory.
        """
        if self.log is None:
            raise FileNotFoundError(
                f"memory '{self.name}' keeps no durable copy (it was created without a path); nothing to load"
            )
        self.wait()
        self.restore(
            {**self.log.open().state.as_dict(), "num_workers": self.num_workers, "capacity": self.capacity}
        )

    def prepare_restore(self, state: Mapping[str, int]) -> Readback:
        """Read back and check what :meth:`restore` to ``state`` gives (the next ring, every chunk's
        checksum checked), changing nothing (:meth:`~digideep.memory.log.ZarrLog.read_back`)."""
        target = self._ring_state(state)
        if self.log is None:  # rows stored after the target overwrote its oldest ones
            return Readback(target, self.state.restored(target, self.capacity, self.state.first))
        self.wait()
        return self.log.read_back(target, self.ring)

    def restore(self, state: Mapping[str, int], prepared: Readback | None = None) -> None:
        """Return to a checkpoint's state, data included (a memory without a path rolls back in RAM,
        keeping the rows later stores left); ``prepared``: :meth:`prepare_restore`'s."""
        prepared = prepared or self.prepare_restore(state)
        if self.writer is not None:
            self.writer.wait()
            self._log.adopt(prepared)
            self.specs = dict(prepared.specs)
            if self.ring is not None:
                self.ring.arrays = dict(prepared.arrays or {})
            self._prestep = dict(prepared.prestep)
            self.writer.reset(prepared.state.total)
        self.state = prepared.state
        for mirror in self.mirrors.values():
            mirror.refill()

    def state_dict(self) -> dict[str, int]:
        """The pointers, ``num_workers`` and ``capacity`` (ints, never the data)."""
        return {**self.state.as_dict(), "num_workers": self.num_workers, "capacity": self.capacity}

    load_state_dict = restore

    def close(self) -> None:
        """Wait for the writes in flight and end the background writer."""
        if self.writer is not None:
            self.writer.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _ring_state(self, state: Mapping[str, int]) -> RingState:
        layout = (state.get("num_workers"), state.get("capacity"))
        if layout != (self.num_workers, self.capacity):
            raise ValueError(
                f"memory '{self.name}': saved state has num_workers={layout[0]}, capacity={layout[1]}, "
                f"this memory num_workers={self.num_workers}, capacity={self.capacity}"
            )
        return RingState.from_dict(state)
