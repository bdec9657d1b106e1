"""The benchmark matrix (``flows/benchmark.py``): its expansion, its refusals and its cells.

The matrix is checked in one line before anything runs; an SB3 reference cell trains under the same
evaluation protocol as digideep's runs; and a tiny benchmark runs through a real Prefect server and
worker, is killed half-way and retried, and ends with every cell run exactly once, nested under its
MLflow parent run with the contract's tags.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from digideep.benchmark.matrix import plan
from digideep.benchmark.sb3 import sb3_arguments
from digideep.errors import UsageError
from digideep.main import cli
from digideep.pipeline.evaluation import EvaluationProtocol
from tests.conftest import REPO

PROTOCOL = EvaluationProtocol(frame_interval=1000, episodes=5, frame_budget=3000)


def test_the_matrix_is_every_algorithm_env_variant_and_seed_with_the_protocol_in_each_files_epochs():
    cells = plan(
        ["params.pendulum_sac", "sb3:TD3"],
        ["Pendulum-v1", "MountainCarContinuous-v0"],
        [0, 1],
        PROTOCOL,
        base_cpanel=None,
    )
    # started in this order: one environment at a time, each seed under every algorithm together
    assert [c.key for c in cells] == [
        "params.pendulum_sac/Pendulum-v1/seed-0/default",
        "sb3:TD3/Pendulum-v1/seed-0/default",
        "params.pendulum_sac/Pendulum-v1/seed-1/default",
        "sb3:TD3/Pendulum-v1/seed-1/default",
        "params.pendulum_sac/MountainCarContinuous-v0/seed-0/default",
        "sb3:TD3/MountainCarContinuous-v0/seed-0/default",
        "params.pendulum_sac/MountainCarContinuous-v0/seed-1/default",
        "sb3:TD3/MountainCarContinuous-v0/seed-1/default",
    ]
    # pendulum_sac's epoch is 1,000 iterations x 1 step = 1,000 frames
    assert cells[4].cpanel == {
        "model_name": "MountainCarContinuous-v0",
        "seed": 0,
        "number_epochs": 3,
        "test_interval": 1,
        "test_episodes": 5,
    }
    assert cells[-1].algorithm == "sb3:TD3" and cells[-1].cpanel == {}
    variants = plan(
        ["params.pendulum_sac"],
        ["Pendulum-v1"],
        [3],
        PROTOCOL,
        variants={"small-lr": {"lr": 1e-4}, "default": {}},
        base_cpanel={"epoch_size": 500},
    )
    assert [(c.variant, c.cpanel.get("lr")) for c in variants] == [
        ("small-lr", 1e-4),
        ("default", None),
    ]
    assert variants[0].cpanel["number_epochs"] == 6  # 500 iterations x 1 step per epoch
    assert variants[0].tags("b", "p") == {
        "name": "b",
        "algorithm": "params.pendulum_sac",
        "env": "Pendulum-v1",
        "seed": 3,
        "variant": "small-lr",
        "parent_run_id": "p",
    }


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--params", "params.nope", "--env", "Pendulum-v1"], "params module 'params.nope' not found"),
        (["--params", "params.pendulum_sac", "--env", "Pendulum-v9"], "unknown environment 'Pendulum-v9'"),
        (["--params", "sb3:A2C", "--env", "Pendulum-v1"], "unknown reference algorithm 'sb3:A2C'"),
        (
            ["--params", "params.pendulum_sac", "--env", "Pendulum-v1", "--eval-interval", "700"],
            "must divide",
        ),
        (
            [
                "--params",
                "params.pendulum_sac",
                "--env",
                "Pendulum-v1",
                "--frames",
                "1500",
                "--eval-interval",
                "500",
            ],
            "not a whole number of epochs of 1000 frames",
        ),
        (
            ["--params", "params.pendulum_sac", "--env", "Pendulum-v1", "--cpanel", '{"lr_": 1}'],
            "unknown cpanel key 'lr_'",
        ),
        (["--params", "params.pendulum_sac", "--env", "Pendulum-v1", "--variant", "x"], "must be NAME=JSON"),
    ],
)
def test_bad_input_is_one_line_exit_2_before_anything_runs(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")  # nothing may reach it
    frames = [] if "--frames" in argv else ["--frames", "3000"]
    assert cli(["benchmark", *argv, *frames, "--session-path", str(tmp_path / "sessions")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not any(tmp_path.iterdir())


def test_an_empty_axis_is_refused():  # (the CLI's argparse refuses an empty --seeds itself)
    for axes in (
        [[], ["Pendulum-v1"], [0]],
        [["params.pendulum_sac"], [], [0]],
        [["sb3:SAC"], ["Pendulum-v1"], []],
    ):
        with pytest.raises(UsageError, match="axis is empty"):
            plan(*axes, PROTOCOL)


def test_an_sb3_cell_trains_under_the_protocol_and_is_tracked_as_a_nested_cell(
    mlflow_uri, tmp_path, monkeypatch
):
    from digideep.benchmark.sb3 import train_sb3_cell
    from digideep.tracking.trials import benchmark_tags
    from flows.cells import experiment_id

    client = MlflowClient(mlflow_uri)
    experiment = experiment_id(client, "benchmarks", None)
    parent = client.create_run(
        experiment, tags={"digideep.kind": "benchmark", "digideep.benchmark": "sb3-test"}
    )
    cell = {"name": "sb3-test", "algorithm": "sb3:SAC", "env": "Pendulum-v1", "seed": 1, "variant": "default"}
    tags = benchmark_tags({**cell, "parent_run_id": parent.info.run_id})
    protocol = EvaluationProtocol(frame_interval=200, episodes=2, frame_budget=400)
    knobs = {"learning_starts": 150}  # the protocol's, as a benchmark's --cpanel gives it
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # where SB3's default logger makes its folder
    score = train_sb3_cell("sb3:SAC", "Pendulum-v1", 1, protocol, client, experiment, tags, cpanel=knobs)
    assert not list(temp.glob("SB3-*"))  # the cell leaves nothing in the temp dir

    (run,) = client.search_runs(
        [experiment], filter_string="tags.`digideep.benchmark` = 'sb3-test' and tags.algorithm = 'sb3:SAC'"
    )
    assert run.info.status == "FINISHED"
    assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert {k: run.data.tags[k] for k in ("env", "seed", "variant")} == {
        "env": "Pendulum-v1",
        "seed": "1",
        "variant": "default",
    }
    history = client.get_metric_history(run.info.run_id, "eval/return")
    assert [m.step for m in history] == [200, 400]
    assert history[-1].value == score and -2000 < score < 0  # Pendulum's returns over 2 x 200 steps
    assert {k: v for k, v in run.data.params.items() if k.startswith("eval/")} == {
        "eval/frame_interval": "200",
        "eval/episodes": "2",
        "eval/frame_budget": "400",
    }
    assert run.data.params["cpanel/learning_starts"] == "150"


@pytest.mark.parametrize("name", ["pendulum", "mujoco-v5", "mujoco-v5-ppo"])
def test_each_shipped_benchmark_deployment_is_a_matrix_that_passes_its_checks(name):
    import yaml

    deployments = yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]
    (parameters,) = [d["parameters"] for d in deployments if d["name"] == name]
    protocol = EvaluationProtocol(
        parameters.get("eval_interval") or parameters["frames"],
        parameters.get("eval_episodes", 10),
        parameters["frames"],
    )
    cells = plan(
        parameters["algorithms"],
        parameters["envs"],
        parameters["seeds"],
        protocol,
        parameters.get("variants"),
        parameters.get("base_cpanel"),
    )
    assert len(cells) == len(parameters["algorithms"]) * len(parameters["envs"]) * len(parameters["seeds"])
    for cell in cells:  # every parameter file's cell evaluates at every interval and at the budget
        if not cell.algorithm.startswith("sb3:"):
            assert cell.cpanel["number_epochs"] % cell.cpanel["test_interval"] == 0


def test_sb3_cells_take_the_knobs_a_like_for_like_comparison_needs_and_leave_the_rest():
    cells = plan(
        ["params.pendulum_sac", "sb3:SAC", "sb3:PPO"],
        ["Pendulum-v1"],
        [0],
        PROTOCOL,
        variants={"slow": {"lr": 1e-4}},
        base_cpanel={"learning_starts": 500, "update_mode": "eager"},
    )
    by_algorithm = {cell.algorithm: cell.cpanel for cell in cells}
    assert by_algorithm["sb3:SAC"] == {"learning_starts": 500, "lr": 1e-4}
    assert by_algorithm["sb3:PPO"] == {"lr": 1e-4}  # PPO has no replay to start
    assert by_algorithm["params.pendulum_sac"]["update_mode"] == "eager"
    assert sb3_arguments("sb3:SAC", {"lr": 1e-4, "tau": 0.01, "update_mode": "eager"}) == (
        {"learning_rate": 1e-4, "tau": 0.01},
        {"lr": 1e-4, "tau": 0.01},  # update_mode is left to the parameter files
    )


def test_sb3_cells_in_the_flow_run_once_and_a_second_run_of_the_benchmark_skips_them(
    stack, tmp_path, mlflow_uri, monkeypatch
):
    """SB3 cells run as tasks of the benchmark's own flow run (here in this process, on the test's
    server; no worker needed); a benchmark run again under its name finds them finished and trains
    nothing; an unfinished one without a checkpoint (a finished cell deletes its own) is deleted and
    trained again, so one run per cell remains. (A cell killed after a checkpoint continues its run:
    tests/benchmark/test_sb3_resume.py.)"""
    from digideep.benchmark import records
    from flows.benchmark import benchmark

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)
    parameters = {"algorithms": ["sb3:TD3"], "envs": ["Pendulum-v1"], "seeds": [0, 1], "frames": 200,
                  "eval_interval": 100, "eval_episodes": 1, "name": "sb3-flow",
                  "session_path": str(tmp_path / "sessions"), "poll_seconds": 0.2}  # fmt: skip
    first = benchmark(**parameters)
    assert first["status"] == "FINISHED" and [c["runs"] for c in first["cells"]] == [1, 1]
    assert [c["resumes"] for c in first["cells"]] == [0, 0]
    assert list((tmp_path / "sessions").glob("sb3-sb3-flow/*")) == []  # finished cells keep no checkpoint
    client = MlflowClient(mlflow_uri)
    cell = {"algorithm": "sb3:TD3", "env": "Pendulum-v1", "seed": 1, "variant": "default"}
    (finished,) = records.cell_runs(client, "sb3-flow", cell)
    client.set_terminated(finished.info.run_id, "KILLED")  # as if the benchmark died in this cell

    second = benchmark(**parameters)
    assert second["status"] == "FINISHED" and [c["runs"] for c in second["cells"]] == [1, 1]
    assert second["cells"][0]["run_id"] == first["cells"][0]["run_id"]  # finished: not trained again
    assert second["cells"][1]["run_id"] != first["cells"][1]["run_id"]  # unfinished: trained again
    assert [m.step for m in client.get_metric_history(second["cells"][1]["run_id"], "eval/return")] == [
        100,
        200,
    ]
    parents = client.search_runs(
        [client.get_experiment_by_name("benchmarks").experiment_id],
        filter_string="tags.`digideep.kind` = 'benchmark' and tags.`digideep.benchmark` = 'sb3-flow'",
    )
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"


def test_an_sb3_cell_without_sb3_is_refused_naming_the_extra(monkeypatch):
    import sys

    from digideep.benchmark.sb3 import check_sb3

    monkeypatch.setitem(sys.modules, "stable_baselines3", None)  # import fails as when it is absent
    with pytest.raises(
        UsageError, match=r"install digideep's bench extra \(pip install 'digideep\[bench\]'\)"
    ):
        check_sb3("sb3:PPO")


# the tiny matrix's cells: 150 frames (3 evaluations of one episode), learning after 50 frames
TINY = {"epoch_size": 1, "n_steps": 50, "learning_starts": 50, "batch_size": 16, "hidden_sizes": [16, 16],
        "buffer_size": 1000, "save_interval": 1, "test_win_size": 1}  # fmt: skip
ALGORITHMS = ["tests.flows.faulty_cell", "params.pendulum_td3"]  # SAC, whose seed-1 cells fail once
ENVS = ["Pendulum-v1", "MountainCarContinuous-v0"]


@pytest.mark.parametrize(
    ("algorithms", "envs", "seeds"),
    [
        # the matrix of the issue: 12 cells, 4 min 47 s with the stack on 2 shared cores
        pytest.param(ALGORITHMS, ENVS, [0, 1, 2], marks=pytest.mark.slow, id="2x2x3"),
        (ALGORITHMS, ENVS[:1], [0, 1]),  # 4 cells: the same kill and retries, 3 min 45 s
    ],
)
def test_a_benchmark_killed_half_way_and_retried_runs_every_cell_once(
    stack, fault_markers, tmp_path, mlflow_uri, monkeypatch, capsys, algorithms, envs, seeds
):
    from digideep.benchmark import records
    from tests.flows.test_train_flow import wait, wait_until_the_worker_is_done_with

    sessions = tmp_path / "sessions"
    name = f"tiny-{len(algorithms) * len(envs) * len(seeds)}"
    cells = [
        {"algorithm": a, "env": e, "seed": s, "variant": "default"}
        for a in algorithms
        for e in envs
        for s in seeds
    ]
    monkeypatch.setenv("PREFECT_API_URL", stack.api_url)
    monkeypatch.setenv("DIGIDEEP_BENCHMARK_TEST_DIR", str(fault_markers))  # the CLI checks the matrix here
    argv = ["benchmark", "--params", *algorithms, "--env", *envs, "--seeds", *map(str, seeds), "--frames", "150",
            "--eval-interval", "50", "--eval-episodes", "1", "--cpanel", json.dumps(TINY), "--name", name,
            "--session-path", str(sessions)]  # fmt: skip
    assert cli(argv) == 0
    benchmark_id = capsys.readouterr().out.split(" flow run ")[1].split()[0]
    client = MlflowClient(mlflow_uri)
    _wait_for_finished_cells(client, name, at_least=len(cells) // 3)
    _kill_flow_run_process(benchmark_id)  # as a machine that dies: no state change, no cleanup
    assert wait(benchmark_id, stack, timeout=120, states={"CRASHED", "FAILED"}) == "CRASHED"
    # the worker proposes CRASHED itself once it has seen the process exit: a retry before that
    # would be crashed by it (a race of Prefect's, not digideep's: a user who retries at once meets it too)
    wait_until_the_worker_is_done_with(benchmark_id)
    assert len(_finished(client, name)) < len(cells), "the benchmark was killed after its last cell"

    stack.run("flow-run", "retry", benchmark_id)  # what the UI's Retry button does
    assert wait(benchmark_id, stack, timeout=900, states={"COMPLETED", "FAILED", "CRASHED"}) == "COMPLETED"

    (parent,) = client.search_runs(
        [client.get_experiment_by_name("benchmarks").experiment_id],
        filter_string=f"tags.`digideep.kind` = 'benchmark' and tags.`digideep.benchmark` = '{name}'",
    )
    assert parent.info.status == "FINISHED"
    assert parent.data.params["eval/frame_budget"] == "150"
    assert _unfinished_task_runs(benchmark_id) == []  # the killed attempt's were crashed by the retry
    for cell in cells:
        runs = records.cell_runs(client, name, cell)
        assert len(runs) == 1, (cell, len(runs))  # exactly once, across the kill and the retry
        run = runs[0]
        assert run.info.status == "FINISHED", cell
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.data.params["cpanel/model_name"] == cell["env"]
        assert run.data.params["cpanel/seed"] == str(cell["seed"])
        assert run.data.params["eval/frame_interval"] == "50"
        history = client.get_metric_history(run.info.run_id, "eval/return")
        assert [m.step for m in history] == [50, 100, 150], cell
    # one session, one train flow run per cell: nothing ran twice
    infos = [json.loads(p.read_text()) for p in sessions.glob("*/session.json")]
    assert len(infos) == len(cells) and len({i["prefect_flow_run_id"] for i in infos}) == len(cells)
    # the SAC seed-1 cells failed once each and, retried as the same flow run, resumed their checkpoint
    for env in envs:
        assert (fault_markers / f"{env}-seed-1-fault").exists()
        cell = {"algorithm": ALGORITHMS[0], "env": env, "seed": 1, "variant": "default"}
        (run,) = records.cell_runs(client, name, cell)
        session = Path(run.data.tags["digideep.session_path"])
        assert "resuming session" in (session / "log.txt").read_text()


def test_a_benchmark_cancelled_and_started_again_under_its_name_continues_its_cell(
    stack, fault_markers, tmp_path, mlflow_uri, monkeypatch, capsys
):
    """Prefect cancels every unfinished subflow of a cancelled flow run, whoever sets it going again:
    the new benchmark continues the cancelled cell's session in a new train run, in the same MLflow run.

    The cell stalls after its first checkpoint until it is stopped, so it is still running when the
    benchmark is cancelled, however fast the machine.
    """
    from digideep.benchmark import records
    from tests.flows.stalled_cell import stall_marker
    from tests.flows.test_train_flow import wait

    sessions, name = tmp_path / "sessions", "tiny-cancelled"
    cell = {"algorithm": "tests.flows.stalled_cell", "env": "Pendulum-v1", "seed": 0, "variant": "default"}
    monkeypatch.setenv("PREFECT_API_URL", stack.api_url)
    monkeypatch.setenv("DIGIDEEP_BENCHMARK_TEST_DIR", str(fault_markers))  # the CLI checks the matrix here
    argv = ["benchmark", "--params", cell["algorithm"], "--env", cell["env"], "--seeds", "0", "--frames", "4000",
            "--eval-interval", "1000", "--eval-episodes", "1", "--cpanel", json.dumps(TINY), "--name", name,
            "--session-path", str(sessions)]  # fmt: skip

    def start() -> str:
        assert cli(argv) == 0
        return capsys.readouterr().out.split(" flow run ")[1].split()[0]

    first = start()
    deadline = time.monotonic() + 300
    stalled = stall_marker(fault_markers, cell["env"], cell["seed"])
    while not (stalled.exists() and list(sessions.glob("*/checkpoints/*/commit.json"))):
        assert time.monotonic() < deadline, "the cell did not checkpoint and stall in 300 s"
        time.sleep(0.2)
    stack.run("flow-run", "cancel", first)
    assert wait(first, stack, timeout=120, states={"CANCELLED"}) == "CANCELLED"
    (session,) = sessions.iterdir()
    cancelled = json.loads((session / "session.json").read_text())["prefect_flow_run_id"]
    assert wait(cancelled, stack, timeout=120, states={"CANCELLED", "COMPLETED"}) == "CANCELLED"

    second = start()
    assert wait(second, stack, timeout=600, states={"COMPLETED", "FAILED", "CRASHED"}) == "COMPLETED"
    assert [p.name for p in sessions.iterdir()] == [session.name]  # the same session, continued
    info = json.loads((session / "session.json").read_text())
    assert info["prefect_flow_run_id"] != cancelled and info["resumes"] == 1
    (run,) = records.cell_runs(MlflowClient(mlflow_uri), name, cell)
    assert run.info.status == "FINISHED" and run.data.tags["digideep.resumes"] == "1"
    history = MlflowClient(mlflow_uri).get_metric_history(run.info.run_id, "eval/return")
    assert sorted(m.step for m in history) == list(range(1000, 4001, 1000))


def test_a_retried_benchmark_crashes_the_task_runs_its_killed_attempt_left_running(stack, monkeypatch):
    """A killed attempt's SB3 cell task ends with nobody to report it: the retry marks it Crashed."""
    import logging

    from prefect import flow, task
    from prefect.client.orchestration import get_client
    from prefect.states import Crashed, Running

    from flows.recovery import crash_killed_tasks

    monkeypatch.setenv("PREFECT_API_URL", stack.api_url)

    @task(name="sb3_cell")
    def cell() -> None: ...

    @flow(name="benchmark")
    def killed() -> None: ...

    with get_client(sync_client=True) as client:
        flow_run = client.create_flow_run(killed, state=Running())
        task_run = client.create_task_run(cell, flow_run.id, dynamic_key="0", state=Running())
        client.set_flow_run_state(flow_run.id, Crashed(message="its process was killed"), force=True)
        client.set_flow_run_state(flow_run.id, Running(), force=True)  # the retry
    crash_killed_tasks(str(flow_run.id), 2, "continues its unfinished SB3 cells", logging.getLogger("test"))
    with get_client(sync_client=True) as client:
        state = client.read_task_run(task_run.id).state
    assert state.type.value == "CRASHED", state
    assert "attempt 2 continues its unfinished SB3 cells" in state.message
    assert _unfinished_task_runs(str(flow_run.id)) == []


