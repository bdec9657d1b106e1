"""How ``digideep slurm tune`` handles a trial's job that did not simply run to its end, on a real
Slurm cluster.

- A job that failed (every process SIGKILLed, as by a dying node or the OOM killer) is submitted
  again and resumes its trial's session from the newest checkpoint, up to ``--max-trial-retries``
  times; after that the trial fails and the study goes on with a new one.
- A job that ended while no driver was watching, and that the controller has since forgotten
  (``MinJobAge``; the cluster keeps no accounting, so ``sacct`` knows nothing of it either), counts
  by its trial: completed when its session finished or the trial was pruned, else submitted again.
- A job that Slurm requeued stays the trial's job: the driver waits through its requeue, and the
  trial finishes in the job's next run, resumed from its checkpoint.
- A job put on hold (``scontrol requeuehold``) waits for a person: the driver says so once and waits;
  released, the job runs again and the trial finishes.

The trials are the Pendulum runs of ``tests/slurm/tune_params.py``, a checkpoint and a test every 50
frames; a job killed or requeued after its first checkpoint trains 300 frames (:data:`SIX_EPOCHS`),
so that the kill or the requeue comes well before its run ends.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest

from digideep.pipeline import study as studies
from digideep.pipeline.study import CPANEL_ATTR
from digideep.slurm.tune import JOB_ATTR, RETRIES_ATTR, TrialJobs
from digideep.storage.location import Location
from digideep.tracking.trials import PRUNED_ATTR
from digideep_stack.slurm import LocalSlurm
from tests.conftest import REPO
from tests.slurm.conftest import running_cluster, submission_env
from tests.slurm.test_requeue import job_runs, job_state, kill_without_warning, newest, slurm, stops, wait_for
from tests.slurm.test_tune import job_recorded, load_study, tune_command

SIX_EPOCHS = '--cpanel={"number_epochs": 6}'
"""The trials' base cpanel when their jobs are stopped after the first of six checkpoints."""

Driver = tuple[subprocess.Popen, Path]
"""A ``digideep slurm tune`` running in the background, and the file of its output."""


@pytest.fixture(scope="module")
def forgetful_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    """A one-node cluster that forgets a job seconds after it ended (``MinJobAge=2``, and a purge of
    old records every few seconds); like the default one, it keeps no accounting."""
    yield from running_cluster(tmp_path_factory.mktemp("forgetful-slurm"), min_job_age=2)


@pytest.fixture(scope="module")
def forgetful_env(forgetful_cluster: LocalSlurm, mlflow_uri: str) -> dict[str, str]:
    """The environment of submissions to :func:`forgetful_cluster`."""
    return submission_env(forgetful_cluster, mlflow_uri)


@contextlib.contextmanager
def driving(command: list[str], env: dict[str, str], output: Path) -> Iterator[Driver]:
    """``command`` (a driver) running in the background, its output into ``output``; killed on the way
    out if it still runs."""
    with output.open("w") as file:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=file, stderr=subprocess.STDOUT)
    try:
        yield process, output
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def wait_while_driving(
    driver: Driver, condition: Callable[[], bool], what: str, timeout: float = 300
) -> None:
    """Until ``condition`` holds; fails at once, with the driver's output, when the driver exits first."""
    process, output = driver

    def ready() -> bool:
        assert process.poll() is None, (
            f"the driver exited ({process.returncode}) first: {output.read_text()[-3000:]}"
        )
        return condition()

    wait_for(ready, timeout, what, output)


def finish(driver: Driver, timeout: float = 300) -> str:
    """The driver's output once it has exited with status 0."""
    process, output = driver
    process.wait(timeout)
    text = output.read_text()
    assert process.returncode == 0, text[-3000:]
    return text


def jobs_named(env: dict[str, str], name: str) -> list[str]:
    """The ids of the jobs named ``name`` (a trial's session) that the controller knows."""
    return slurm(env, "squeue", "-h", "-t", "all", "-n", name, "-o", "%i").split()


def forgotten(env: dict[str, str], job: str) -> bool:
    """Whether the controller no longer knows the job (``scontrol show job`` refuses its id)."""
    result = subprocess.run(
        ["scontrol", "show", "job", job], env=env, capture_output=True, text=True, timeout=30
    )
    return result.returncode != 0 and "invalid job id" in result.stderr.lower()


