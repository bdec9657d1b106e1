"""Embedded stores are created whole or not at all (issue #28 item 1).

A process killed while MLflow created ``data/mlflow.db`` used to leave a store that every later
command refused (``table guardrails already exists``). Here real processes are SIGKILLed at moments
spread over the creation of a fresh store, and the next command must work on what they left.
"""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
from pathlib import Path

import optuna
from mlflow import MlflowClient

from digideep.pipeline.study import default_storage
from digideep.tracking.mlflow_logger import MlflowTracker
from digideep.tracking.naming import resolve_tracking_uri

REPOSITORY = Path(__file__).resolve().parents[2]

# One process imports once, times one creation in a forked child, then forks one creator per folder
# and SIGKILLs it at moments spread over that time (forks, so that every kill lands in the creation,
# not in the imports); it prints the creation's duration.
_KILLER = """
import os, signal, sys, time
from digideep.tracking.naming import resolve_tracking_uri
from digideep.pipeline.study import default_storage
import mlflow.store.tracking.sqlalchemy_store, optuna.storages

kind, root, kills = sys.argv[1], sys.argv[2], int(sys.argv[3])

def create(data):
    pid = os.fork()
    if pid == 0:
        resolve_tracking_uri(None, data) if kind == "mlflow" else default_storage(data + "/sessions")
        os._exit(0)
    return pid

started = time.perf_counter()
os.waitpid(create(root + "/timed"), 0)
duration = time.perf_counter() - started
for i in range(kills):
    pid = create(f"{root}/killed-{i}")
    time.sleep(duration * i / kills)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
print(duration)
"""


def _kill_while_creating(kind: str, root: Path, kills: int) -> list[Path]:
    """Kill ``kills`` processes creating a fresh store of ``kind`` each; return their data folders."""
    subprocess.run(
        [sys.executable, "-c", _KILLER, kind, str(root), str(kills)],
        cwd=REPOSITORY,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return [root / f"killed-{i}" for i in range(kills)]


def test_an_mlflow_store_killed_while_created_is_absent_or_whole(tmp_path: Path) -> None:
    folders = _kill_while_creating("mlflow", tmp_path, kills=10)
    cut = [f for f in folders if not (f / "mlflow.db").exists()]
    assert cut, "no kill landed before the store was complete; the test did not test anything"
    assert any(list(f.glob(".mlflow.db.*")) for f in cut)  # a half-made store, kept out of the way
    for folder in folders:  # the next command works on every one of them
        tracker = MlflowTracker("params.killed", data_root=folder, asynchronous=False)
        run_id = tracker.start({"lr": 0.001}, {"seed": 0})
        tracker.log_metrics({"x": 1.0}, step=0)
        tracker.finish()
        assert MlflowClient(tracker.uri).get_run(run_id).data.metrics == {"x": 1.0}
        assert sorted(p.name for p in folder.iterdir()) == ["mlflow.db", "mlflow.db.lock"]


def test_an_optuna_store_killed_while_created_is_absent_or_whole(tmp_path: Path) -> None:
    folders = _kill_while_creating("optuna", tmp_path, kills=5)
    assert [f for f in folders if not (f / "optuna.db").exists()]
    for folder in folders:
        study = optuna.create_study(storage=default_storage(str(folder / "sessions")), study_name="s")
        study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=1)
        assert len(study.trials) == 1
        assert sorted(p.name for p in folder.iterdir() if p.name != "sessions") == [
            "optuna.db",
            "optuna.db.lock",
        ]


def _create_optuna_store(data: str, barrier, results) -> None:  # a process of the test below
    barrier.wait()
    try:
        optuna.create_study(storage=default_storage(data + "/sessions"), study_name="s", load_if_exists=True)
        results.put(True)
    except Exception as error:
        results.put(f"{type(error).__name__}: {error}")


def test_two_processes_creating_the_optuna_store_at_once_both_succeed(tmp_path: Path) -> None:
    # the MLflow store's race: test_runs_starting_together_on_a_fresh_sqlite_store_all_start
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(2), context.Queue()
    starters = [
        context.Process(target=_create_optuna_store, args=(str(tmp_path), barrier, results)) for _ in range(2)
    ]
    for process in starters:
        process.start()
    outcomes = [results.get(timeout=240) for _ in starters]
    for process in starters:
        process.join(timeout=60)
    assert outcomes == [True, True]


def test_an_existing_store_is_used_as_it_is(tmp_path: Path) -> None:
    uri, _ = resolve_tracking_uri(None, tmp_path)
    experiment = MlflowClient(uri).create_experiment("kept")
    before = (tmp_path / "mlflow.db").stat().st_ino
    assert resolve_tracking_uri(None, tmp_path)[0] == uri
    assert (tmp_path / "mlflow.db").stat().st_ino == before
    assert MlflowClient(uri).get_experiment_by_name("kept").experiment_id == experiment
