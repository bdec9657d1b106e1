"""A train cell's run counts its resumes: killed for real after a checkpoint and resumed once, it carries
``digideep.resumes`` 1 and the machine of each of its two attempts, and the benchmark flow's summary
table shows the count."""

from __future__ import annotations

import json

from mlflow import MlflowClient

from digideep.benchmark import records
from digideep.benchmark.matrix import Cell
from digideep.tracking.tags import attempt_machines
from digideep.utility.machine import describe
from tests.pipeline.test_resume import SMALL_SAC, kill_after_checkpoint, resume_command, run, train_command

PARAMS = "params.pendulum_sac"


def test_a_train_cell_resumed_once_carries_one_resume(tmp_path, run_env):
    name = f"counts-{tmp_path.name}"
    cell = Cell(PARAMS, "Pendulum-v1", 0)
    command = [
        *train_command(tmp_path, "cell", PARAMS, SMALL_SAC),
        "--benchmark",
        json.dumps(cell.tags(name, None)),
    ]
    kill_after_checkpoint(command, run_env, tmp_path / "cell" / "checkpoints", count=1)
    assert not (tmp_path / "cell" / "done.json").exists(), "the run finished before it could be killed"
    client = MlflowClient(run_env["MLFLOW_TRACKING_URI"])
    (killed,) = records.cell_runs(client, name, cell.tags(name, None))
    assert killed.data.tags["digideep.resumes"] == "0"  # a run never resumed
    here = describe()
    assert attempt_machines(killed.data.tags) == [(0, here)]

    run(resume_command(tmp_path, "cell"), run_env)

    (resumed,) = records.cell_runs(client, name, cell.tags(name, None))
    assert resumed.info.run_id == killed.info.run_id and resumed.info.status == "FINISHED"
    assert resumed.data.tags["digideep.resumes"] == "1"
    assert attempt_machines(resumed.data.tags) == [(0, here), (1, here)]  # each attempt's machine
    assert json.loads((tmp_path / "cell" / "session.json").read_text())["resumes"] == 1
    summary = records.summary(client, name, [cell], {cell.key: "COMPLETED"})
    assert summary["cells"][0]["resumes"] == 1
    header, line = summary["table"].splitlines()
    assert header.split() == ["cell", "state", "runs", "score", "resumes"]
    assert line.split()[0] == cell.key and line.split()[-1] == "1"
