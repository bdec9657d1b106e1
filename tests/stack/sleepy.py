"""A SAC agent whose chosen update sleeps (a long, busy stage), and a parameter file that uses it.

The sleeping update writes ``<marker>`` with the flow process's pid first, so a test knows the run
is inside the stage and which process runs it. Used as ``params=tests.stack.sleepy`` in deployment
runs of the crash-watcher tests: one run sleeps longer than the watcher's bound and must stay
RUNNING; another sleeps until its host is killed and must be marked Crashed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from digideep.agents.sac import SAC
from params import pendulum_sac
from tests.flows import faulty

cpanel = {
    **{key: value for key, value in faulty.cpanel.items() if key not in ("fail_at_update", "marker")},
    "number_epochs": 3,  # iterations to train (epoch_size 1)
    "sleep_at_update": 2,  # the update call that sleeps
    "sleep_seconds": 0.0,  # how long it sleeps (a busy stage: the process stays alive)
    "marker": "",  # file that receives the flow process's pid when the sleep starts
}


def gen_params(cpanel: dict) -> dict:
    base = {key: value for key, value in cpanel.items() if key in pendulum_sac.cpanel}
    params = pendulum_sac.gen_params(base)
    agent = params["agents"]["agent"]
    agent["type"] = "tests.stack.sleepy.SleepySAC"
    agent["args"].update(
        sleep_at_update=cpanel["sleep_at_update"],
        sleep_seconds=cpanel["sleep_seconds"],
        marker=cpanel["marker"],
    )
    return params


class SleepySAC(SAC):
    """SAC whose ``sleep_at_update``-th update sleeps ``sleep_seconds`` before it learns."""

    def __init__(self, *args: Any, sleep_at_update: int, sleep_seconds: float, marker: str, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.sleep_at_update = sleep_at_update
        self.sleep_seconds = sleep_seconds
        self.marker = Path(marker) if marker else None
        self.update_calls = 0

    def update(self, batches: Any) -> dict[str, float]:
        self.update_calls += 1
        if self.update_calls == self.sleep_at_update and self.sleep_seconds > 0:
            if self.marker is not None:
                self.marker.write_text(str(os.getpid()))
            time.sleep(self.sleep_seconds)
        return super().update(batches)
