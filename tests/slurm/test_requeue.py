"""A training submitted with ``digideep slurm submit`` to a real Slurm cluster survives its time limit,
the warning signal, a preemption and a SIGKILL, and ends bit-identical to a run never stopped.

The cluster (:mod:`digideep_stack.slurm`) runs real jobs: each job runs ``digideep train`` or
``resume`` as a user's job would. The warning that Slurm sends before a time limit
(``--signal=B:USR1@N``: SIGUSR1 to the job's shell) comes from Slurm itself in
:func:`test_a_run_crosses_a_one_minute_time_limit_and_ends_as_a_straight_run`; the 3-job chain sends
the same signal to the same shell with ``scancel --signal=USR1 --batch`` at chosen checkpoints, so
that it does not wait minutes for Slurm's 30-second clock.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient

from digideep.storage.checkpoint import find_checkpoints
from tests.conftest import REPO
from tests.helpers import assert_same_training, usage_error_line
from tests.pipeline.test_resume import (
    SMALL_SAC,
    assert_same_histories,
    final_state,
    metric_histories,
    run,
    train_command,
)

PARAMS = "params.pendulum_sac"
CHAIN = {**SMALL_SAC, "number_epochs": 16}  # a checkpoint every epoch (2 iterations)
LONG = {**SMALL_SAC, "number_epochs": 200}  # trains past two 1-minute limits (a minute a job at most)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sessions' folder of the module (all on this host, which is the cluster's only node)."""
    return tmp_path_factory.mktemp("sessions")


@pytest.fixture(scope="module")
def straight(root: Path, job_env: dict[str, str]) -> str:
    """The session of :data:`CHAIN` trained without a stop, outside Slurm."""
    run(train_command(root, "slurm-straight", PARAMS, CHAIN), job_env)
    return "slurm-straight"


DIGIDEEP = [sys.executable, "-c", "import sys; from digideep.main import cli; sys.exit(cli(sys.argv[1:]))"]
"""The ``digideep`` command of this Python."""


def submit(env: dict[str, str], root: Path, name: str, cpanel: dict, *options: str) -> str:
    """``digideep slurm submit`` of a new session; returns the job id."""
    command = [*DIGIDEEP, "slurm", "submit", "--params", PARAMS, "--cpanel", json.dumps(cpanel),
               "--session-path", str(root), "--session-name", name, "--device", "cpu", *options]  # fmt: skip
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    found = re.search(r"submitted job (\d+)", result.stdout)
    assert found, result.stdout
    return found.group(1)


