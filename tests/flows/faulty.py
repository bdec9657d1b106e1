"""A SAC agent that fails once at a chosen iteration, and a parameter file that uses it.

The failure is the kind a user meets (an exception in the middle of training, e.g. a NaN check or
an out-of-memory error). A marker file makes it fail only the first time, so the retried flow run
gets past it. Used as ``--params tests.flows.faulty`` by the Prefect tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from digideep.agents.sac import SAC
from params import pendulum_sac

cpanel = {
    **pendulum_sac.cpanel,
    "number_epochs": 6,  # iterations to train (epoch_size 1)
    "epoch_size": 1,
    "n_steps": 20,
    "learning_starts": 20,
    "batch_size": 32,
    "hidden_sizes": [32, 32],
    "save_interval": 1,
    "test_interval": 3,
    "test_episodes": 1,
    "buffer_size": 1000,
    "fail_at_update": 4,  # the update call that raises, the first time only
    "marker": "",  # file created when the fault has fired (empty: never fail)
}


def gen_params(cpanel: dict) -> dict:
    base = {key: value for key, value in cpanel.items() if key in pendulum_sac.cpanel}
    params = pendulum_sac.gen_params(base)
    agent = params["agents"]["agent"]
    agent["type"] = "tests.flows.faulty.FailOnceSAC"
    agent["args"].update(fail_at_update=cpanel["fail_at_update"], marker=cpanel["marker"])
    return params


class FailOnceSAC(SAC):
    """SAC whose ``fail_at_update``-th update (counted over the whole run) raises, once."""

    def __init__(self, *args: Any, fail_at_update: int, marker: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fail_at_update = fail_at_update
        self.marker = Path(marker) if marker else None
        self.update_calls = 0

    def update(self, batches: Any) -> dict[str, float]:
        self.update_calls += 1
        if self.marker is not None and self.update_calls == self.fail_at_update and not self.marker.exists():
            self.marker.write_text("fired")
            self.fault()
        return super().update(batches)

    def fault(self) -> None:
        """What happens at the chosen update: an exception (subclasses hang, for instance)."""
        raise RuntimeError(f"injected fault at update {self.update_calls}")

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "update_calls": self.update_calls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(state)
        self.update_calls = state.pop("update_calls")
        super().load_state_dict(state)
