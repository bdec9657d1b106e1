"""Stopping a run as a terminal (Ctrl-C: SIGINT to the whole process group) or a scheduler (SIGTERM) does.

Real ``digideep`` processes in a session of their own, stopped with ``os.killpg``, on the plain loop
and on the CLI's Prefect path (its temporary server included, which the same Ctrl-C once stopped
under the flow: a 3.8-minute hang). Each must write its checkpoint, exit at once with 130 or 143
and one line saying how to resume; that command must finish the run with exactly the MLflow metric
steps and journal records of a run never stopped.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from mlflow import MlflowClient

from digideep.pipeline.devices import DeviceChoice
from digideep.pipeline.resuming import from_checkpoint
from digideep.pipeline.runner import Runner
from digideep.pipeline.signals import signal_reason
from digideep.storage.checkpoint import find_checkpoints, latest_checkpoint
from digideep.storage.session import Session
from tests.agents.runner_setup import shipped_params
from tests.conftest import REPO
from tests.pipeline.test_resume import SMALL_SAC, TIMING, metric_histories, run, train_command

STOPPABLE = {**SMALL_SAC, "number_epochs": 3, "epoch_size": 5}
"""15 iterations in epochs of 5, a checkpoint at each epoch's end: a stop lands mid-epoch mostly."""
STOP_BOUND = 60.0
"""Seconds a stop may take: a hang detector (it takes a few seconds), not a timing goal."""
CHECKPOINT_METRIC = "time/checkpoint"
DIGIDEEP = str(Path(sys.executable).with_name("digideep"))


def test_a_stop_mid_epoch_saves_the_partial_epoch_without_logging_it(tmp_path):
    """The resumed run logs the epoch whole at its end, as a run never stopped does."""
    params = shipped_params("pendulum_sac", **{**SMALL_SAC, "epoch_size": 4, "number_epochs": 2})
    session = Session(root=tmp_path, name="run")
    runner = Runner(session, params, devices=DeviceChoice("cpu"))
    stages: list[str] = []

    def call(stage, function):
        stages.append(stage)
        result = function()
        if stage == "update" and runner.counters.iteration == 6:  # as a SIGTERM mid-iteration does
            runner.request_stop(signal_reason(signal.SIGTERM))
        return result

    try:
        assert runner.train(call) == "SIGTERM received"
        partial = runner.monitor.summary()  # iterations 5 and 6: the epoch's first half
    finally:
        runner.close()
        session.close()
    assert stages.count("log") == 1  # epoch 1's, at iteration 4; none for iterations 5 and 6
    assert stages[-1] == "checkpoint" and runner.counters.last_checkpoint == 6
    assert runner.counters.last_log_frames == 4 * SMALL_SAC["n_steps"]

    session = Session(root=tmp_path, name="run", resume=True)
    newest = latest_checkpoint(session.checkpoints_location).path
    resumed = from_checkpoint(session, newest, devices=DeviceChoice("cpu"))
    try:  # the checkpoint kept the half epoch's sums: the resumed run logs the whole epoch
        assert resumed.monitor.summary() == partial
    finally:
        resumed.close()
        session.close()


def cli_command(root: Path, driver: str) -> list[str]:
    """``digideep train`` of :data:`STOPPABLE` as session ``s``: the plain loop or the Prefect flow."""
    command = train_command(root, "s", "params.pendulum_sac", STOPPABLE)
    if driver == "prefect":  # the console script, without the plain loop's --no-prefect
        return [DIGIDEEP, "train", *(arg for arg in command[3:] if arg != "--no-prefect")]
    return command


def driver_env(run_env: dict, root: Path, driver: str) -> dict[str, str]:
    """The Prefect path with no server configured (so the CLI starts its own) in a home of its own."""
    env = {k: v for k, v in run_env.items() if k != "PREFECT_API_URL"}
    return {**env, "PREFECT_HOME": str(root / "prefect")} if driver == "prefect" else env


