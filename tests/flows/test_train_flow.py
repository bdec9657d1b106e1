"""The train flow under a real Prefect server and process worker, as a user runs it.

A deployment run fails at an injected fault; it is retried the way the UI's Retry button does it
(``prefect flow-run retry``); it must resume from the newest checkpoint and end with exactly the
weights, memory and counters of a run that never failed, with its session on local disk and in an
S3 bucket (moto on 127.0.0.1; the worker has the AWS variables). A sweep of two runs must complete.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from prefect.client.orchestration import get_client

from digideep.memory import Memory
from digideep.storage.checkpoint import latest_checkpoint, load_checkpoint
from digideep.storage.location import Location
from digideep_stack.local_stack import LocalStack
from tests.helpers import assert_same_tensors
from tests.pipeline.test_resume import final_state, run, train_command

TINY = {"number_epochs": 6, "epoch_size": 1, "n_steps": 20, "learning_starts": 20, "batch_size": 32,
        "hidden_sizes": [32, 32], "save_interval": 1, "test_interval": 3, "test_episodes": 1,
        "buffer_size": 1000}  # fmt: skip
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def start(deployment: str, parameters: dict) -> str:
    from prefect.deployments import run_deployment

    return str(run_deployment(deployment, parameters=parameters, timeout=0).id)


def wait(flow_run_id: str, stack: LocalStack, timeout: float = 300, states=TERMINAL) -> str:
    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            state = client.read_flow_run(flow_run_id).state
            if state is not None and state.type.value in states:
                return state.type.value
            time.sleep(0.5)
    worker_log = (stack.log_folder / "worker.log").read_text()[-4000:]
    raise AssertionError(
        f"flow run {flow_run_id} did not reach {states} in {timeout} s; worker log:\n{worker_log}"
    )


def flow_run_name(flow_run_id: str) -> str:
    with get_client(sync_client=True) as client:
        return client.read_flow_run(flow_run_id).name


def session_state(url: str) -> tuple[dict, dict]:
    """The newest checkpoint's states and the Zarr memory of the session at ``url`` (a folder or a URL)."""
    info, states = load_checkpoint(latest_checkpoint(f"{url}/checkpoints").path)
    capacity = info["params"]["memory"]["train"]["args"]["capacity"]
    memory = Memory(f"{url}/memory/train.zarr", num_workers=1, capacity=capacity)
    memory.load_state_dict(states["memories"]["train"])
    memory.load()
    contents = {key: np.array(memory[key]) for key in memory}
    return states, {"contents": contents, "pointers": memory.state_dict(), "iteration": info["iteration"]}


def assert_ends_as_a_straight_run(
    session: str, tmp_path: Path, cpanel: dict, run_env: dict, iterations: int
) -> tuple[dict, dict]:
    """Train ``cpanel`` never interrupted, outside Prefect; the retried ``session`` must end with the
    same weights, optimizer states, memory contents and pointers. Returns both runs' final states."""
    run(train_command(tmp_path, "straight", "tests.flows.faulty", {**cpanel, "marker": ""}), run_env)
    resumed_states, resumed_memory = session_state(session)
    straight_states, straight_memory = final_state(tmp_path, "straight")
    assert resumed_memory["iteration"] == straight_memory["iteration"] == iterations
    assert_same_tensors(straight_states["agents"], resumed_states["agents"], "agents")
    assert resumed_memory["pointers"] == straight_memory["pointers"]
    for key, values in straight_memory["contents"].items():
        np.testing.assert_array_equal(values, resumed_memory["contents"][key], err_msg=key)
    return resumed_states, straight_states