def wait_for(condition: Callable[[], bool], timeout: float, what: str, output: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            tail = output.read_text()[-3000:] if output is not None and output.exists() else ""
            pytest.fail(f"{what} within {timeout:.0f} s\n{tail}")
        time.sleep(0.05)


def newest(root: Path, name: str) -> int:
    """The newest committed checkpoint's iteration of the session (-1 without one)."""
    folder = root / name / "checkpoints"
    found = find_checkpoints(folder) if folder.is_dir() else []
    return found[-1].iteration if found else -1


def slurm(env: dict[str, str], *command: str) -> str:
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, f"{' '.join(command)}: {result.stderr}"
    return result.stdout


def job_state(env: dict[str, str], job: str) -> str:
    """The job's state as the controller has it, e.g. ``RUNNING``, ``PENDING``, ``COMPLETED``."""
    found = re.search(r"JobState=(\w+)", slurm(env, "scontrol", "show", "job", job))
    assert found
    return found.group(1)


def job_runs(root: Path, name: str, job: str) -> list[int]:
    """The restart count of each run of the job that started, from its output file."""
    output = root / "slurm" / f"{name}-{job}.out"
    text = output.read_text() if output.exists() else ""
    return [int(n) for n in re.findall(r"digideep-slurm: job \d+ run (\d+) starts", text)]


def run_times(text: str) -> tuple[list[float], list[float]]:
    """When each run of a job started and when its digideep exited (Unix seconds), from its output."""
    starts = re.findall(r"digideep-slurm: job \d+ run \d+ starts on \S+ at ([\d.]+)", text)
    exits = re.findall(r"digideep-slurm: digideep exited with \d+ at ([\d.]+)", text)
    return [float(t) for t in starts], [float(t) for t in exits]


def kill_without_warning(env: dict[str, str], job: str) -> None:
    """SIGKILL every process of the job, as when a node dies or the OOM killer strikes: no warning, no
    checkpoint; the job ends FAILED."""
    listed = slurm(env, "scontrol", "listpids", job).splitlines()[1:]
    for pid in [int(line.split()[0]) for line in listed]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def wait_until_done(env: dict[str, str], root: Path, name: str, job: str, timeout: float) -> None:
    """Until the session finished training and the job left the queue, completed."""
    output = root / "slurm" / f"{name}-{job}.out"
    wait_for(lambda: job_state(env, job) == "COMPLETED", timeout, f"job {job} did not complete", output)
    assert (root / name / "done.json").exists(), output.read_text()[-3000:]


def stops(text: str) -> list[int]:
    """The iterations at which the warning stopped the job's runs, from its output."""
    return [int(n) for n in re.findall(r"stopped by SIGTERM at iteration (\d+)", text)]


def assert_same_as_straight(
    root: Path, straight: str, name: str, env: dict[str, str], epochs: int, stopped_at: Sequence[int] = ()
) -> None:
    """Agents, optimizers, counters, replay memory and the MLflow curve equal those of ``straight``.

    A stop's checkpoint where the straight run has none (mid-epoch) adds its ``time/checkpoint``
    record at its step (docs/serialization.md): once each, and no other difference.
    """
    expected_states, expected_memory = final_state(root, straight)
    states, memory = final_state(root, name)
    assert memory["iteration"] == expected_memory["iteration"] == 2 * epochs
    assert_same_training(expected_states, states)
    assert memory["pointers"] == expected_memory["pointers"]
    for key, values in expected_memory["contents"].items():
        np.testing.assert_array_equal(values, memory["contents"][key], err_msg=key)
    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    histories = {}
    for session in (straight, name):
        run_id = json.loads((root / session / "session.json").read_text())["mlflow_run_id"]
        assert client.get_run(run_id).info.status == "FINISHED"
        histories[session] = metric_histories(client, run_id)
        experiment = client.get_run(run_id).info.experiment_id
        named = client.search_runs([experiment], f"attributes.run_name = '{session}'")
        assert len(named) == 1, f"{session}: {len(named)} MLflow runs"
    assert len(histories[name]["charts/iteration"]) == epochs
    checkpoints = histories[name]["time/checkpoint"]
    straight_steps = {step for step, _ in histories[straight]["time/checkpoint"]}
    for step in {iteration * CHAIN["n_steps"] for iteration in stopped_at} - straight_steps:
        extra = [record for record in checkpoints if record[0] == step]
        assert len(extra) == 1, f"the stop's checkpoint at step {step}: {extra}"
        checkpoints.remove(extra[0])
    assert_same_histories(histories[straight], histories[name])


def test_a_chain_of_three_jobs_ends_as_a_straight_run(root, job_env, straight):
    job = submit(job_env, root, "slurm-chain", CHAIN)
    output = root / "slurm" / f"slurm-chain-{job}.out"
    # Slurm's warning before the time limit: SIGUSR1 to the job's shell, after the 2nd and the 7th
    # checkpoint; the job checkpoints, requeues itself and resumes, twice
    for runs, checkpoint in ((0, 4), (1, 14)):
        wait_for(
            lambda runs=runs, checkpoint=checkpoint: (
                job_runs(root, "slurm-chain", job)[-1:] == [runs]
                and newest(root, "slurm-chain") >= checkpoint
            ),
            180,
            f"run {runs} of job {job} did not reach checkpoint {checkpoint}",
            output,
        )
        assert not (root / "slurm-chain" / "done.json").exists(), "the run finished before the warning"
        slurm(job_env, "scancel", "--signal=USR1", "--batch", job)
    wait_until_done(job_env, root, "slurm-chain", job, 180)
    text = output.read_text()
    assert job_runs(root, "slurm-chain", job) == [0, 1, 2], text[-3000:]
    assert text.count("digideep exited with 143") == 2, text[-3000:]
    assert text.count("requeueing job") == 2, text[-3000:]
    assert len(stops(text)) == 2, text[-3000:]
    assert_same_as_straight(root, straight, "slurm-chain", job_env, CHAIN["number_epochs"], stops(text))


def test_a_job_killed_without_warning_resumes_in_a_new_job(root, job_env, straight):
    job = submit(job_env, root, "slurm-killed", CHAIN)
    output = root / "slurm" / f"slurm-killed-{job}.out"
    wait_for(lambda: newest(root, "slurm-killed") >= 4, 180, f"job {job} wrote no 2nd checkpoint", output)
    kill_without_warning(job_env, job)
    wait_for(lambda: job_state(job_env, job) == "FAILED", 60, f"job {job} did not fail", output)
    assert not (root / "slurm-killed" / "done.json").exists(), "the run finished before the kill"
    assert "requeueing" not in output.read_text()
    stopped_at = newest(root, "slurm-killed")
    result = subprocess.run(
        [*DIGIDEEP, "slurm", "resume", "slurm-killed", "--session-path", str(root), "--device", "cpu"],
        cwd=REPO, env=job_env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    again = re.search(r"submitted job (\d+)", result.stdout).group(1)
    wait_until_done(job_env, root, "slurm-killed", again, 180)
    text = (root / "slurm" / f"slurm-killed-{again}.out").read_text()
    assert f"checkpoints/checkpoint-{stopped_at}" in text, text[-3000:]
    assert_same_as_straight(root, straight, "slurm-killed", job_env, CHAIN["number_epochs"])


def test_a_preempted_job_is_requeued_by_slurm_and_ends_as_a_straight_run(
    root, job_env, straight, slurm_cluster
):
    job = submit(job_env, root, "slurm-preempted", CHAIN, "--partition=preemptible")
    output = root / "slurm" / f"slurm-preempted-{job}.out"
    wait_for(lambda: newest(root, "slurm-preempted") >= 2, 180, f"job {job} wrote no checkpoint", output)
    # a job of the higher-priority partition that needs every CPU of the node: Slurm preempts the
    # training (PreemptMode=REQUEUE: SIGTERM to all its processes, no warning) and requeues it
    urgent = slurm(
        job_env, "sbatch", "--parsable", "--partition=urgent", f"--cpus-per-task={slurm_cluster.cpus}",
        f"--output={root / 'slurm' / 'urgent-%j.out'}", "--wrap", "date +%s.%N; sleep 5; date +%s.%N",
    ).strip()  # fmt: skip
    wait_until_done(job_env, root, "slurm-preempted", job, 180)
    assert job_state(job_env, urgent) == "COMPLETED"
    text = output.read_text()
    assert "DUE TO PREEMPTION" in text, text[-3000:]
    assert job_runs(root, "slurm-preempted", job) == [0, 1], text[-3000:]
    assert text.count("digideep exited with 143") == 1, text[-3000:]
    assert len(stops(text)) == 1, f"the run was not stopped by the preemption: {text[-3000:]}"
    assert "requeueing" not in text, "Slurm requeues a preempted job, not its script"
    # the urgent job ran in between: after the training's first run stopped, before its second began
    starts, exits = run_times(text)
    urgent_began, urgent_ended = map(float, (root / "slurm" / f"urgent-{urgent}.out").read_text().split())
    assert exits[0] <= urgent_began and urgent_ended <= starts[1], (starts, exits, urgent_began, urgent_ended)
    assert_same_as_straight(root, straight, "slurm-preempted", job_env, CHAIN["number_epochs"], stops(text))


@pytest.mark.slow  # 3 or more jobs of up to a minute each, and their straight run
def test_a_run_crosses_a_one_minute_time_limit_and_ends_as_a_straight_run(root, job_env):
    # the warning comes 5 s before the limit, as Slurm's 30-second clock sees it: 25 to 55 s in
    job = submit(job_env, root, "slurm-limited", LONG, "--partition=short", "--time=1", "--signal-seconds=5")
    straight = subprocess.Popen(
        train_command(root, "slurm-long", PARAMS, LONG),
        cwd=REPO,
        env=job_env,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, errors = straight.communicate(timeout=400)
    assert straight.returncode == 0, errors[-3000:]
    wait_until_done(job_env, root, "slurm-limited", job, 400)
    text = (root / "slurm" / f"slurm-limited-{job}.out").read_text()
    assert len(job_runs(root, "slurm-limited", job)) >= 3, text[-3000:]
    assert stops(text), text[-3000:]
    assert_same_as_straight(root, "slurm-long", "slurm-limited", job_env, LONG["number_epochs"], stops(text))


def test_bad_input_is_one_line_before_anything_is_submitted(root, job_env, tmp_path):
    def refused(*options: str, env: dict[str, str] = job_env) -> str:
        result = subprocess.run(
            [*DIGIDEEP, "slurm", "submit", "--params", PARAMS, "--session-path", str(tmp_path / "sessions"),
             "--session-name", "bad", *options],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        return usage_error_line(result)

    jobs_before = slurm(job_env, "squeue", "-h", "-o", "%i")
    assert "unknown Slurm partition 'gpu'; this cluster has: debug, preemptible, short, urgent" in refused(
        "--partition=gpu"
    )
    assert "above the limit of partition 'short' (1 min)" in refused("--partition=short", "--time=5")
    (tmp_path / "job.yaml").write_text("partiton: short\n")
    assert "did you mean 'partition'?" in refused(f"--slurm-config={tmp_path / 'job.yaml'}")
    dead = tmp_path / "slurm.conf"  # a cluster whose controller is not there
    conf = Path(job_env["SLURM_CONF"]).read_text()
    dead.write_text(re.sub(r"SlurmctldPort=\d+", "SlurmctldPort=9", conf) + "MessageTimeout=1\n")  # fail fast
    assert "no Slurm controller answers" in refused(env={**job_env, "SLURM_CONF": str(dead)})
    assert slurm(job_env, "squeue", "-h", "-o", "%i") == jobs_before
    assert not (tmp_path / "sessions").exists()


def test_a_cancelled_job_stops_with_a_checkpoint_and_stays_stopped(root, job_env):
    job = submit(job_env, root, "slurm-cancelled", CHAIN)
    output = root / "slurm" / f"slurm-cancelled-{job}.out"
    wait_for(lambda: newest(root, "slurm-cancelled") >= 2, 180, f"job {job} wrote no checkpoint", output)
    slurm(job_env, "scancel", job)  # SIGTERM to every process of the job, and no warning
    wait_for(lambda: job_state(job_env, job) == "CANCELLED", 60, f"job {job} was not cancelled", output)
    wait_for(lambda: "digideep exited with" in output.read_text(), 60, "the job's script did not end", output)
    text = output.read_text()
    assert "digideep exited with 143" in text, text[-3000:]
    assert "stopped by SIGTERM at iteration" in text, text[-3000:]
    assert "requeueing" not in text
    time.sleep(2)
    assert job_state(job_env, job) == "CANCELLED"
    assert job_runs(root, "slurm-cancelled", job) == [0]
    assert not (root / "slurm-cancelled" / "done.json").exists()
