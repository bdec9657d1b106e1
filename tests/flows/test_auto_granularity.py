"""``tasks="auto"``: the train flow picks its task granularity from measured iteration time.

Under a real Prefect server, a run whose iterations are short starts with a task per stage, switches
to tasks of several iterations once it has measured them, says so in its log, and trains exactly
what the plain loop trains. Long iterations keep a task per stage (decided from the same figures).
"""

from __future__ import annotations

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

from digideep.pipeline.training import open_run, run_training
from digideep.storage.checkpoint import latest_checkpoint, load_checkpoint
from flows.granularity import TaskGranularity
from flows.train import train
from tests.helpers import assert_same_tensors

SHORT = {"number_epochs": 2, "epoch_size": 3, "n_steps": 16, "num_workers": 2, "n_epochs": 2,
         "batch_size": 32, "hidden_sizes": [16, 16], "save_interval": 1, "test_interval": 1,
         "test_episodes": 1, "seed": 3}  # fmt: skip


def test_auto_groups_short_iterations_into_tasks_and_trains_what_the_plain_loop_trains(
    stack,
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
    assert "Prefect tasks of " in log and "iterations are short" in log, log
    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
        )
    names = sorted(run.name for run in runs)
    # iterations 0-2 are measured with a task per stage; 3-5 run grouped, a task never past an epoch
    assert [n for n in names if n.startswith("update[")] == [
        f"update[epoch {i // 3}, iteration {i}]" for i in range(3)
    ]
    assert [n for n in names if n.startswith("iterate[")] == ["iterate[epoch 1, iteration 3]"]

    _, auto = load_checkpoint(latest_checkpoint(sessions / "auto" / "checkpoints").path)
    _, plain = load_checkpoint(latest_checkpoint(sessions / "plain" / "checkpoints").path)
    assert auto["counters"] == plain["counters"] | {"wall_time": auto["counters"]["wall_time"]}
    assert_same_tensors(plain["agents"], auto["agents"], "agents")  # weights and optimizer states


@pytest.mark.parametrize(("work", "group"), [(0.5, 2), (0.045, 18), (5.0, 0)])
def test_auto_groups_as_many_iterations_as_keep_the_tasks_within_budget(work, group):
    chooser = TaskGranularity(server_seconds=0.02)
    for _ in range(3):  # the first iteration is not counted; then two measured ones
        for stage in ("explore", "store", "sample", "update"):
            assert chooser() == 0  # a task per stage while measuring
            chooser.observe(stage, outer=work / 4 + 0.004, inner=work / 4)
    # a task run costs 4 ms + 20 ms: 4 of them are 19 % of a 0.5 s iteration, 1.9 % of a 5 s one;
    # one task of n iterations stays within 3 % from n = 2 (0.5 s) and n = 18 (45 ms)
    assert chooser() == group


def test_auto_follows_the_iterations_when_they_change_length():
    chooser = TaskGranularity(server_seconds=0.021, window=3)
    for _ in range(3):  # one-frame iterations of random actions: 0.4 ms each
        for stage in ("explore", "store", "sample", "update"):
            chooser.observe(stage, outer=0.0001 + 0.004, inner=0.0001)
    assert chooser() == 2084  # a task run costs 25 ms: 3 % of 2,084 x 0.4 ms
    for _ in range(3):  # learning starts: 10 ms an iteration
        chooser.observe("iterate", outer=10 * 0.010 + 0.004, inner=10 * 0.010, iterations=10)
    assert chooser() == 84  # 3 % of 84 x 10 ms


def test_a_timeout_on_iterate_keeps_one_iteration_a_task():
    chooser = TaskGranularity(server_seconds=0.02, most=1)
    for _ in range(3):
        for stage in ("explore", "store", "sample", "update"):
            chooser.observe(stage, outer=0.001 + 0.004, inner=0.001)
    assert chooser() == 1
