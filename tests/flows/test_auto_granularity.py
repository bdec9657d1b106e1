"""``tasks="auto"``: the train flow picks its task granularity from measured iteration time.

Under a real Prefect server, a run whose iterations are short starts with a task per stage, switches
to a task per iteration once it has measured them, says so once in its log, and trains exactly what
the plain loop trains. Long iterations keep a task per stage (decided from the same figures).
"""

from __future__ import annotations

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

from digideep.pipeline.training import open_run, run_training
from digideep.storage.checkpoint import latest_checkpoint, load_checkpoint
from flows.granularity import TaskGranularity
from flows.train import train
from tests.flows.test_train_flow import stack  # noqa: F401 (fixture: a real server and worker)
from tests.helpers import assert_same_tensors

SHORT = {"number_epochs": 2, "epoch_size": 3, "n_steps": 16, "num_workers": 2, "n_epochs": 2,
         "batch_size": 32, "hidden_sizes": [16, 16], "save_interval": 1, "test_interval": 1,
         "test_episodes": 1, "seed": 3}  # fmt: skip


def test_auto_switches_short_iterations_to_a_task_each_and_trains_what_the_plain_loop_trains(
    stack,  # noqa: F811
    tmp_path,
    monkeypatch,
    mlflow_uri,
):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)
    sessions = tmp_path / "sessions"
    state = train(
        params="params.cartpole_ppo",
        cpanel=SHORT,
        session_name="auto",
        session_path=str(sessions),
        return_state=True,
    )
    assert state.is_completed(), state.message
    run_training(open_run("params.cartpole_ppo", dict(SHORT), session_name="plain", session_path=sessions))

    log = (sessions / "auto" / "log.txt").read_text()
    assert log.count("one Prefect task per iteration: iterations are short") == 1, log
    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
        )
    names = sorted(run.name for run in runs)
    # iterations 0-2 are measured with a task per stage; 3-5 run as one task each
    assert [n for n in names if n.startswith("update[")] == [
        f"update[epoch {i // 3}, iteration {i}]" for i in range(3)
    ]
    assert [n for n in names if n.startswith("iterate[")] == [
        f"iterate[epoch {i // 3}, iteration {i}]" for i in range(3, 6)
    ]

    _, auto = load_checkpoint(latest_checkpoint(sessions / "auto" / "checkpoints").path)
    _, plain = load_checkpoint(latest_checkpoint(sessions / "plain" / "checkpoints").path)
    assert auto["counters"] == plain["counters"] | {"wall_time": auto["counters"]["wall_time"]}
    assert_same_tensors(plain["agents"], auto["agents"], "agents")  # weights and optimizer states


@pytest.mark.parametrize(("work", "per_iteration"), [(0.5, True), (5.0, False)])
def test_auto_keeps_a_task_per_stage_where_iterations_are_long(work, per_iteration):
    chooser = TaskGranularity(server_seconds=0.02)
    for _ in range(3):  # the first iteration is not counted; then two measured ones
        for stage in ("explore", "store", "sample", "update"):
            chooser.observe(stage, outer=work / 4 + 0.004, inner=work / 4)
    # 4 x (4 ms + 20 ms) = 96 ms: 19 % of a 0.5 s iteration, 1.9 % of a 5 s one
    assert chooser.per_iteration is per_iteration
