"""Each stage is a Prefect task of its own, with a timeout from the params.

Under a real Prefect server and process worker: a train run whose update stage hangs fails when the
stage's timeout passes (the hung task fails, and with it the flow run), its task runs are named
after their stages, and the UI's Retry resumes it from the newest checkpoint to the end.
"""

from __future__ import annotations

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

from digideep.errors import UsageError
from flows.recovery import KILLED_PREFIX
from flows.train import STAGE_TASKS, stage_timeouts
from tests.flows.test_train_flow import flow_run_logs, flow_run_name, start, wait

STAGES = {"explore", "store", "sample", "update", "test", "log", "checkpoint"}


def task_runs_of(flow_run_id: str) -> list:
    with get_client(sync_client=True) as client:
        return client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))


def task_of(task_run) -> str:
    """The task's name: Prefect keys a task run's task as ``<function name>-<code hash>``."""
    return task_run.task_key.rsplit("-", 1)[0]


def test_a_hung_stage_fails_its_task_and_the_run_and_a_retry_resumes_it(stack, tmp_path):
    sessions = tmp_path / "sessions"
    marker = tmp_path / "hang-begun"
    cpanel = {"update_timeout": 10.0, "hang_at_update": 3, "marker": str(marker)}
    parameters = {"params": "tests.flows.hanging", "cpanel": cpanel, "session_path": str(sessions)}

    flow_run_id = start("train/pendulum-sac", parameters)
    assert wait(flow_run_id, stack) == "FAILED"
    assert marker.exists(), "the update should have hung"
    failed = [t for t in task_runs_of(flow_run_id) if t.state.type.value == "FAILED"]
    assert [task_of(t) for t in failed] == ["update"]
    assert failed[0].name.startswith("update[") and "timeout of 10.0 second" in failed[0].state.message

    stack.run("flow-run", "retry", flow_run_id)  # what the UI's Retry button does
    assert wait(flow_run_id, stack, states={"COMPLETED", "FAILED", "CRASHED"}) == "COMPLETED"
    session = sessions / f"{flow_run_name(flow_run_id)}-{flow_run_id[:8]}"
    assert "resuming session" in (session / "log.txt").read_text()
    assert (session / "done.json").exists()
    # a failure, not a kill: the failed attempt sent its whole log, the retry sends none of it again
    assert not [m for m in flow_run_logs(flow_run_id) if m.startswith(KILLED_PREFIX)]

    task_runs = task_runs_of(flow_run_id)
    assert {task_of(t) for t in task_runs} == STAGES
    for task_run in task_runs:  # a run is named after its stage and where it ran
        assert task_run.name.startswith(f"{task_of(task_run)}[epoch "), task_run.name
    updates = sorted(
        t.name for t in task_runs if task_of(t) == "update" and t.state.type.value == "COMPLETED"
    )
    assert updates == [f"update[epoch {i}, iteration {i}]" for i in range(4)]


def test_stage_timeouts_name_a_bad_stage_or_value_in_one_line():
    assert stage_timeouts({})["update"] is None
    both = stage_timeouts({"stage_timeouts": dict.fromkeys(("explore", "store", "sample", "update"), 5)})
    assert both["iterate"] == 20  # one task per iteration: the sum of its stages' timeouts
    assert set(STAGE_TASKS) == STAGES | {"iterate"}
    with pytest.raises(UsageError, match="unknown stage 'explor'"):
        stage_timeouts({"stage_timeouts": {"explor": 5}})
    with pytest.raises(UsageError, match="positive number"):
        stage_timeouts({"stage_timeouts": {"checkpoint": -1}})
