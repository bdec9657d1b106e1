"""Trajectory chunks: what the Explorer hands out (:class:`Chunk`, with the :class:`EpisodeStats` of
the episodes that ended in it), and the preallocated buffers it writes them in, one row per step.

Buffers are time-major, ``(capacity, W, ...)``, so that writing row ``t`` touches one contiguous
block; :meth:`ChunkBuffers.finish` hands out a copy of the chunk's rows, batch-major ``(W, T + 1, ...)``,
as ``docs/architecture.md`` fixes. The copy is the caller's to keep, so the Explorer writes its next
chunk of the same size into the same buffers (:meth:`ChunkBuffers.start`): a step writes every row
entry, a known info a step lacks included (its placeholder), and nothing of an earlier chunk shows
through. Numeric infos are copied into buffers at every step rather than kept as dicts: holding a
thousand info dicts and their arrays per chunk costs more (allocator and cache churn) than the copies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from digideep.utility.placeholders import placeholder_array

__all__ = ["NO_EPISODES", "Chunk", "ChunkBuffers", "EpisodeStats"]

_SKIP_INFOS = frozenset({"final_obs", "final_info", "episode"})


def _placeholder(dtype: np.dtype) -> Any:
    """The placeholder of ``dtype`` as a scalar, to fill rows by broadcasting."""
    return placeholder_array((), dtype)[()]


def _grown(buf: np.ndarray, capacity: int) -> np.ndarray:
    extra = placeholder_array((capacity - buf.shape[0], *buf.shape[1:]), buf.dtype)
    return np.concatenate([buf, extra])


def _batch_major(rows: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of time-major ``rows`` ``(T + 1, W, ...)`` as ``(W, T + 1, ...)``."""
    return rows.swapaxes(0, 1).copy()


@dataclass(frozen=True)
class EpisodeStats:
    """The episodes that ended during one ``Explorer.update``, in the order they ended.

    Attributes:
        returns: (n,) float64, each episode's undiscounted return (``RecordEpisodeStatistics``).
        lengths: (n,) float64, each episode's length in steps.
    """

    returns: np.ndarray = field(default_factory=lambda: np.zeros(0))
    lengths: np.ndarray = field(default_factory=lambda: np.zeros(0))


NO_EPISODES = EpisodeStats()
"""The statistics of a chunk in which no episode ended (one object: its arrays are empty)."""


class Chunk(dict):
    """What ``Explorer.update`` returns: the flat trajectory dict (:mod:`digideep.environment.explorer`
    describes its keys), and its episodes.

    A plain ``dict[str, np.ndarray]`` in every use (memories store it as one); ``episodes`` rides
    beside the arrays.

    Attributes:
        episodes: the statistics of the episodes that ended in this chunk.
    """

    def __init__(self, arrays: dict[str, np.ndarray], episodes: EpisodeStats) -> None:
        super().__init__(arrays)
        self.episodes = episodes