# the local-disk case is slow: the S3 case runs the same retry and needs more of the code to work
@pytest.mark.parametrize("storage", [pytest.param("local", marks=pytest.mark.slow), "s3"])
def test_a_retried_run_resumes_from_its_checkpoint_and_matches_an_uninterrupted_one(
    stack, tmp_path, run_env, storage, request
):
    sessions = str(tmp_path / "sessions")
    if storage == "s3":  # the session in a bucket: nothing of it on the worker's disk is needed
        sessions = f"s3://{request.getfixturevalue('s3_bucket')}/sessions"
    marker = tmp_path / "fault-fired"
    cpanel = {**TINY, "fail_at_update": 4, "marker": str(marker)}
    parameters = {"params": "tests.flows.faulty", "cpanel": cpanel, "session_path": sessions}

    flow_run_id = start("train/pendulum-sac", parameters)
    assert wait(flow_run_id, stack) == "FAILED"
    assert marker.exists(), "the injected fault should have fired"
    session = f"{sessions}/{flow_run_name(flow_run_id)}-{flow_run_id[:8]}"
    assert not Location(f"{session}/done.json").exists()
    assert latest_checkpoint(f"{session}/checkpoints").iteration == 3

    stack.run("flow-run", "retry", flow_run_id)  # what the UI's Retry button does
    assert wait(flow_run_id, stack, states={"COMPLETED", "FAILED", "CRASHED"}) == "COMPLETED"
    assert "resuming session" in Location(f"{session}/log.txt").read_text()

    resumed_states, straight_states = assert_ends_as_a_straight_run(session, tmp_path, cpanel, run_env, 6)
    assert resumed_states["counters"]["frames"] == straight_states["counters"]["frames"] == 6 * 20

    # MLflow: the reopened run holds each metric step once and ends FINISHED
    from mlflow import MlflowClient

    info = Location(f"{session}/session.json").read_json()
    client = MlflowClient(run_env["MLFLOW_TRACKING_URI"])
    steps = [m.step for m in client.get_metric_history(info["mlflow_run_id"], "charts/iteration")]
    assert sorted(steps) == [20 * i for i in range(1, 7)]
    assert client.get_run(info["mlflow_run_id"]).info.status == "FINISHED"


def test_a_run_of_one_frame_iterations_retried_after_a_fault_inside_a_grouped_task_resumes_exactly(
    stack, tmp_path, run_env
):
    # the shipped off-policy schedule: a frame, then a gradient step; tasks="auto" groups the
    # iterations (a task per epoch's rest here), and the fault fires in the third epoch's task
    sessions = str(tmp_path / "sessions")
    marker = tmp_path / "fault-fired"
    cpanel = {**TINY, "n_steps": 1, "epoch_size": 40, "number_epochs": 3, "fail_at_update": 100,
              "marker": str(marker)}  # fmt: skip
    flow_run_id = start("train/pendulum-sac", {"params": "tests.flows.faulty", "cpanel": cpanel,
                                               "session_path": sessions})  # fmt: skip
    assert wait(flow_run_id, stack) == "FAILED"
    assert marker.exists(), "the injected fault should have fired"
    session = f"{sessions}/{flow_run_name(flow_run_id)}-{flow_run_id[:8]}"
    assert latest_checkpoint(f"{session}/checkpoints").iteration == 80
    assert "Prefect tasks of " in Location(f"{session}/log.txt").read_text()

    stack.run("flow-run", "retry", flow_run_id)
    assert wait(flow_run_id, stack, states={"COMPLETED", "FAILED", "CRASHED"}) == "COMPLETED"
    assert_ends_as_a_straight_run(session, tmp_path, cpanel, run_env, 120)

    from mlflow import MlflowClient

    info = Location(f"{session}/session.json").read_json()
    client = MlflowClient(run_env["MLFLOW_TRACKING_URI"])
    steps = [m.step for m in client.get_metric_history(info["mlflow_run_id"], "charts/iteration")]
    assert sorted(steps) == [40, 80, 120]


def flow_run_logs(flow_run_id: str) -> list[str]:
    """The messages of the flow run's log records on the server, oldest first."""
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    with get_client(sync_client=True) as client:
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
    return [log.message for log in logs]


