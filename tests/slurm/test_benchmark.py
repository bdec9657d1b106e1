"""A benchmark submitted with ``digideep slurm benchmark`` runs each cell as a job of a real Slurm
cluster, a session of its own, and ``digideep report`` reads the cells as a benchmark's.

The cluster (:mod:`digideep_stack.slurm`) runs the jobs as a user's would: each job's ``digideep
train`` tracks its cell to the MLflow store that the submitting command opened the benchmark's
parent run in.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import threading
import time
from pathlib import Path

from mlflow import MlflowClient

from digideep.benchmark import records
from digideep.main import cli
from digideep.report.records import Criteria, read_store
from digideep.report.selection import select_records
from digideep.slurm.cluster import wait_for_jobs
from tests.conftest import REPO
from tests.flows.test_benchmark import TINY
from tests.helpers import usage_error_line
from tests.slurm.test_requeue import DIGIDEEP, slurm, wait_for

SEEDS = (0, 1, 2)


def slurm_benchmark(env: dict[str, str], root: Path, name: str, *options: str) -> subprocess.CompletedProcess:
    """``digideep slurm benchmark`` of pendulum_sac on Pendulum-v1 over :data:`SEEDS`: 150 frames a cell,
    evaluated every 50."""
    command = [*DIGIDEEP, "slurm", "benchmark", "--params", "params.pendulum_sac", "--env", "Pendulum-v1",
               "--seeds", *map(str, SEEDS), "--frames", "150", "--eval-interval", "50", "--eval-episodes", "1",
               "--cpanel", json.dumps(TINY), "--name", name, "--session-path", str(root), "--device", "cpu",
               *options]  # fmt: skip
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=400)


def test_a_benchmarks_cells_run_as_jobs_and_the_report_reads_them(job_env, tmp_path, capsys):
    root = tmp_path / "sessions"
    result = slurm_benchmark(job_env, root, "slurm-bench", "--wait")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    jobs = re.findall(r"submitted job (\d+): cell (\S+), session (\S+)", result.stdout)
    assert len(jobs) == 3 and len({job for job, _, _ in jobs}) == 3, result.stdout
    assert "benchmark slurm-bench FINISHED" in result.stdout, result.stdout

    client = MlflowClient(job_env["MLFLOW_TRACKING_URI"])
    (parent,) = client.search_runs(
        [client.get_experiment_by_name(records.EXPERIMENT).experiment_id],
        filter_string="tags.`digideep.kind` = 'benchmark' and tags.`digideep.benchmark` = 'slurm-bench'",
    )
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["benchmark.cells.completed"] == "3"
    for (job, key, session), seed in zip(jobs, SEEDS, strict=True):
        assert key == f"params.pendulum_sac/Pendulum-v1/seed-{seed}/default"
        assert (Path(session) / "done.json").exists(), key
        assert slurm(job_env, "scontrol", "show", "job", job).count("JobState=COMPLETED") == 1
        cell = {"algorithm": "params.pendulum_sac", "env": "Pendulum-v1", "seed": seed, "variant": "default"}
        (run,) = records.cell_runs(client, "slurm-bench", cell)
        assert run.info.status == "FINISHED", key
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.data.params["cpanel/seed"] == str(seed)
        history = client.get_metric_history(run.info.run_id, "eval/return")
        assert [m.step for m in history] == [50, 100, 150], key

    selection = select_records(
        read_store(client, Criteria("slurm-bench")), "benchmark slurm-bench", ["store"], 1, parent.info.run_id
    )
    assert sorted(r.seed for r in selection.runs) == ["0", "1", "2"]
    assert {r.group for r in selection.runs} == {"params.pendulum_sac"}
    report = ["report", "--benchmark", "slurm-bench", "--tracking-uri", job_env["MLFLOW_TRACKING_URI"],
              "--reps", "100", "--out", str(tmp_path / "report")]  # fmt: skip
    assert cli(report) == 0
    assert "Pendulum-v1" in capsys.readouterr().out
    assert (tmp_path / "report" / "report.html").exists()


def test_bad_input_is_one_line_and_nothing_is_submitted(job_env, tmp_path):
    def refused(*options: str) -> str:
        return usage_error_line(slurm_benchmark(job_env, tmp_path / "sessions", "bad", *options))

    jobs_before = slurm(job_env, "squeue", "-h", "-o", "%i")
    assert "unknown Slurm partition 'gpu'" in refused("--partition=gpu")
    assert "Pendulum-v9" in refused("--env", "Pendulum-v9")
    assert "sb3:SAC cells do not run as Slurm jobs" in refused("--params", "sb3:SAC")
    (tmp_path / "sessions" / "bad-pendulum_sac-Pendulum-v1-s1").mkdir(parents=True)
    assert "bad-pendulum_sac-Pendulum-v1-s1' already exists" in refused()
    assert slurm(job_env, "squeue", "-h", "-o", "%i") == jobs_before
    assert sorted(p.name for p in (tmp_path / "sessions").iterdir()) == ["bad-pendulum_sac-Pendulum-v1-s1"]


def test_waiting_on_a_held_job_says_so_once_and_goes_on_when_it_is_released(
    slurm_cluster, tmp_path, caplog, monkeypatch
):
    env = slurm_cluster.env
    monkeypatch.setenv("SLURM_CONF", env["SLURM_CONF"])  # wait_for_jobs asks the cluster as the command does
    output = f"--output={tmp_path / 'job-%j.out'}"
    job = slurm(env, "sbatch", "--parsable", "--hold", output, "--wrap", "true").strip()  # pending, held
    ended: dict[str, str] = {}
    waiting = threading.Thread(target=lambda: ended.update(wait_for_jobs({"cell a": job}, poll_seconds=0.1)))
    with caplog.at_level(logging.WARNING, logger="digideep.slurm.cluster"):
        waiting.start()
        wait_for(lambda: "is held" in caplog.text, 30, "the wait did not say the job is held")
        time.sleep(1)  # ten more looks at the held job
        slurm(env, "scontrol", "release", job)
        waiting.join(60)
    assert not waiting.is_alive() and ended == {"cell a": "COMPLETED"}
    held = f"cell a: job {job} is held (JobHeldUser): release it with 'scontrol release {job}' or cancel it"
    assert [record.getMessage() for record in caplog.records].count(f"{held} with 'scancel {job}'") == 1
