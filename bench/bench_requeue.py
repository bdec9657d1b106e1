"""What a Slurm requeue costs a run, against what its checkpoint costs.

    .venv/bin/python bench/bench_requeue.py            # 4 requeues of one job (root, slurm-wlm, munge)
    .venv/bin/python bench/bench_requeue.py --quick    # 2 requeues

Setup: a one-node Slurm cluster on 127.0.0.1 (:class:`digideep_stack.slurm.LocalSlurm`; requeued jobs
wait ``cred_expire`` = 5 s, a real cluster's default is 120 s) and one job of ``params.pendulum_sac``
(small networks, a checkpoint every epoch of 2 iterations) submitted with ``digideep slurm submit``.
Whenever the job's current run has written 3 checkpoints, the benchmark sends Slurm's warning
(SIGUSR1 to the job's shell, as ``--signal=B:USR1@N`` does: ``scancel --signal=USR1 --batch``); the
run checkpoints and the job requeues itself. Each requeue is split into:

* **stop**: the warning -> digideep has exited (the iteration finished, the checkpoint written, the
  MLflow run left RUNNING for the next job to reopen);
* **queue**: digideep exited -> the requeued job's script starts (Slurm: the requeue, the hold of
  ``cred_expire``, scheduling);
* **start**: the script starts -> training again: the first checkpoint the resumed run writes, less
  the median time between two checkpoints of the run (so: imports, the session, the resume with its
  memory load, the MLflow run reopened);

against **checkpoint**, the median ``time/checkpoint`` of the run's journal (a checkpoint's own cost).
Times come from the job's output (``date +%s.%N`` lines of the script) and from polling the
session's checkpoints every 20 ms. Without root or Slurm it prints why and measures nothing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from digideep.storage.checkpoint import find_checkpoints  # noqa: E402
from digideep_stack.slurm import LocalSlurm, SlurmUnavailableError, missing  # noqa: E402

CPANEL = {
    "number_epochs": 400,
    "epoch_size": 2,
    "n_steps": 25,
    "learning_starts": 25,
    "batch_size": 32,
    "hidden_sizes": [32, 32],
    "save_interval": 1,
    "test_interval": 2,
    "test_episodes": 1,
    "buffer_size": 2000,
}


def checkpoints(session: Path) -> list[int]:
    folder = session / "checkpoints"
    return [c.iteration for c in find_checkpoints(folder)] if folder.is_dir() else []


def run_starts(output: Path) -> list[float]:
    text = output.read_text() if output.exists() else ""
    return [float(t) for t in re.findall(r"run \d+ starts on \S+ at ([\d.]+)", text)]


def exits(output: Path) -> list[float]:
    return [float(t) for t in re.findall(r"digideep exited with \d+ at ([\d.]+)", output.read_text())]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 requeues instead of 4")
    args = parser.parse_args()
    requeues = 2 if args.quick else 4
    reason = missing()
    if reason is not None:
        print(f"bench_requeue: nothing measured: {reason}")
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-requeue-") as scratch:
        folder = Path(scratch)
        try:
            cluster = LocalSlurm(folder / "slurm")
            cluster.start()
        except SlurmUnavailableError as error:
            print(f"bench_requeue: nothing measured: {error}")
            return 0
        try:
            return measure(cluster, folder / "sessions", requeues)
        finally:
            cluster.stop()


def measure(cluster: LocalSlurm, root: Path, requeues: int) -> int:
    env = {**cluster.env, "MLFLOW_TRACKING_URI": f"sqlite:///{root.parent / 'mlflow.db'}"}
    command = [sys.executable, "-c", "import sys; from digideep.main import cli; sys.exit(cli(sys.argv[1:]))",
               "slurm", "submit", "--params", "params.pendulum_sac", "--cpanel", json.dumps(CPANEL),
               "--session-path", str(root), "--session-name", "bench", "--device", "cpu"]  # fmt: skip
    submitted = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    if submitted.returncode != 0:
        print(submitted.stderr, file=sys.stderr)
        return 1
    job = re.search(r"submitted job (\d+)", submitted.stdout).group(1)  # type: ignore[union-attr]
    session, output = root / "bench", root / "slurm" / f"bench-{job}.out"
    seen: dict[int, float] = {}  # checkpoint iteration -> when it was first seen
    warnings: list[float] = []
    deadline = time.monotonic() + 300 + 120 * requeues
    while True:
        if time.monotonic() > deadline:
            print(
                f"bench_requeue: timed out; the job's output:\n{output.read_text()[-3000:]}", file=sys.stderr
            )
            return 1
        failed = re.search(
            r"digideep exited with (?!0 |143 )\d+", output.read_text() if output.exists() else ""
        )
        if failed:
            print(
                f"bench_requeue: the job failed; its output:\n{output.read_text()[-3000:]}", file=sys.stderr
            )
            return 1
        now = time.time()
        for iteration in checkpoints(session):
            seen.setdefault(iteration, now)
        starts = run_starts(output)
        this_run = [t for t in seen.values() if starts and t > starts[-1]]
        if len(warnings) < len(starts) <= requeues and len(this_run) >= 3:
            subprocess.run(["scancel", "--signal=USR1", "--batch", job], env=env, check=True)
            warnings.append(time.time())
        if len(starts) > requeues and len(this_run) >= 3:
            break
        time.sleep(0.02)
    subprocess.run(["scancel", job], env=env, check=True)
    time.sleep(2)
    starts, ended = run_starts(output), exits(output)
    times = sorted(seen.values())
    gaps = [b - a for a, b in itertools.pairwise(times) if not any(a < t < b for t in starts)]
    interval = statistics.median(gaps)
    stop, queue, start = [], [], []
    for k in range(requeues):
        stop.append(ended[k] - warnings[k])
        queue.append(starts[k + 1] - ended[k])
        first = min(t for t in seen.values() if t > starts[k + 1])
        start.append(first - starts[k + 1] - interval)
    journal = [json.loads(line) for line in (session / "metrics.jsonl").read_text().splitlines()]
    checkpoint = statistics.median(r["m"]["time/checkpoint"] for r in journal if "time/checkpoint" in r["m"])

    def row(name: str, values: list[float]) -> str:
        return f"{name:<28}{statistics.median(values):8.2f} s   ({min(values):.2f} to {max(values):.2f})"

    print(f"requeue of a Slurm job, {requeues} requeues (medians, range):")
    print(row("stop (warning -> exit)", stop))
    print(row("queue (exit -> job again)", queue))
    print(row("start (job -> training)", start))
    print(row("requeue in all", [a + b + c for a, b, c in zip(stop, queue, start, strict=True)]))
    print(
        f"{'checkpoint (time/checkpoint)':<28}{checkpoint:8.3f} s   (between checkpoints: {interval:.2f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