def wait_until_the_worker_is_done_with(flow_run_id: str, timeout: float = 120) -> None:
    """Wait for the worker's ``prefect.worker.executed-flow-run`` event of the killed flow process.

    Prefect 3.8's process worker reports a killed flow process Crashed at once, then again once it
    has shut down its run of it (tens of seconds later here): a Retry made in between is crashed by
    that second report (docs/tracking-prefect.md).
    """
    from prefect.events.filters import EventFilter, EventNameFilter, EventRelatedFilter

    def wanted() -> EventFilter:  # a new one each time: a filter ends at the time it was made
        return EventFilter(
            event=EventNameFilter(name=["prefect.worker.executed-flow-run"]),
            related=EventRelatedFilter(id=[f"prefect.flow-run.{flow_run_id}"]),
        )

    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while not client.read_events(wanted(), limit=1).events:  # the server allows 50 at most
            assert time.monotonic() < deadline, "the worker did not finish with the killed flow process"
            time.sleep(1)


def test_a_killed_run_retried_leaves_no_task_running_and_shows_the_log_lines_prefect_missed(stack, tmp_path):
    from flows.recovery import KILLED_PREFIX
    from tests.flows.killed import LAST_LINE
    from tests.flows.test_stage_tasks import task_runs_of

    sessions = tmp_path / "sessions"
    marker = tmp_path / "killed"
    cpanel = {**TINY, "fail_at_update": 4, "marker": str(marker)}
    parameters = {"params": "tests.flows.killed", "cpanel": cpanel, "session_path": str(sessions)}

    flow_run_id = start("train/pendulum-sac", parameters)
    assert wait(flow_run_id, stack) == "CRASHED"  # the worker saw its flow process die of SIGKILL
    assert marker.exists(), "the flow process should have been killed"
    session = sessions / f"{flow_run_name(flow_run_id)}-{flow_run_id[:8]}"
    last_line = (session / "log.txt").read_text().splitlines()[-1]
    assert last_line.endswith(LAST_LINE.format(4)), last_line
    assert LAST_LINE.format(4) not in flow_run_logs(flow_run_id)  # killed before it was sent
    running = [t.name for t in task_runs_of(flow_run_id) if t.state.type.value == "RUNNING"]
    assert len(running) == 1 and running[0].endswith("[epoch 3, iteration 3]"), running  # as the UI showed it

    wait_until_the_worker_is_done_with(flow_run_id)
    stack.run("flow-run", "retry", flow_run_id)  # what the UI's Retry button does
    final = wait(flow_run_id, stack, states={"COMPLETED", "FAILED", "CRASHED"})
    assert final == "COMPLETED", (stack.log_folder / "worker.log").read_text()[-4000:]
    task_runs = task_runs_of(flow_run_id)
    assert not [t.name for t in task_runs if t.state.type.value in ("RUNNING", "PENDING")]
    crashed = [t for t in task_runs if t.state.type.value == "CRASHED"]
    assert [t.name for t in crashed] == running
    assert "was killed" in crashed[0].state.message

    deadline = time.monotonic() + 30  # the flow process sends its last log records as it exits
    while f"{KILLED_PREFIX}{last_line}" not in (messages := flow_run_logs(flow_run_id)):
        assert time.monotonic() < deadline, "the killed attempt's last line is not in the flow run's logs"
        time.sleep(1)
    resent = [m for m in messages if m.startswith(KILLED_PREFIX)]
    assert len(resent) <= 50 and resent[-1] == f"{KILLED_PREFIX}{last_line}"


