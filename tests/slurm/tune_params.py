"""A tiny Pendulum SAC study for ``tests/slurm/test_tune.py``: 150 frames a trial, a test every 50,
only the learning rate searched."""

from __future__ import annotations

from params.pendulum_sac import cpanel as shipped
from params.pendulum_sac import gen_params  # noqa: F401 (the parameter file's)

cpanel = {**shipped, "number_epochs": 3, "epoch_size": 1, "n_steps": 50, "learning_starts": 50,
          "batch_size": 16, "hidden_sizes": [16, 16], "buffer_size": 1000, "save_interval": 1,
          "test_episodes": 1, "test_win_size": 1}  # fmt: skip


def search_space(trial) -> dict:
    return {"lr": trial.suggest_float("lr", 1e-4, 1e-2, log=True)}
