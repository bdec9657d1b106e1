"""A tiny Pendulum SAC study for ``tests/flows/test_tune.py``: one trial pruned, one crashed once.

The search space is rigged by trial number so that the test's outcome does not depend on learning:
trial 1 plays 200-step test episodes (a return far below the threshold pruner's bound, so it is
pruned at its first test), every other trial 20-step ones (never below it); trial 2's train run
raises once after its first checkpoint (``tests.flows.faulty``), and the tune flow itself raises once
when it samples trial 4. Markers live in ``$DIGIDEEP_TUNE_TEST_DIR``.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.flows import faulty

cpanel = {
    **faulty.cpanel,
    "number_epochs": 3,  # 3 iterations of 40 frames, a test after each
    "epoch_size": 1,
    "n_steps": 40,
    "learning_starts": 40,
    "batch_size": 16,
    "hidden_sizes": [16, 16],
    "save_interval": 1,
    "test_interval": 1,
    "test_episodes": 1,
    "fail_at_update": 2,  # with a marker: the second update raises, once
    "episode_steps": 20,  # Pendulum's time limit
}


def gen_params(cpanel: dict) -> dict:
    params = faulty.gen_params({key: value for key, value in cpanel.items() if key in faulty.cpanel})
    params["env"]["max_episode_steps"] = cpanel["episode_steps"]
    return params


def search_space(trial) -> dict:
    folder = Path(os.environ["DIGIDEEP_TUNE_TEST_DIR"])
    tune_fault = folder / "tune-fault"
    if trial.number == 4 and not tune_fault.exists():
        tune_fault.write_text("fired")
        raise RuntimeError("injected fault in the tune flow")
    return {
        "lr": trial.suggest_float("lr", 1e-4, 1e-2, log=True),
        "episode_steps": 200 if trial.number == 1 else 20,
        "marker": str(folder / "trial-2-fault") if trial.number == 2 else "",
    }