def test_a_retry_of_a_run_marked_crashed_while_it_runs_on_waits_for_it_then_completes(stack, tmp_path):
    from prefect.states import Crashed

    sessions, paused, release = tmp_path / "sessions", tmp_path / "paused", tmp_path / "release"
    cpanel = {**TINY, "pause_at_update": 3, "marker": str(paused), "release": str(release)}
    parameters = {"params": "tests.flows.paused", "cpanel": cpanel, "session_path": str(sessions)}
    flow_run_id = start("train/pendulum-sac", parameters)
    deadline = time.monotonic() + 300
    while not paused.exists():
        assert time.monotonic() < deadline, "the first attempt did not reach its pause"
        time.sleep(0.2)
    with get_client(sync_client=True) as client:  # what the crash watcher does to a run it did not hear
        client.set_flow_run_state(flow_run_id, Crashed(message="no heartbeat"), force=True)
    stack.run("flow-run", "retry", flow_run_id)

    deadline = time.monotonic() + 120
    while not any("is still in use by process" in m for m in flow_run_logs(flow_run_id)):
        assert time.monotonic() < deadline, "the second attempt did not say it waits for the first"
        time.sleep(1)
    release.write_text("go")  # the first attempt runs on to the end of its training
    deadline = time.monotonic() + 300
    while not any("already finished; nothing to do" in m for m in flow_run_logs(flow_run_id)):
        assert time.monotonic() < deadline, "the second attempt did not find the session finished"
        time.sleep(1)
    assert wait(flow_run_id, stack, states={"COMPLETED", "FAILED", "CRASHED"}) == "COMPLETED"
    (session,) = sessions.iterdir()
    assert (session / "done.json").exists()
    log = (session / "log.txt").read_text()
    assert log.count("epoch 6/6") == 1  # trained once, to the end, by the first attempt


def test_a_sweep_of_two_runs_completes(stack, tmp_path):
    sessions = tmp_path / "sessions"
    parameters = {
        "deployment": "train/pendulum-sac",
        "grid": {},
        "seeds": [0, 1],
        "base_cpanel": {**TINY, "number_epochs": 2},
        "session_path": str(sessions),
        "poll_seconds": 1.0,
    }
    sweep_id = start("sweep/sweep", parameters)
    assert wait(sweep_id, stack, timeout=400) == "COMPLETED"
    finished = sorted(Path(p).parent.name for p in sessions.glob("*/done.json"))
    assert len(finished) == 2
    seeds = sorted(json.loads((sessions / name / "cpanel.json").read_text())["seed"] for name in finished)
    assert seeds == [0, 1]


def test_one_task_per_iteration_gives_the_same_run_with_fewer_task_runs(stack, tmp_path, run_env):
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from flows.train import train

    cpanel = {**TINY, "number_epochs": 3, "test_interval": 1}
    result = train(
        params="tests.flows.faulty",
        cpanel=cpanel,
        session_name="grouped",
        session_path=str(tmp_path),
        tasks="iteration",
        device="cpu",  # --device, handed to the flow as an argument
    )
    assert result["stopped"] == "finished" and result["iterations"] == 3
    assert "on cpu: requested 'cpu'" in (tmp_path / "grouped" / "log.txt").read_text()
    run(train_command(tmp_path, "plain", "tests.flows.faulty", cpanel), run_env)
    grouped_states, grouped_memory = final_state(tmp_path, "grouped")
    plain_states, plain_memory = final_state(tmp_path, "plain")
    assert_same_tensors(plain_states["agents"], grouped_states["agents"], "agents")
    assert grouped_memory["pointers"] == plain_memory["pointers"]

    flow_run_id = json.loads((tmp_path / "grouped" / "session.json").read_text())["prefect_flow_run_id"]
    deadline = time.monotonic() + 60  # the server records task runs from their events, a little later
    with get_client(sync_client=True) as client:
        while True:
            task_runs = client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
            )
            names = sorted(t.name for t in task_runs)
            if len([n for n in names if n.startswith("iterate[")]) >= 3 or time.monotonic() > deadline:
                break
            time.sleep(1)
    assert [n for n in names if n.startswith("iterate[")] == [
        f"iterate[epoch {i}, iteration {i}]" for i in range(3)
    ]
    assert not [n for n in names if n.startswith(("explore[", "update["))]