def resumed_from(root: Path, session: str, job: str) -> list[int]:
    """The checkpoint iterations the job's runs resumed the session from, from its output."""
    text = (root / "slurm" / f"{session}-{job}.out").read_text()
    checkpoints = root / session / "checkpoints"
    return [
        int(line.rpartition("-")[2])
        for line in text.splitlines()
        if f" from {checkpoints}/checkpoint-" in line
    ]


def resumes(root: Path, session: str) -> int:
    """How many times the session was resumed (``resumes`` in its ``session.json``)."""
    return int(json.loads((root / session / "session.json").read_text()).get("resumes", 0))


def assert_completed_with_value(trial: optuna.trial.FrozenTrial, epochs: int = 3) -> None:
    """The trial completed, its value its last test return, with a test return every 50 frames of its
    ``epochs``."""
    assert trial.state.name == "COMPLETE", trial
    assert sorted(trial.intermediate_values) == [50 * (epoch + 1) for epoch in range(epochs)]
    assert trial.value == trial.intermediate_values[50 * epochs]


@dataclass(frozen=True)
class TroubledStudy:
    """A study of two trials run at once, ``--max-trial-retries=1``: after its first checkpoint, trial
    0's job was killed without warning and trial 1's was requeued by Slurm.

    Attributes:
        root: the sessions' folder.
        storage: the study's storage URL.
        output: the driver's output.
        first_jobs: each trial's first job.
        killed_at: the newest checkpoint of trial 0 when its job was killed.
    """

    root: Path
    storage: str
    output: str
    first_jobs: dict[int, str]
    killed_at: int