def wait_until(process: subprocess.Popen, condition: Callable[[], object], timeout: float = 300) -> None:
    """Return once ``condition()`` holds (or ``process`` ended, or ``timeout`` passed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if condition():
            return
        time.sleep(0.02)


def wait_for_first_checkpoint(process: subprocess.Popen, session: Path, timeout: float = 300) -> None:
    """Return once ``session`` has a committed checkpoint (or ``process`` ended, or ``timeout`` passed)."""
    checkpoints = session / "checkpoints"
    wait_until(process, lambda: checkpoints.is_dir() and find_checkpoints(checkpoints), timeout)


def stop_after_first_checkpoint(
    command: list[str], env: dict, root: Path, signum: int
) -> tuple[int, str, float]:
    """Start ``command`` in a session of its own, signal its whole process group once its first
    checkpoint is committed and a moment more has passed; its exit status, stderr and the seconds
    from the signal to its exit."""
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # its own process group, as a shell makes for a job
    )  # fmt: skip
    wait_for_first_checkpoint(process, root / "s")
    time.sleep(0.3)  # into the next epoch: a stop mid-epoch is the case that once logged a step more
    signalled = time.monotonic()
    code, stderr = signal_and_wait(process, signum)
    return code, stderr, time.monotonic() - signalled


def signal_and_wait(process: subprocess.Popen, signum: int) -> tuple[int, str]:
    """Signal ``process``'s group; its exit status and stderr (a hang past :data:`STOP_BOUND` fails)."""
    os.killpg(process.pid, signum)
    try:
        _, stderr = process.communicate(timeout=STOP_BOUND)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        _, stderr = process.communicate()
        pytest.fail(f"no exit {STOP_BOUND:.0f} s after {signal.Signals(signum).name}:\n{stderr[-3000:]}")
    return process.returncode, stderr


@pytest.fixture(scope="module")
def straight(tmp_path_factory, mlflow_uri) -> Path:
    """The same run never stopped (the plain loop): its session folder."""
    root = tmp_path_factory.mktemp("straight")
    run(
        train_command(root, "s", "params.pendulum_sac", STOPPABLE),
        {**os.environ, "MLFLOW_TRACKING_URI": mlflow_uri},
    )
    return root / "s"


SAMPLED = "system/"
"""CPU/GPU figures, sampled every few seconds: which epochs hold them depends on timing."""


