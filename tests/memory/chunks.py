"""Trajectory chunks in the format of docs/architecture.md, with values that tell where they came from."""

from __future__ import annotations

import numpy as np

TRANSITION_KEYS = ("/rewards", "/terminals", "/truncations", "/next_observations")


def make_chunk(
    num_workers: int, steps: int, start: int, obs_dim: int = 3, act_dim: int = 2
) -> dict[str, np.ndarray]:
    """A chunk of ``steps + 1`` rows whose row ``t`` of worker ``w`` encodes ``(w, start + t)``.

    ``/observations[w, t, 0] == 1000 * w + start + t``; transition keys of the final prestep row
    hold NaN placeholders, as the Explorer writes them.
    """
    rows = steps + 1
    stamp = (1000.0 * np.arange(num_workers)[:, None] + start + np.arange(rows)[None, :]).astype(np.float32)
    obs = stamp[..., None] + np.arange(obs_dim, dtype=np.float32) / 10
    chunk = {
        "/observations": obs,
        "/next_observations": obs + 1,
        "/masks": np.ones((num_workers, rows, 1), np.float32),
        "/rewards": stamp[..., None] / 7,
        "/terminals": np.zeros((num_workers, rows, 1), np.float32),
        "/truncations": np.zeros((num_workers, rows, 1), np.float32),
        "/agents/agent/actions": np.repeat(stamp[..., None], act_dim, axis=-1) * -1,
        "/agents/agent/hidden_state": np.zeros((num_workers, rows, 1), np.float32),
    }
    for key in TRANSITION_KEYS:
        chunk[key][:, -1] = np.nan
    return chunk


def stamps(values: np.ndarray) -> np.ndarray:
    """The ``(w, step)`` stamp of observation rows: ``values[..., 0]`` as int64."""
    return np.rint(values[..., 0]).astype(np.int64)
