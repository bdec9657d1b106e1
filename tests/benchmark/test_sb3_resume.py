"""An SB3 reference cell killed for real continues from its checkpoint, in the same MLflow run.

The cell trains in a process of its own (``tests/benchmark/sb3_cell.py``), is SIGKILLed once its
first checkpoint exists, and is run again: it continues the run it started (one run for the cell,
its ``digideep.resumes`` tag 1, the machine of each attempt tagged), logs every evaluation step once,
and trains exactly to the budget.
"""

from __future__ import annotations

import subprocess
import sys
import time

from mlflow import MlflowClient

from digideep.benchmark import records
from digideep.pipeline.evaluation import RETURN_METRIC
from digideep.tracking.tags import attempt_machines
from digideep.utility.machine import describe
from tests.benchmark.sb3_cell import CELL, KNOBS, PROTOCOL, checkpoints, train
from tests.conftest import REPO


def test_an_sb3_cell_killed_after_its_first_checkpoint_continues_its_run_to_the_budget(tmp_path, run_env):
    sessions, name = tmp_path / "sessions", f"sb3-kill-{tmp_path.name}"
    saved = checkpoints(sessions, name)
    command = [sys.executable, "-m", "tests.benchmark.sb3_cell", str(sessions), name]
    process = subprocess.Popen(
        command, cwd=REPO, env=run_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 300
    while process.poll() is None and saved.latest() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.kill()
    _, stderr = process.communicate()
    first = saved.latest()
    assert first is not None, stderr.decode()[-3000:]
    assert first.frames == PROTOCOL.frame_interval  # taken after the first evaluation

    client = MlflowClient(run_env["MLFLOW_TRACKING_URI"])
    (killed,) = records.cell_runs(client, name, CELL)
    run_id = killed.info.run_id
    assert (first.run_id, killed.info.status, killed.data.tags["digideep.resumes"]) == (
        run_id,
        "RUNNING",
        "0",
    )
    assert [m.step for m in client.get_metric_history(run_id, RETURN_METRIC)] == [100]
    # an attempt killed between an evaluation's log and the checkpoint after it leaves a step that
    # the checkpoint does not cover: the continued cell evaluates it again but does not log it again
    client.log_metric(run_id, RETURN_METRIC, -123.0, int(time.time() * 1000), 200)

    score = train(sessions, name, client)

    (run,) = records.cell_runs(client, name, CELL)
    assert (run.info.run_id, run.info.status) == (run_id, "FINISHED")
    history = sorted((m.step, m.value) for m in client.get_metric_history(run_id, RETURN_METRIC))
    assert [step for step, _ in history] == [100, 200, 300]  # every evaluation once
    assert history[1][1] == -123.0 and history[2][1] == score
    assert run.data.tags["digideep.resumes"] == "1"
    assert attempt_machines(run.data.tags) == [(0, describe()), (1, describe())]
    # SB3's own counts: the budget's frames, and one update per frame after learning_starts but the
    # last (as an uninterrupted run: the transitions and updates up to the checkpoint were kept)
    budget = PROTOCOL.frame_budget
    assert run.data.tags["sb3.num_timesteps"] == str(budget)
    assert run.data.tags["sb3.n_updates"] == str(budget - 1 - KNOBS["learning_starts"])
    assert not saved.folder.exists()  # a finished cell keeps no checkpoint
