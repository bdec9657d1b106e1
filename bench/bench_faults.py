"""Fault injection: N trials of a session struck by a fault, resumed, and compared with a run never stopped.

    .venv/bin/python bench/bench_faults.py --n 22            # every kind twice, the plain loop
    .venv/bin/python bench/bench_faults.py --flow --n 11     # the same on the Prefect path
    .venv/bin/python bench/bench_faults.py --quick           # 2 trials of 2 kinds
    .venv/bin/python bench/bench_faults.py --kinds store,ctrl-c --n 4 --keep

Setup: ``params/pendulum_sac.py`` with a small cpanel (6 epochs of 2 iterations of 25 steps, a
checkpoint every epoch, a replay ring of 70 frames that wraps), real subprocesses tracking to a real
``mlflow server`` on 127.0.0.1: ``python -m digideep.main --no-prefect`` (the plain loop), or with
``--flow`` ``digideep train`` / ``digideep resume`` through the CLI's Prefect flow and its temporary
server. One uninterrupted run of the same path is the reference. Trial ``i`` gets kind ``i`` modulo
the kinds, in this order:

* ``random``: SIGKILL up to 1.5 s after a random journal record (a random moment of an iteration);
* ``checkpoint``: SIGKILL while the first, second or third checkpoint is written, or once committed;
* ``journal``: SIGKILL right after the metrics journal grew;
* ``resume``: a random kill, then the resume itself killed at a random moment;
* ``finished``: SIGKILL right after ``done.json`` appears (before the MLflow run is ended);
* ``store``: a fresh data root and no ``MLFLOW_TRACKING_URI``: SIGKILL 0-0.5 s after the embedded
  MLflow store began to be built; every other one, the Optuna store as the tune flow opens it;
* ``ctrl-c`` / ``sigterm``: SIGINT / SIGTERM to the process group at a random moment; the run must
  exit within 60 s with 130 / 143 (0 if it had finished), no traceback;
* ``s3-outage``: the session on ``s3://`` (moto behind an endpoint of the benchmark's own), the store
  down for about 20 s at a random moment and back on the same port;
* ``damaged-chunk`` / ``damaged-checkpoint``: SIGKILL after a random checkpoint, then the lowest bit
  of a random float of a memory chunk / a random byte of the newest checkpoint's ``states.pt``
  flipped (every other damaged checkpoint with a 1000-frame ring, so that falling back can work).

In the second round of kinds (trials 12 to 16, 34 to 38, ...) the MLflow server is also SIGKILLed
mid-run and restarted a few seconds later (the five SIGKILL kinds only). Each trial is then
resumed until it finishes and judged (:mod:`bench.faults.verdict`): ``identical`` to the reference
(agents, explorers, RNGs, memory pointers and bytes, counters, the MLflow run FINISHED with every
metric at the same steps with the same values); ``refused in one line`` (a non-zero exit, exactly one
``digideep: error:`` line, no traceback, and the session's files untouched by the refusal); or
``DIFFERENT`` with why. Prints a line per trial, the counts per kind, the goal line and the CPU line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mlflow import MlflowClient  # noqa: E402

from bench.common import machine  # noqa: E402
from bench.faults import kinds  # noqa: E402
from bench.faults.run import Driver, Ended, run_id_of, run_to_end, stop_all  # noqa: E402
from bench.faults.trial import Outcome, judge, optuna_store_trial, run_optuna_script  # noqa: E402
from bench.faults.verdict import DIFFERENT, IDENTICAL, REFUSED, Final, final_of  # noqa: E402
from tests.s3 import StoreOutage, moto_server  # noqa: E402
from tests.tracking.conftest import free_port, start_mlflow_server, stop_mlflow_server  # noqa: E402

CPANEL = {
    "number_epochs": 6, "epoch_size": 2, "n_steps": 25, "learning_starts": 25, "batch_size": 32,
    "hidden_sizes": [32, 32], "save_interval": 1, "test_interval": 2, "test_episodes": 1,
    "buffer_size": 70,  # frames: the ring wraps (and splits a chunk) before most kills
}  # fmt: skip
WHOLE_RING = {"buffer_size": 1000}  # 300 frames in all: every checkpoint's rows survive
QUICK = {"number_epochs": 3}  # --quick: a run half as long (the test of the benches runs it)
KINDS = (
    "random", "checkpoint", "journal", "resume", "finished", "store", "ctrl-c", "sigterm", "s3-outage",
    "damaged-chunk", "damaged-checkpoint",
)  # fmt: skip
SIGKILLS = KINDS[:5]
QUICK_KINDS = ("ctrl-c", "damaged-chunk")
VERDICTS = (IDENTICAL, REFUSED, DIFFERENT)


class Bench:
    """The benchmark's shared parts: its folder, MLflow server, references and (lazily) S3 server."""

    def __init__(
        self, root: Path, driver: Driver, seed: int, stack: contextlib.ExitStack, cpanel: dict
    ) -> None:
        self.cpanel = cpanel
        self.root, self.driver, self.rng, self.stack = root, driver, random.Random(seed), stack
        self.logs = root / "logs"
        self.logs.mkdir()
        self.port = free_port()
        (root / "mlflow").mkdir()
        self.server = [start_mlflow_server(root / "mlflow", self.port)]
        stack.callback(lambda: stop_mlflow_server(self.server[0]))
        self.uri = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "MLFLOW_TRACKING_URI": self.uri, "PYTHONHASHSEED": "0", "PYTHONPATH": str(REPO)}
        env["MLFLOW_HTTP_REQUEST_MAX_RETRIES"], env["MLFLOW_HTTP_REQUEST_TIMEOUT"] = "0", "5"
        self.env = driver.env(env)
        self.client = MlflowClient(self.uri)
        self.references: dict[str, Final] = {}
        self.wall = 0.0
        self.s3: tuple[StoreOutage, str] | None = None
        self.optuna_expected: str | None = None

    def reference(self, cpanel: dict) -> Final:
        """The run never interrupted with ``cpanel`` on this path (trained once, on first use)."""
        key = json.dumps(cpanel, sort_keys=True)
        if key not in self.references:
            name = f"reference{len(self.references)}"
            started = time.monotonic()
            ended = run_to_end(
                self.driver.train(self.root / "references", name, cpanel), self.env, self.logs / f"{name}.log"
            )
            if ended.code != 0:
                raise RuntimeError(f"the reference run failed: {ended.stderr[-2000:]}")
            self.wall = self.wall or time.monotonic() - started
            session = self.root / "references" / name
            run_id = run_id_of((session / "session.json").read_text())
            self.references[key] = final_of(session, run_id, self.client)
        return self.references[key]

    def s3_session_path(self) -> tuple[StoreOutage, str]:
        """A moto server behind an endpoint that can go down, and a bucket's sessions URL."""
        if self.s3 is None:
            server = self.stack.enter_context(contextlib.contextmanager(moto_server)(self.logs / "moto.log"))
            os.environ.update(server.env)  # this process reads the sessions back straight from moto
            outage = StoreOutage(server)
            self.stack.callback(outage.close)
            self.s3 = outage, f"s3://{server.make_bucket()}/sessions"
        return self.s3

    def mlflow_outage(self) -> threading.Thread:
        """Kill the MLflow server at a random moment of the trial and restart it a few seconds later."""
        pause, down = self.rng.uniform(0.2, 0.6) * self.wall, self.rng.uniform(1.0, 4.0)

        def work() -> None:
            time.sleep(pause)
            stop_mlflow_server(self.server[0], kill=True)
            time.sleep(down)
            self.server[0] = start_mlflow_server(self.root / "mlflow", self.port)

        thread = threading.Thread(target=work, daemon=True)
        thread.start()
        return thread

    def trial(self, index: int, kind: str, second: bool) -> Outcome:
        """Run trial ``index`` of ``kind`` (``second``: of an odd round of the kinds, which varies its
        setting); a trial that breaks the benchmark itself is DIFFERENT."""
        name = f"t{index:03d}-{kind}"
        folder = self.root / name
        cpanel = {**self.cpanel, **WHOLE_RING} if kind == "damaged-checkpoint" and second else self.cpanel
        trial = kinds.Trial(
            folder / "sessions", name, self.driver, self.env, cpanel, self.wall, self.rng, self.logs
        )
        try:
            reference = self.reference(cpanel)
            trial.wall = self.wall
            if kind == "store" and second:
                if self.optuna_expected is None:
                    self.optuna_expected = run_optuna_script(
                        self.root / "optuna-fresh", self.env, self.logs / "optuna-fresh.log"
                    )[1]
                return optuna_store_trial(folder, trial, self.optuna_expected)
            client = lambda: self.client  # noqa: E731
            if kind == "store":
                trial.env = {k: v for k, v in self.env.items() if k != "MLFLOW_TRACKING_URI"}
                client = lambda: MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")  # noqa: E731
            elif kind == "s3-outage":
                outage, url = self.s3_session_path()
                trial.root, trial.cwd = url, folder
                trial.env = {**self.env, **outage.env, "PYTHONPATH": str(REPO)}
                folder.mkdir()
            down = self.mlflow_outage() if kind in SIGKILLS and second else None
            FAULTS[kind](trial)
            if down is not None:
                down.join()
                trial.note(Ended(0, ""), "MLflow server killed and restarted")
            return judge(trial, kind, reference, client)
        except Exception as error:  # the benchmark's own failure: report it, go on with the next trial
            return Outcome(
                kind, trial.where, DIFFERENT, f"{type(error).__name__}: {' '.join(str(error).split())[:400]}"
            )