@pytest.fixture(scope="module")
def troubled(job_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> TroubledStudy:
    """The :class:`TroubledStudy`, its driver run to its end."""
    folder = tmp_path_factory.mktemp("troubled")
    root, sessions = folder / "sessions", {number: f"troubled-trial-{number}" for number in (0, 1)}
    command = tune_command(root, "troubled", "--max-trial-retries=1", SIX_EPOCHS, n_trials=2, concurrency=2)
    jobs: dict[int, str] = {}

    def disturb() -> bool:
        for number, session in sessions.items():
            if number not in jobs and newest(root, session) >= 1:
                (jobs[number],) = jobs_named(job_env, session)
                if number == 0:
                    kill_without_warning(job_env, jobs[0])
                else:  # an administrator's requeue: SIGTERM to every process (no warning), then pending again
                    slurm(job_env, "scontrol", "requeue", jobs[1])
        return len(jobs) == 2

    with driving(command, job_env, folder / "driver.log") as driver:
        wait_while_driving(driver, disturb, "the trials wrote no checkpoint")
        wait_for(lambda: job_state(job_env, jobs[0]) == "FAILED", 60, f"job {jobs[0]} did not fail")
        assert not (root / sessions[0] / "done.json").exists(), "trial 0 finished before the kill"
        killed_at = newest(root, sessions[0])
        wait_while_driving(
            driver, lambda: job_state(job_env, jobs[1]) == "PENDING", f"job {jobs[1]} was not requeued", 90
        )
        output = finish(driver)
    return TroubledStudy(root, f"sqlite:///{folder / 'optuna.db'}", output, jobs, killed_at)


def test_a_failed_trial_job_is_submitted_again_and_resumes_the_trials_session(troubled, job_env):
    trial = load_study(troubled.storage, "troubled").trials[0]
    first, second = troubled.first_jobs[0], trial.user_attrs[JOB_ATTR]
    assert f"trial 0: job {first} FAILED; submitted again as job {second}" in troubled.output
    assert trial.user_attrs[RETRIES_ATTR] == 1
    assert_completed_with_value(trial, epochs=6)
    assert job_state(job_env, first) == "FAILED" and job_state(job_env, second) == "COMPLETED"
    # the second job resumed the session from the newest checkpoint: not trained again from the start
    assert resumed_from(troubled.root, "troubled-trial-0", second) == [troubled.killed_at]
    assert resumes(troubled.root, "troubled-trial-0") == 1


def test_a_trial_job_requeued_by_slurm_stays_the_trials_job_and_resumes(troubled, job_env):
    root, session = troubled.root, "troubled-trial-1"
    trial = load_study(troubled.storage, "troubled").trials[1]
    job = troubled.first_jobs[1]
    assert_completed_with_value(trial, epochs=6)
    assert trial.user_attrs[JOB_ATTR] == job and RETRIES_ATTR not in trial.user_attrs  # never submitted again
    assert f"trial 1: job {job}" not in troubled.output
    assert f"trial 1: test return {trial.value:.2f}" in troubled.output
    assert job_state(job_env, job) == "COMPLETED"
    assert [p.name for p in (root / "slurm").glob(f"{session}-*.out")] == [f"{session}-{job}.out"]
    output = (root / "slurm" / f"{session}-{job}.out").read_text()
    assert job_runs(root, session, job) == [0, 1], output[-3000:]
    assert output.count("digideep exited with 143") == 1 and "requeueing" not in output, output[-3000:]
    assert resumed_from(root, session, job) == stops(output)  # the second run resumed the first's checkpoint
    assert resumes(root, session) == 1


def test_a_trial_whose_job_fails_with_no_retry_left_fails_and_the_study_goes_on(job_env, tmp_path):
    root, session = tmp_path / "sessions", "unretried-trial-0"
    command = tune_command(root, "unretried", "--max-trial-retries=0", n_trials=2, concurrency=2)
    with driving(command, job_env, tmp_path / "driver.log") as driver:
        wait_while_driving(driver, (root / session / "params.json").exists, "trial 0's run did not start")
        (first,) = jobs_named(job_env, session)
        kill_without_warning(job_env, first)
        output = finish(driver)  # the failed trial does not count: trial 2 takes its place

    study = load_study(f"sqlite:///{tmp_path / 'optuna.db'}", "unretried")
    assert [t.state.name for t in study.trials] == ["FAIL", "COMPLETE", "COMPLETE"]
    assert "trial 0: failed (train run failed)" in output and "submitted again" not in output
    assert study.trials[0].user_attrs[JOB_ATTR] == first and RETRIES_ATTR not in study.trials[0].user_attrs
    assert job_state(job_env, first) == "FAILED"
    assert [p.name for p in (root / "slurm").glob(f"{session}-*.out")] == [f"{session}-{first}.out"]
    for trial in study.trials[1:]:
        assert_completed_with_value(trial)


def test_jobs_forgotten_while_no_driver_watched_count_by_their_trials(forgetful_env, tmp_path):
    root, storage = tmp_path / "sessions", f"sqlite:///{tmp_path / 'optuna.db'}"
    finished, killed = "forgotten-trial-0", "forgotten-trial-1"
    command = tune_command(root, "forgotten", "--max-trial-retries=1", SIX_EPOCHS, n_trials=2, concurrency=2)

    def submitted() -> bool:  # trial 1's job submitted (cheap to ask), and recorded for the next driver
        return bool(jobs_named(forgetful_env, killed)) and job_recorded(storage, 1, "forgotten")

    with driving(command, forgetful_env, tmp_path / "driver.log") as driver:
        wait_while_driving(driver, submitted, "trial 1's job was not submitted")
        driver[0].send_signal(signal.SIGKILL)  # no driver looks while the jobs end and are forgotten
    jobs = {t.number: t.user_attrs[JOB_ATTR] for t in load_study(storage, "forgotten").trials}
    wait_for(lambda: newest(root, killed) >= 1, 300, f"trial 1's job {jobs[1]} wrote no checkpoint")
    kill_without_warning(forgetful_env, jobs[1])
    wait_for(lambda: (root / finished / "done.json").exists(), 300, f"trial 0's job {jobs[0]} did not finish")
    wait_for(
        lambda: all(forgotten(forgetful_env, j) for j in jobs.values()), 120, f"jobs {jobs} not forgotten"
    )
    assert not (root / killed / "done.json").exists(), "trial 1 finished before the kill"
    stopped_at = newest(root, killed)
    accounting = subprocess.run(["sacct", "-j", jobs[1]], env=forgetful_env, capture_output=True, text=True)
    assert accounting.returncode != 0 and "accounting storage is disabled" in accounting.stderr

    again = subprocess.run(command, cwd=REPO, env=forgetful_env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    trials = load_study(storage, "forgotten").trials
    for trial in trials:
        assert_completed_with_value(trial, epochs=6)
    # trial 0's session finished: the trial counts completed, nothing is submitted
    assert trials[0].user_attrs[JOB_ATTR] == jobs[0] and RETRIES_ATTR not in trials[0].user_attrs
    assert f"trial 0: test return {trials[0].value:.2f}" in again.stderr
    # trial 1's did not: its job is submitted again and resumes it from its newest checkpoint
    second = trials[1].user_attrs[JOB_ATTR]
    assert f"trial 1: job {jobs[1]} PURGED; submitted again as job {second}" in again.stderr
    assert trials[1].user_attrs[RETRIES_ATTR] == 1
    assert resumed_from(root, killed, second) == [stopped_at]
    assert resumes(root, killed) == 1 and resumes(root, finished) == 0


def test_a_forgotten_job_of_a_pruned_trial_counts_completed(forgetful_cluster, tmp_path, monkeypatch):
    env = forgetful_cluster.env
    monkeypatch.setenv("SLURM_CONF", env["SLURM_CONF"])  # TrialJobs asks the cluster as the driver does
    output = f"--output={tmp_path / 'job-%j.out'}"
    job = slurm(env, "sbatch", "--parsable", output, "--wrap", "true").strip()
    wait_for(lambda: forgotten(env, job), 120, f"job {job} not forgotten")
    study = studies.open_study("pruned", f"sqlite:///{tmp_path / 'optuna.db'}")
    for pruned in (True, False):  # neither session exists: only the pruned trial's run is known to have ended
        trial = study.ask()
        trial.report(-1000.0, 50)
        trial.set_user_attr(CPANEL_ATTR, {})
        trial.set_user_attr(JOB_ATTR, job)
        trial.set_user_attr(PRUNED_ATTR, pruned)

    def submit(number: int, cpanel: dict) -> str:
        return slurm(env, "sbatch", "--parsable", "--hold", output, "--wrap", "true").strip()

    in_flight = {0: job, 1: job}
    trial_jobs = TrialJobs(study, submit, Location(tmp_path / "sessions"), max_retries=1)
    assert trial_jobs.ended(in_flight) == {0: "COMPLETED"}
    assert studies.tell(study, 0, "COMPLETED") == "pruned at 50 frames"
    assert study.trials[0].state.name == "PRUNED"
    assert in_flight[1] != job and job_state(env, in_flight[1]) == "PENDING"  # trial 1's job, submitted again
    assert study.trials[1].user_attrs[RETRIES_ATTR] == 1
    assert study.trials[1].user_attrs[JOB_ATTR] == in_flight[1]
    slurm(env, "scancel", in_flight[1])


def test_a_held_trial_job_is_said_once_to_be_held_and_runs_when_released(job_env, tmp_path):
    root, session = tmp_path / "sessions", "held-trial-0"
    command = tune_command(root, "held", SIX_EPOCHS, n_trials=1, concurrency=1)
    with driving(command, job_env, tmp_path / "driver.log") as driver:
        wait_while_driving(driver, lambda: newest(root, session) >= 1, "trial 0 wrote no checkpoint")
        (job,) = jobs_named(job_env, session)
        slurm(job_env, "scontrol", "requeuehold", job)  # stopped, then pending until a person releases it
        held = f"trial 0: job {job} is held ("
        wait_while_driving(
            driver, lambda: held in driver[1].read_text(), "the driver did not say the job is held"
        )
        time.sleep(3)  # three more looks at the held job (--poll-seconds 1)
        assert job_state(job_env, job) == "PENDING" and jobs_named(job_env, session) == [job]
        slurm(job_env, "scontrol", "release", job)
        output = finish(driver)

    assert output.count(held) == 1, output[-3000:]
    assert f"release it with 'scontrol release {job}' or cancel it with 'scancel {job}'" in output
    trial = load_study(f"sqlite:///{tmp_path / 'optuna.db'}", "held").trials[0]
    assert_completed_with_value(trial, epochs=6)
    assert trial.user_attrs[JOB_ATTR] == job and RETRIES_ATTR not in trial.user_attrs
    assert job_state(job_env, job) == "COMPLETED" and job_runs(root, session, job) == [0, 1]
