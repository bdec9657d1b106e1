"""Preallocated buffers of one trajectory chunk, written one row per step by the Explorer.

Buffers are time-major, ``(capacity, W, ...)``, so that writing row ``t`` touches one contiguous
block; :meth:`ChunkBuffers.finish` hands them out batch-major, ``(W, T + 1, ...)``, as
``docs/architecture.md`` fixes. Numeric infos are copied into buffers at every step rather than kept
as dicts: holding a thousand info dicts and their arrays per chunk costs more (allocator and cache
churn) than the copies.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from digideep.environment.data_helpers import placeholder_array

__all__ = ["ChunkBuffers"]

_SKIP_INFOS = frozenset({"final_obs", "final_info", "episode"})


def _grown(buf: np.ndarray, capacity: int, fill: Any = None) -> np.ndarray:
    shape = (capacity - buf.shape[0], *buf.shape[1:])
    extra = placeholder_array(shape, buf.dtype) if fill is None else np.full(shape, fill, buf.dtype)
    return np.concatenate([buf, extra])


class ChunkBuffers:
    """Rows ``0 .. capacity - 1`` of every chunk entry, for ``W`` workers.

    Args:
        capacity: rows (``n_steps + 1`` for a fixed-length chunk).
        num_workers: ``W``.
        observations: ``{leaf path: (shape, dtype)}``; ``""`` for a non-Dict space.
        actions: ``{agent: (shape, dtype)}``.
        hidden: ``{agent: (W, h)}`` hidden-state shapes.
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
        self.masks = np.empty((capacity, W, 1), np.float32)
        self.rewards = np.empty((capacity, W), np.float32)
        self.terminals = np.empty((capacity, W), np.float32)
        self.truncations = np.empty((capacity, W), np.float32)
        self.actions = {n: np.empty((capacity, W, *s), d) for n, (s, d) in actions.items()}
        self.hidden = {n: np.empty((capacity, *s), np.float32) for n, s in hidden.items()}
        self.artifacts: dict[str, dict[str, np.ndarray]] = {n: {} for n in actions}
        self.finals: list[tuple[int, int, dict[str, np.ndarray]]] = []
        self.info_values: dict[str, np.ndarray] = {}
        self.info_valid: dict[str, np.ndarray] = {}
        self.info_fast: list[tuple[str, str, np.ndarray, np.ndarray]] = []
        self.info_len = -1

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
        self.info_values = {k: _grown(v, capacity) for k, v in self.info_values.items()}
        self.info_valid = {k: _grown(v, capacity, True) for k, v in self.info_valid.items()}
        self._refresh_fast()
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
        """Record row ``t``'s numeric infos (the Explorer inlines the common case, see ``info_fast``).

        At a step where some workers ended their episode, SAME_STEP puts their reset info in
        ``infos`` and the transition's own info in ``infos["final_info"]``; row t records the latter.
        """
        final, ended = infos.get("final_info"), infos.get("_final_info")
        for source in (infos,) if final is None else (infos, final):
            for key, value in source.items():
                if key in self.info_values or key.startswith("_") or key in _SKIP_INFOS:
                    continue
                if (
                    isinstance(value, np.ndarray)
                    and value.dtype.kind in "biuf"
                    and value.shape[:1] == (self.num_workers,)
                ):
                    self.info_values[key] = placeholder_array((self.capacity, *value.shape), value.dtype)
                    self.info_valid[key] = np.ones((self.capacity, self.num_workers), bool)
        for key, values in self.info_values.items():
            value = infos.get(key)
            if value is not None:
                values[t] = value
                self.info_valid[key][t] = infos.get("_" + key, True)
            if final is not None:
                values[t, ended] = placeholder_array((), values.dtype)
                self.info_valid[key][t, ended] = True
                if key in final:
                    mask = ended & final.get("_" + key, ended)
                    values[t, mask] = final[key][mask]
        if final is None:
            self.info_len = len(infos)
            self._refresh_fast()

    def _refresh_fast(self) -> None:
        self.info_fast = [(k, "_" + k, v, self.info_valid[k]) for k, v in self.info_values.items()]

    # -- output --------------------------------------------------------------------------------
    def finish(self, T: int) -> dict[str, np.ndarray]:
        """The chunk of rows ``0..T`` (row T: final prestep), batch-major ``(W, T + 1, ...)``.

        Fills the final row's transition entries with placeholders, builds ``/next_observations``
        (row t+1's observation, or the episode's final observation where it ended at row t).
        """
        rows = T + 1
        for buf in (self.rewards, self.terminals, self.truncations):
            buf[T] = np.nan
        out: dict[str, np.ndarray] = {}
        for key, buf in self.obs.items():
            out["/observations" + key] = buf[:rows]
            nxt = np.empty_like(buf[:rows])
            nxt[:T] = buf[1:rows]
            nxt[T] = placeholder_array(buf.shape[1:], buf.dtype)
            out["/next_observations" + key] = nxt
        for t, w, final in self.finals:
            for key, value in final.items():
                out["/next_observations" + key][t, w] = value
        out["/masks"] = self.masks[:rows]
        out["/rewards"] = self.rewards[:rows, :, None]
        out["/terminals"] = self.terminals[:rows, :, None]
        out["/truncations"] = self.truncations[:rows, :, None]
        for key, values in self.info_values.items():
            values, valid = values[:rows], self.info_valid[key][:rows]
            values[T] = placeholder_array(values.shape[1:], values.dtype)
            if not valid.all():
                values[~valid] = placeholder_array((), values.dtype)
            out["/infos/" + key] = values
        for name, actions in self.actions.items():
            out[f"/agents/{name}/actions"] = actions[:rows]
            out[f"/agents/{name}/hidden_state"] = self.hidden[name][:rows]
            for key, buf in self.artifacts[name].items():
                out[f"/agents/{name}/artifacts/{key.strip('/')}"] = buf[:rows]
        return {k: np.ascontiguousarray(v.swapaxes(0, 1)) for k, v in out.items()}