FAULTS = {
    "random": kinds.kill_random,
    "checkpoint": kinds.kill_at_checkpoint,
    "journal": kinds.kill_after_journal,
    "resume": kinds.kill_resume_too,
    "finished": kinds.kill_finished,
    "store": kinds.kill_while_store_created,
    "ctrl-c": kinds.stop_with(signal.SIGINT),
    "sigterm": kinds.stop_with(signal.SIGTERM),
    "s3-outage": None,  # needs the bench's outage endpoint: set in main()
    "damaged-chunk": kinds.damaged(kinds.damage_chunk),
    "damaged-checkpoint": kinds.damaged(kinds.damage_checkpoint),
}


def main(
    n: int = 11,
    seed: int = 0,
    flow: bool = False,
    chosen: tuple[str, ...] = KINDS,
    keep: bool = False,
    cpanel: dict = CPANEL,
    out=sys.stdout,
) -> Counter:
    """Run ``n`` trials of the ``chosen`` kinds in turn; return the count of each (kind, verdict)."""
    counts: Counter = Counter()
    folder = tempfile.mkdtemp(prefix="bench-faults-")
    with contextlib.ExitStack() as stack:
        if not keep:
            stack.callback(shutil.rmtree, folder, True)
        bench = Bench(Path(folder), Driver(flow, Path(folder) / "prefect"), seed, stack, cpanel)
        FAULTS["s3-outage"] = lambda trial: kinds.s3_outage(bench.s3_session_path()[0])(trial)
        path = (
            "the Prefect path (digideep train, its temporary server)"
            if flow
            else "the plain loop (--no-prefect)"
        )
        out.write(f"{n} trials on {path}, kinds {', '.join(chosen)}; folder {folder}\n")
        bench.reference(bench.cpanel)
        out.write(f"reference run: {bench.wall:.1f} s\n")
        try:
            for index in range(n):
                kind, began = chosen[index % len(chosen)], time.monotonic()
                outcome = bench.trial(index, kind, second=index // len(chosen) % 2 == 1)
                counts[kind, outcome.verdict] += 1
                why = f": {outcome.why}" if outcome.why and outcome.verdict != IDENTICAL else ""
                seconds = time.monotonic() - began
                out.write(
                    f"t{index:03d} {kind:18s} {outcome.where}: {outcome.verdict}{why} ({seconds:.0f} s)\n"
                )
                out.flush()
        except KeyboardInterrupt:  # a Ctrl-C (or SIGTERM, below) ends the series: the trials done count
            stop_all()
            out.write(f"stopped after {sum(counts.values())} of {n} trials\n")
    summary(counts, chosen, sum(counts.values()), out)
    left = " (the Prefect path's temporary server, in a session of its own)" if flow else ""
    out.write(f"processes a SIGKILLed command left running: {kinds.ORPHANS[0]}{left}\n")
    out.write(f"{machine()}\n")
    return counts


def summary(counts: Counter, chosen: tuple[str, ...], n: int, out) -> None:
    """Counts per kind and verdict, then the goal line."""
    out.write(f"{'kind':18s} {'identical':>9s} {'refused':>8s} {'DIFFERENT':>9s}\n")
    for kind in chosen:
        row = [counts[kind, verdict] for verdict in VERDICTS]
        if sum(row):
            out.write(f"{kind:18s} {row[0]:9d} {row[1]:8d} {row[2]:9d}\n")
    different = sum(counts[kind, DIFFERENT] for kind in chosen)
    identical, refused = (sum(counts[kind, v] for kind in chosen) for v in (IDENTICAL, REFUSED))
    met = "met" if different == 0 else f"NOT met ({different} DIFFERENT)"
    out.write(
        f"goal, every trial identical or refused in one line with nothing lost: {met}; "
        f"{identical} identical, {refused} refused in one line, {different} DIFFERENT of {n}\n"
    )


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _interrupt)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--n", type=int, default=len(KINDS), help="trials (default: %(default)s, each kind once)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the fault schedule")
    parser.add_argument("--flow", action="store_true", help="the Prefect path: digideep train/resume")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated kinds (default: all)")
    parser.add_argument("--keep", action="store_true", help="keep the folder (sessions, logs) to inspect")
    parser.add_argument("--quick", action="store_true", help=f"2 trials: {' and '.join(QUICK_KINDS)}")
    args = parser.parse_args()
    chosen = QUICK_KINDS if args.quick else tuple(args.kinds.split(","))
    unknown = [kind for kind in chosen if kind not in KINDS]
    if unknown:
        parser.error(f"unknown kind(s) {', '.join(unknown)}; choose from {', '.join(KINDS)}")
    cpanel = {**CPANEL, **QUICK} if args.quick else CPANEL
    counts = main(2 if args.quick else args.n, args.seed, args.flow, chosen, args.keep, cpanel)
    sys.exit(0 if not any(verdict == DIFFERENT for _, verdict in counts) else 1)