def _unfinished_task_runs(flow_run_id: str) -> list[str]:
    """The names of the flow run's task runs that are Running or Pending."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        task_runs = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
        )
    return [t.name for t in task_runs if t.state is not None and t.state.type.value in ("RUNNING", "PENDING")]


def _finished(client: MlflowClient, name: str) -> list:
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments, filter_string=f"tags.`digideep.benchmark` = '{name}'")
    return [
        r for r in runs if r.info.status == "FINISHED" and r.data.tags.get("digideep.kind") != "benchmark"
    ]


def _wait_for_finished_cells(client: MlflowClient, name: str, at_least: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while len(_finished(client, name)) < at_least:
        assert time.monotonic() < deadline, f"fewer than {at_least} cells finished in {timeout} s"
        time.sleep(1)


def _kill_flow_run_process(flow_run_id: str) -> None:
    """SIGKILL the process the worker started for ``flow_run_id`` (found by its environment)."""
    needle = f"PREFECT__FLOW_RUN_ID={flow_run_id}".encode()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in environ.read_bytes().split(b"\0"):
                os.kill(int(environ.parent.name), signal.SIGKILL)
                return
        except (PermissionError, FileNotFoundError, ProcessLookupError):
            continue
    raise AssertionError(f"no process runs flow run {flow_run_id}")