class ChunkBuffers:
    """Rows ``0 .. capacity - 1`` of every chunk entry, for ``W`` workers.

    Args:
        capacity: rows (``n_steps + 1`` for a fixed-length chunk).
        num_workers: ``W``.
        observations: ``{leaf path: (shape, dtype)}``; ``""`` for a non-Dict space.
        actions: ``{agent: (shape, dtype)}``.
        hidden: ``{agent: (W, h)}`` hidden-state shapes.

    Attributes:
        finals: ``(row, worker, {leaf path: final observation})`` of the episodes that ended in the chunk.
        infos: ``{key: (capacity, W, ...)}`` of the numeric infos seen so far, in the order first seen;
            a worker's row holds the placeholder where the env gave it no value.
    """

    def __init__(
        self,
        capacity: int,
        num_workers: int,
        observations: dict[str, tuple[tuple[int, ...], np.dtype]],
        actions: dict[str, tuple[tuple[int, ...], np.dtype]],
        hidden: dict[str, tuple[int, ...]],
    ) -> None:
        W = self.num_workers = num_workers
        self.capacity = capacity
        self.obs = {k: np.empty((capacity, W, *s), d) for k, (s, d) in observations.items()}
        self._obs_fills = {k: _placeholder(np.dtype(d)) for k, (_, d) in observations.items()}
        self.masks = np.empty((capacity, W, 1), np.float32)
        self.rewards = np.empty((capacity, W), np.float32)
        self.terminals = np.empty((capacity, W), np.float32)
        self.truncations = np.empty((capacity, W), np.float32)
        self.actions = {n: np.empty((capacity, W, *s), d) for n, (s, d) in actions.items()}
        self.action_fills = {n: _placeholder(np.dtype(d)) for n, (_, d) in actions.items()}
        """``{agent: placeholder}`` of each agent's action dtype."""
        self.hidden = {n: np.empty((capacity, *s), np.float32) for n, s in hidden.items()}
        self.artifacts: dict[str, dict[str, np.ndarray]] = {n: {} for n in actions}
        self.finals: list[tuple[int, int, dict[str, np.ndarray]]] = []
        self.infos: dict[str, np.ndarray] = {}
        self._info_fills: dict[str, Any] = {}
        # the common step: the same info keys as the last step without episode ends, written without
        # looking for new ones (write_infos): (key, its mask's key, buffer, placeholder)
        self._step_info_count = -1
        self._step_infos: list[tuple[str, str, np.ndarray, Any]] = []

    def start(self) -> None:
        """Begin a new chunk in these buffers: forget the last chunk's final observations, and reset
        the artifacts to placeholders (an agent need not output every artifact at every row)."""
        self.finals = []
        for buffers in self.artifacts.values():
            for buf in buffers.values():
                buf[...] = _placeholder(buf.dtype)

    def grow(self, capacity: int) -> None:
        """Enlarge every buffer to ``capacity`` rows (episode-count mode)."""
        self.obs = {k: _grown(v, capacity) for k, v in self.obs.items()}
        self.masks, self.rewards = _grown(self.masks, capacity), _grown(self.rewards, capacity)
        self.terminals, self.truncations = (
            _grown(self.terminals, capacity),
            _grown(self.truncations, capacity),
        )
        self.actions = {k: _grown(v, capacity) for k, v in self.actions.items()}
        self.hidden = {k: _grown(v, capacity) for k, v in self.hidden.items()}
        self.artifacts = {
            n: {k: _grown(v, capacity) for k, v in a.items()} for n, a in self.artifacts.items()
        }
        self.infos = {k: _grown(v, capacity) for k, v in self.infos.items()}
        self._step_infos = self._infos_of_a_step()
        self.capacity = capacity

    def artifact(self, name: str, key: str, value: Any) -> np.ndarray:
        """The buffer of agent ``name``'s artifact ``key``, made (placeholder-filled) at first sight."""
        buf = self.artifacts[name].get(key)
        if buf is None:
            value = np.asarray(value)
            dtype = np.float32 if value.dtype.kind == "f" else value.dtype
            buf = self.artifacts[name][key] = placeholder_array((self.capacity, *value.shape), dtype)
        return buf

    # -- infos ---------------------------------------------------------------------------------
    def write_infos(self, t: int, infos: dict) -> None:
        """Record row ``t``'s numeric infos: every info key seen so far gets a value or its placeholder.

        At a step where some workers ended their episode, SAME_STEP puts their reset info in
        ``infos`` and the transition's own info in ``infos["final_info"]``; row t records the latter.
        """
        if "final_info" not in infos and len(infos) == self._step_info_count:
            try:
                for key, mask_key, values, fill in self._step_infos:
                    values[t] = infos[key]
                    given = infos[mask_key]
                    if not given.all():
                        values[t, ~given] = fill
                return
            except KeyError:  # other keys than the last step's: the general path below
                pass
        final, ended = infos.get("final_info"), infos.get("_final_info")
        self._add_infos(infos)
        if final is not None:
            self._add_infos(final)
        for key, values in self.infos.items():
            fill, row, value = self._info_fills[key], values[t], infos.get(key)
            row[...] = fill if value is None else value
            given = infos.get("_" + key)
            if value is not None and given is not None:
                row[~given] = fill
            if final is not None:
                row[ended] = fill
                if key in final:
                    given = ended & final.get("_" + key, ended)
                    row[given] = final[key][given]
        if final is None:
            self._step_info_count = len(infos)
        self._step_infos = self._infos_of_a_step()

    def _infos_of_a_step(self) -> list[tuple[str, str, np.ndarray, Any]]:
        return [(key, "_" + key, values, self._info_fills[key]) for key, values in self.infos.items()]

    def _add_infos(self, infos: dict) -> None:
        """Buffers for the numeric per-worker infos of ``infos`` not seen before (placeholder-filled)."""
        for key, value in infos.items():
            if key in self.infos or key.startswith("_") or key in _SKIP_INFOS:
                continue
            if (
                isinstance(value, np.ndarray)
                and value.dtype.kind in "biuf"
                and value.shape[:1] == (self.num_workers,)
            ):
                self.infos[key] = placeholder_array((self.capacity, *value.shape), value.dtype)
                self._info_fills[key] = _placeholder(value.dtype)

    # -- output --------------------------------------------------------------------------------
    def finish(self, T: int) -> dict[str, np.ndarray]:
        """A copy of the chunk of rows ``0..T`` (row T: final prestep), batch-major ``(W, T + 1, ...)``.

        Fills the final row's transition entries with placeholders, builds ``/next_observations``
        (row t+1's observation, or the episode's final observation where it ended at row t).
        """
        rows = T + 1
        for buf in (self.rewards, self.terminals, self.truncations):
            buf[T] = np.nan
        out: dict[str, np.ndarray] = {}
        for key, buf in self.obs.items():
            obs = out["/observations" + key] = _batch_major(buf[:rows])
            following = out["/next_observations" + key] = np.empty_like(obs)
            following[:, :T] = obs[:, 1:]
            following[:, T] = self._obs_fills[key]
        for t, w, final in self.finals:
            for key, value in final.items():
                out["/next_observations" + key][w, t] = value
        out["/masks"] = _batch_major(self.masks[:rows])
        out["/rewards"] = _batch_major(self.rewards[:rows, :, None])
        out["/terminals"] = _batch_major(self.terminals[:rows, :, None])
        out["/truncations"] = _batch_major(self.truncations[:rows, :, None])
        for key, values in self.infos.items():
            values[T] = self._info_fills[key]
            out["/infos/" + key] = _batch_major(values[:rows])
        for name, actions in self.actions.items():
            out[f"/agents/{name}/actions"] = _batch_major(actions[:rows])
            out[f"/agents/{name}/hidden_state"] = _batch_major(self.hidden[name][:rows])
            for key, buf in self.artifacts[name].items():
                out[f"/agents/{name}/artifacts/{key.strip('/')}"] = _batch_major(buf[:rows])
        return out
