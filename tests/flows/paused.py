"""A SAC agent that pauses once at a chosen update until a file appears, and a parameter file that uses it.

The pause stands for a process that runs on after Prefect marked its flow run Crashed (the crash
watcher heard no heartbeat from it), so that a retry starts a second attempt beside it. Used as
``--params tests.flows.paused`` by the train flow tests.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.flows import faulty

cpanel = {
    **{key: value for key, value in faulty.cpanel.items() if key not in ("fail_at_update", "marker")},
    "pause_at_update": 3,  # the update call that pauses, the first time only
    "marker": "",  # file created when the pause has begun (empty: never pause)
    "release": "",  # the pause ends once this file exists
}


def gen_params(cpanel: dict) -> dict:
    params = faulty.gen_params({**faulty.cpanel, **cpanel, "marker": ""})
    agent = params["agents"]["agent"]
    agent["type"] = "tests.flows.paused.PauseOnceSAC"
    del agent["args"]["fail_at_update"], agent["args"]["marker"]
    agent["args"].update(
        pause_at_update=cpanel["pause_at_update"], marker=cpanel["marker"], release=cpanel["release"]
    )
    return params


class PauseOnceSAC(faulty.FailOnceSAC):
    """SAC whose ``pause_at_update``-th update (counted over the whole run) waits for ``release``, once."""

    def __init__(self, *args: Any, pause_at_update: int, marker: str, release: str, **kwargs: Any) -> None:
        super().__init__(*args, fail_at_update=pause_at_update, marker=marker, **kwargs)
        self.release = Path(release)

    def fault(self) -> None:
        while not self.release.exists():
            time.sleep(0.1)