def journal_steps(session: Path) -> dict[str, list[int]]:
    """``{metric: [step, ...]}`` of the session's metrics journal, in order (sampled figures aside)."""
    steps: dict[str, list[int]] = {}
    for line in (session / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        for key in record["m"]:
            if not key.startswith(SAMPLED):
                steps.setdefault(key, []).append(record["step"])
    return steps


@pytest.mark.parametrize(
    ("driver", "signum"),
    [
        # Ctrl-C under the Prefect path is the case that hung (the temporary server stopped under the
        # flow), SIGTERM on the plain loop the one that exited 0; the other two are slow (a minute or
        # two each) and cover the same code
        pytest.param("prefect", signal.SIGINT, id="prefect-Ctrl-C"),
        pytest.param("plain", signal.SIGTERM, id="plain-SIGTERM"),
        pytest.param("plain", signal.SIGINT, id="plain-Ctrl-C", marks=pytest.mark.slow),
        pytest.param("prefect", signal.SIGTERM, id="prefect-SIGTERM", marks=pytest.mark.slow),
    ],
)
def test_a_stopped_run_exits_with_its_code_and_resumes_to_the_steps_of_a_run_never_stopped(
    tmp_path, run_env, straight, driver, signum
):
    env = driver_env(run_env, tmp_path, driver)
    code, stderr, seconds = stop_after_first_checkpoint(cli_command(tmp_path, driver), env, tmp_path, signum)
    name = signal.Signals(signum).name
    assert code == 128 + signum, stderr[-3000:]  # 130, 143: what a shell reports for the signal
    assert seconds < STOP_BOUND
    assert "Traceback" not in stderr, stderr[-3000:]
    newest = latest_checkpoint(tmp_path / "s" / "checkpoints")
    assert not (tmp_path / "s" / "done.json").exists()
    resume = f"digideep resume s --session-path {tmp_path}"
    line = f"digideep: stopped by {name} at iteration {newest.iteration}, checkpoint written; resume with: {resume}\n"
    assert stderr.endswith(line), stderr[-3000:]

    resume_args = shlex.split(resume)[1:] + (["--no-prefect"] if driver == "plain" else [])
    resumed = subprocess.run(
        [DIGIDEEP, *resume_args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (tmp_path / "s" / "done.json").exists()

    # every metric at the steps of the run never stopped, each once; the stop's own checkpoint adds
    # its duration at its step when it fell mid-epoch (the run never stopped saved no checkpoint there)
    stop_step = newest.iteration * STOPPABLE["n_steps"]
    expected = journal_steps(straight)
    if newest.iteration % STOPPABLE["epoch_size"]:
        expected[CHECKPOINT_METRIC] = sorted([*expected[CHECKPOINT_METRIC], stop_step])
    stopped = journal_steps(tmp_path / "s")
    assert stopped == expected
    client = MlflowClient(run_env["MLFLOW_TRACKING_URI"])
    histories = {}
    for session in (straight, tmp_path / "s"):
        run_id = json.loads((session / "session.json").read_text())["mlflow_run_id"]
        assert client.get_run(run_id).info.status == "FINISHED"
        histories[session] = metric_histories(client, run_id)
    resumed_history = histories[tmp_path / "s"]
    assert {k: [s for s, _ in h] for k, h in resumed_history.items() if not k.startswith(SAMPLED)} == expected
    for key, history in histories[straight].items():  # and the same values, timings aside
        if not key.startswith(TIMING):
            assert resumed_history[key] == history, key


ASYNC_PPO = {"vectorization": "async", "num_workers": 2, "n_steps": 16, "batch_size": 32, "n_epochs": 1,
             "epoch_size": 2, "number_epochs": 500, "save_interval": 1, "test_interval": 100,
             "update_mode": "eager"}  # fmt: skip
"""CartPole PPO with a subprocess per environment worker, which the terminal's Ctrl-C reaches too."""


def test_ctrl_c_stops_a_run_whose_environment_workers_are_processes(tmp_path, run_env):
    command = train_command(tmp_path, "s", "params.cartpole_ppo", ASYNC_PPO)
    code, stderr, _ = stop_after_first_checkpoint(command, run_env, tmp_path, signal.SIGINT)
    assert code == 130, stderr[-3000:]  # the workers ignored it: the run checkpointed and closed them
    assert "Traceback" not in stderr, stderr[-3000:]
    newest = latest_checkpoint(tmp_path / "s" / "checkpoints")
    assert stderr.endswith(f"digideep: stopped by SIGINT at iteration {newest.iteration}, checkpoint written; "
                           f"resume with: digideep resume s --session-path {tmp_path}\n")  # fmt: skip


def test_a_run_killed_with_sigkill_leaves_no_temporary_prefect_server(tmp_path, run_env):
    """The CLI's temporary Prefect server lives in a session of its own (a terminal's Ctrl-C must not
    reach it), so nothing of digideep's cleanup stops it after a ``kill -9``: the kernel does."""
    import psutil

    process = subprocess.Popen(
        cli_command(tmp_path, "prefect"), cwd=REPO, env=driver_env(run_env, tmp_path, "prefect"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    wait_for_first_checkpoint(process, tmp_path / "s")
    servers = [
        child
        for child in psutil.Process(process.pid).children(recursive=True)
        if "server" in child.cmdline() and "start" in child.cmdline()
    ]
    assert servers, "the Prefect path started no temporary server"
    process.kill()
    process.wait()
    _, alive = psutil.wait_procs(servers, timeout=30)
    for server in alive:
        server.kill()
    assert not alive, f"{len(alive)} temporary server process(es) outlived the kill -9"
