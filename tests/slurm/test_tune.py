"""An Optuna study run with ``digideep slurm tune`` on a real Slurm cluster: each trial a training job
that reports to its trial, the study and MLflow as the Prefect tune flow leaves them, and a driver
killed mid-study continued by running it again, without a trial run twice. A trial's ``digideep
train`` and ``resume`` (what a requeued job runs) report to the trial through ``--trial``.

The cluster (:mod:`digideep_stack.slurm`) runs the jobs as a user's would; the trials are 150-frame
Pendulum runs (``tests/slurm/tune_params.py``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import optuna
import pytest
from mlflow import MlflowClient

from digideep.pipeline import study as studies
from digideep.slurm.tune import JOB_ATTR, trial_option
from tests.conftest import REPO
from tests.helpers import usage_error_line
from tests.slurm.test_requeue import DIGIDEEP, slurm

PARAMS = str(Path(__file__).with_name("tune_params.py"))


def tune_command(root: Path, name: str, *options: str, n_trials: int = 3, concurrency: int = 2) -> list[str]:
    """``digideep slurm tune`` of ``n_trials`` trials of :data:`PARAMS`, ``concurrency`` at a time,
    sessions under ``root``."""
    return [*DIGIDEEP, "slurm", "tune", "--params", PARAMS, "--n-trials", str(n_trials), "--concurrency",
            str(concurrency), "--study-name", name, "--session-path", str(root), "--device", "cpu",
            "--poll-seconds", "1", *options]  # fmt: skip


def test_a_study_runs_its_trials_as_jobs_and_a_killed_driver_continues_it(job_env, tmp_path):
    root = tmp_path / "sessions"
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"  # the default: beside the sessions folder
    driver = subprocess.Popen(tune_command(root, "slurm-study"), cwd=REPO, env=job_env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    deadline = time.monotonic() + 400
    while not job_recorded(storage, 2):  # trial 2 starts once trial 0 or 1 has finished
        assert driver.poll() is None and time.monotonic() < deadline, driver.communicate()[0][-3000:]
        time.sleep(1)
    driver.send_signal(signal.SIGKILL)  # as a login session that dies: no cleanup
    driver.wait()
    before = {t.number: t.user_attrs[JOB_ATTR] for t in load_study(storage).trials}

    again = subprocess.run(tune_command(root, "slurm-study"), cwd=REPO, env=job_env, capture_output=True,
                           text=True, timeout=400)  # fmt: skip
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    study = load_study(storage)
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 3
    assert {t.number: t.user_attrs[JOB_ATTR] for t in study.trials} == before  # no job submitted again
    assert f"trial 2: waiting again for its job {before[2]}" in again.stderr
    outputs = sorted(p.name for p in (root / "slurm").glob("*.out"))
    assert outputs == [f"slurm-study-trial-{n}-{before[n]}.out" for n in range(3)]  # one job a trial
    assert all((root / f"slurm-study-trial-{n}" / "done.json").exists() for n in range(3))

    client = MlflowClient(job_env["MLFLOW_TRACKING_URI"])
    parent = client.get_run(study.user_attrs["mlflow_parent_run_id"])
    assert parent.info.status == "FINISHED" and parent.data.tags["optuna.study"] == "slurm-study"
    assert parent.data.metrics["best_value"] == pytest.approx(study.best_value)
    assert parent.data.params["best/lr"] == str(study.best_params["lr"])
    children = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'"
    )
    by_trial = {int(run.data.tags["optuna.trial"]): run for run in children}
    assert sorted(by_trial) == [0, 1, 2]
    for number, run in by_trial.items():
        assert run.info.status == "FINISHED" and run.data.tags["optuna.study"] == "slurm-study"
        assert run.data.params["cpanel/lr"] == str(study.trials[number].params["lr"])
        reported = study.trials[number].intermediate_values  # each test return, at the run's frames
        assert sorted(reported) == [50, 100, 150] and study.trials[number].value == reported[150]


def load_study(storage: str, name: str = "slurm-study") -> optuna.Study:
    return optuna.load_study(study_name=name, storage=storage)


def job_recorded(storage: str, number: int, name: str = "slurm-study") -> bool:
    """Whether trial ``number`` of study ``name`` has its job's id recorded."""
    try:
        trials = load_study(storage, name).trials
    except KeyError:  # the study is not made yet
        return False
    return any(t.number == number and JOB_ATTR in t.user_attrs for t in trials)


def test_bad_input_is_one_line_and_nothing_is_submitted(job_env, tmp_path):
    def refused(*options: str, env: dict[str, str] = job_env) -> str:
        result = subprocess.run([*tune_command(tmp_path / "sessions", "bad"), *options], cwd=REPO, env=env,
                                capture_output=True, text=True, timeout=120)  # fmt: skip
        return usage_error_line(result)

    jobs_before = slurm(job_env, "squeue", "-h", "-o", "%i")
    assert "unknown Slurm partition 'gpu'" in refused("--partition=gpu")
    dead = tmp_path / "slurm.conf"  # a cluster whose controller is not there
    conf = Path(job_env["SLURM_CONF"]).read_text()
    dead.write_text(re.sub(r"SlurmctldPort=\d+", "SlurmctldPort=9", conf) + "MessageTimeout=1\n")  # fail fast
    assert "no Slurm controller answers" in refused(env={**job_env, "SLURM_CONF": str(dead)})
    assert "has no search_space(trial) function" in refused("--params", "params.pendulum_td3")
    assert "study name 'a b' must start" in refused("--study-name", "a b")
    assert "Optuna study storage" in refused("--storage", f"sqlite:///{tmp_path / 'no' / 'optuna.db'}")
    assert slurm(job_env, "squeue", "-h", "-o", "%i") == jobs_before
    assert not (tmp_path / "sessions").exists()


def test_a_trials_run_reports_to_it_across_a_resume_and_stops_when_pruned(mlflow_uri, tmp_path):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = studies.open_study("cli-trial", storage)
    number = study.ask().number
    parent = studies.open_parent(study, "tune_params", {}, tmp_path, {}, mlflow_uri)
    pruner = {"lower": 0.0, "n_warmup_steps": 60}  # prunes a Pendulum return (< 0) from 60 frames on
    option = trial_option(studies.trial_parameter(storage, "cli-trial", "threshold", pruner, parent), number)
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow_uri, "PYTHONHASHSEED": "0"}
    common = ["--session-path", str(tmp_path), "--device", "cpu", "--no-prefect", option]
    first = {**env, "DIGIDEEP_MAX_ITERATIONS": "1"}  # stops with a checkpoint after 50 frames
    for command, environment in (
        (["train", "--params", PARAMS, "--session-name", "trial", *common], first),
        (["resume", "trial", *common], env),
    ):
        result = subprocess.run([*DIGIDEEP, *command], cwd=REPO, env=environment, capture_output=True,
                                text=True, timeout=300)  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
    trial = load_study(storage, "cli-trial").trials[number]
    assert sorted(trial.intermediate_values) == [50, 100] and trial.user_attrs["pruned"]
    assert studies.tell(study, number, "COMPLETED") == "pruned at 100 frames"
    assert load_study(storage, "cli-trial").trials[number].state.name == "PRUNED"
    assert not (tmp_path / "trial" / "done.json").exists()
    client = MlflowClient(mlflow_uri)
    (run,) = client.search_runs(
        [client.get_run(parent).info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent}'"
    )
    assert run.data.tags["optuna.study"] == "cli-trial" and run.data.tags["optuna.trial"] == str(number)
    assert run.data.tags["pruned"] == "true" and run.info.status == "KILLED"
