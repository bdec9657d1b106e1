"""Fault injection: N runs killed with SIGKILL at random moments, resumed, and compared with a run never stopped.

    .venv/bin/python bench/bench_faults.py --n 10     # about a minute per run on the 2-core machine
    .venv/bin/python bench/bench_faults.py --n 50

Setup: ``params/pendulum_sac.py`` with a small cpanel (6 epochs of 2 iterations of 25 steps, a
checkpoint every epoch, a replay ring of 70 frames that wraps), real subprocesses
(``python -m digideep.main --no-prefect``) tracking to a real ``mlflow server`` subprocess on
127.0.0.1. One uninterrupted run is the reference. Then each of the N runs is killed where its
index says, resumed (``--resume``) until it finishes, and compared:

* ``random``: SIGKILL at a random moment: up to 1.5 s after a random journal record (iterations);
* ``checkpoint``: SIGKILL as soon as a checkpoint is being written (its folder holds the ``.saving`` mark but no commit record yet), or
  right after one committed, the first, second or third of them;
* ``journal``: SIGKILL right after the metrics journal grew (a log or a checkpoint's record, while
  the tracker's thread sends and flushes);
* ``resume``: a random kill, then the resume itself killed at a random moment, then resumed again;
* ``finished``: SIGKILL right after ``done.json`` appears (before the MLflow run is ended);
* every fifth run also has the MLflow server SIGKILLed mid-run and restarted a few seconds later.

Compared with the reference: the agents' networks and optimizers, the memory contents and
pointers, the counters, and the MLflow history of every metric: the same steps once each and the
same values, except ``time/``, ``system/`` and ``charts/frames_per_second`` whose values differ
between runs by nature (their presence is compared: once per step, at the same steps for
``time/``). The run must end FINISHED. Prints "N/N identical" and, for a run that differs, why.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
from mlflow import MlflowClient  # noqa: E402

from digideep.pipeline.checkpoint import COMMIT_FILE, SAVING_MARK  # noqa: E402
from tests.helpers import assert_same_tensors  # noqa: E402
from tests.pipeline.test_resume import (  # noqa: E402
    SMALL_SAC,
    assert_same_histories,
    final_state,
    metric_histories,
    resume_command,
    train_command,
)
from tests.tracking.conftest import free_port, start_mlflow_server, stop_mlflow_server  # noqa: E402

CPANEL = {**SMALL_SAC, "number_epochs": 6}
PARAMS = "params.pendulum_sac"
KINDS = ("random", "checkpoint", "journal", "resume", "finished")


def launch(command: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def kill_when(process: subprocess.Popen, condition, deadline: float = 300) -> bool:
    """SIGKILL ``process`` as soon as ``condition()`` holds; False when it ended first."""
    end = time.monotonic() + deadline
    while process.poll() is None and time.monotonic() < end:
        if condition():
            process.kill()
            process.wait()
            return True
        time.sleep(0.002)
    process.wait()
    return False


def finish(command: list[str], env: dict) -> None:
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"resume failed: {result.stderr[-2000:]}")


def faulted_run(
    root: Path, name: str, kind: str, wall: float, env: dict, rng: random.Random, server_up=lambda: None
) -> str:
    """Train ``name`` with the fault ``kind``, resume it to the end; return where it was killed.

    ``server_up()`` returns once the MLflow server answers (a resume needs it to start).
    """
    session = root / name
    checkpoints, journal = session / "checkpoints", session / "metrics.jsonl"
    process = launch(train_command(root, name, PARAMS, CPANEL), env)
    if kind == "checkpoint":
        nth = rng.randint(1, 3)
        staging = rng.random() < 0.5

        def condition() -> bool:
            done = len(list(checkpoints.glob(f"checkpoint-*/{COMMIT_FILE}")))
            writing = staging and any(checkpoints.glob(f"checkpoint-*/{SAVING_MARK}"))
            return done >= nth or (done == nth - 1 and writing)

        where = f"checkpoint {nth} ({'while written' if staging else 'committed'})"
    elif kind == "journal":
        records = rng.randint(1, 10)
        where = f"after journal record {records}"

        def condition() -> bool:
            return journal.exists() and journal.read_bytes().count(b"\n") >= records
    elif kind == "finished":
        where = "after done.json"

        def condition() -> bool:
            return (session / "done.json").exists()
    else:  # a random moment of training: after a random record, plus up to 1.5 s (iterations)
        records, delay = rng.randint(1, 10), rng.uniform(0.0, 1.5)
        where = f"{delay:.2f} s after journal record {records}"
        seen: list[float] = []

        def condition() -> bool:
            if not seen and journal.exists() and journal.read_bytes().count(b"\n") >= records:
                seen.append(time.monotonic())
            return bool(seen) and time.monotonic() - seen[0] >= delay

    killed = kill_when(process, condition)
    where = where if killed else where + " (ended first)"
    server_up()
    if kind == "resume" and killed and not (session / "done.json").exists():
        resume = launch(resume_command(root, name), env)
        delay, start = rng.uniform(0.05, 0.5) * wall, time.monotonic()  # start-up, rebuild, replay
        if kill_when(resume, lambda: time.monotonic() - start >= delay):
            where += f", resume killed after {delay:.1f} s"
    finish(resume_command(root, name), env)
    return where


def compare(root: Path, name: str, reference: dict, client: MlflowClient) -> str | None:
    """None when ``name`` matches the reference, else what differs."""
    states, memory = final_state(root, name)
    try:
        assert_same_tensors(reference["states"]["agents"], states["agents"], "agents")
        assert memory["pointers"] == reference["memory"]["pointers"], "memory pointers"
        for key, values in reference["memory"]["contents"].items():  # NaN (unwritten rows) alike
            np.testing.assert_array_equal(values, memory["contents"][key], err_msg=f"memory {key}")
        for counter in ("iteration", "frames", "best_test_return", "best_checkpoint"):
            assert states["counters"][counter] == reference["states"]["counters"][counter], counter
        run_id = json.loads((root / name / "session.json").read_text())["mlflow_run_id"]
        assert client.get_run(run_id).info.status == "FINISHED", "the MLflow run did not end FINISHED"
        plots = [f.path for f in client.list_artifacts(run_id, "plots")]
        assert "plots/learning_curve.png" in plots, "no learning curve"
        assert_same_histories(reference["histories"], metric_histories(client, run_id))
    except AssertionError as error:
        return " ".join(str(error).split())[:300] or "differs"
    return None


def outage(port: int, root: Path, holder: list, wall: float, rng: random.Random) -> threading.Thread:
    """Kill the MLflow server at a random moment of the run and restart it a few seconds later."""

    def work() -> None:
        time.sleep(rng.uniform(0.2, 0.6) * wall)
        stop_mlflow_server(holder[0], kill=True)
        time.sleep(rng.uniform(1.0, 4.0))
        holder[0] = start_mlflow_server(root, port)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def main(n: int = 10, seed: int = 0, out=sys.stdout) -> tuple[int, int]:
    """Run the benchmark; return ``(identical, n)``."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="bench-faults-") as folder:
        root = Path(folder)
        port = free_port()
        holder = [start_mlflow_server(root, port)]
        uri = f"http://127.0.0.1:{port}"
        env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONHASHSEED": "0"}
        env["MLFLOW_HTTP_REQUEST_MAX_RETRIES"], env["MLFLOW_HTTP_REQUEST_TIMEOUT"] = "0", "5"
        client = MlflowClient(uri)
        try:
            started = time.monotonic()
            finish(train_command(root, "reference", PARAMS, CPANEL), env)
            wall = time.monotonic() - started
            states, memory = final_state(root, "reference")
            run_id = json.loads((root / "reference" / "session.json").read_text())["mlflow_run_id"]
            reference = {"states": states, "memory": memory, "histories": metric_histories(client, run_id)}
            out.write(f"reference run: {wall:.1f} s\n")
            identical = 0
            for index in range(n):
                kind = KINDS[index % len(KINDS)]
                down = outage(port, root, holder, wall, rng) if index % 5 == 4 else None
                name = f"run{index:03d}"
                began = time.monotonic()
                try:
                    where = faulted_run(root, name, kind, wall, env, rng, down.join if down else lambda: None)
                    if down is not None:
                        where += ", MLflow server killed and restarted"
                        finish(_sync_command(root, name), env)  # what the server missed at the run's end
                    problem = compare(root, name, reference, client)
                except Exception as error:  # a resume that failed: report it, go on with the next run
                    where, problem = "?", f"{type(error).__name__}: {' '.join(str(error).split())[:600]}"
                identical += problem is None
                verdict = "identical" if problem is None else f"DIFFERS: {problem}"
                out.write(f"{name} {kind:10s} killed {where}: {verdict} ({time.monotonic() - began:.0f} s)\n")
                out.flush()
        finally:
            stop_mlflow_server(holder[0])
    out.write(f"{identical}/{n} identical\n")
    return identical, n


def _sync_command(root: Path, name: str) -> list[str]:
    """``digideep runs sync``: a run whose server was away at its end sends the rest now."""
    code = "import sys; from digideep.main import cli; sys.exit(cli(sys.argv[1:]))"
    return [sys.executable, "-c", code, "runs", "sync", name, "--session-path", str(root)]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10, help="faulted runs (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the fault schedule")
    args = parser.parse_args()
    identical, n = main(args.n, args.seed)
    sys.exit(0 if identical == n else 1)
