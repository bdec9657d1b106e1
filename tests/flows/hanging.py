"""A SAC agent whose update hangs once, and a parameter file with a timeout on the update stage.

The hang is the kind a user meets (a stuck environment, an upload that never returns). A marker
file makes it hang only the first time, so the retried flow run gets past it. Used as
``--params tests.flows.hanging`` by the stage-task tests.
"""

from __future__ import annotations

import time
from typing import Any

from tests.flows import faulty

cpanel = {
    **{key: value for key, value in faulty.cpanel.items() if key not in ("fail_at_update", "marker")},
    "number_epochs": 4,  # iterations to train (epoch_size 1)
    "test_interval": 1,
    "update_timeout": 20.0,  # seconds the update stage may take before its task fails
    "hang_at_update": 3,  # the update call that hangs, the first time only
    "marker": "",  # file created when the hang has begun (empty: never hang)
}


def gen_params(cpanel: dict) -> dict:
    params = faulty.gen_params({**faulty.cpanel, **cpanel, "marker": ""})
    params["runner"]["stage_timeouts"] = {"update": cpanel["update_timeout"]}
    agent = params["agents"]["agent"]
    agent["type"] = "tests.flows.hanging.HangOnceSAC"
    del agent["args"]["fail_at_update"], agent["args"]["marker"]
    agent["args"].update(hang_at_update=cpanel["hang_at_update"], marker=cpanel["marker"])
    return params


class HangOnceSAC(faulty.FailOnceSAC):
    """SAC whose ``hang_at_update``-th update (counted over the whole run) hangs, once."""

    def __init__(self, *args: Any, hang_at_update: int, marker: str, **kwargs: Any) -> None:
        super().__init__(*args, fail_at_update=hang_at_update, marker=marker, **kwargs)

    def fault(self) -> None:
        time.sleep(3600)
