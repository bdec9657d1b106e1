"""What running each stage as a Prefect task costs, against the plain ``Runner.train()`` loop.

    .venv/bin/python bench/bench_orchestration.py            # default: ~7.5 minutes
    .venv/bin/python bench/bench_orchestration.py --quick    # ~1.5 minutes
    .venv/bin/python bench/bench_orchestration.py --only ppo --pairs 3
    .venv/bin/python bench/bench_orchestration.py --only ppo --server postgres [--tuned batching|all]

Drivers, same params, seed and session layout, all with MLflow tracking on (a fresh
``sqlite:///<tmp>/mlflow.db``), all in this process, alternated (plain, stage, iteration, auto, plain, ...):

* **plain**: ``open_run(...)`` + ``run_training(handle)`` (``Runner.train()`` calling each stage);
* **stage**, **iteration**, **auto** (the last two PPO only): ``flows.train.train(params=...,
  cpanel=..., session_name=..., session_path=tmp, tasks=...)``: a task run per stage (4 per
  iteration plus the epoch-end stages), one per iteration, or the flow's choice from the first
  iterations' timing (``TaskGranularity``).

Servers (``--server``): **sqlite**, Prefect's ephemeral server (a subprocess on SQLite with its own
``PREFECT_HOME`` under the temporary folder, analytics off); **postgres**, PostgreSQL and the Prefect
server on it with basic auth, started by the stack's own code (``digideep_stack.stack.Stack``, as
``make stack-up`` does) on free ports. ``--tuned batching|all`` gives the server the settings in ``TUNED``
(task-run recorder and event persister batching; ``all`` also turns automations and event streaming off).

Params: the shipped ``params/mujoco_sac.py`` and ``params/mujoco_ppo.py`` on HalfCheetah-v5 with
cpanel overrides that only shorten the run (``number_epochs`` 1, a small ``epoch_size``) and, for SAC,
``learning_starts`` 1000 (one iteration of random actions, then every iteration does the shipped
1000 gradient steps). Runs last ~40-60 s here (longer ones would not fit the 10-minute budget). A
warm-up run of plain and flow (PPO, 1 short iteration) first imports everything and starts the server.

What is timed: ``Runner.train`` only, in every driver (wrapped at the class here), so process
start-up, the server's start-up, ``open_run`` and ``close_run`` are excluded. Inside it each stage
call is timed around the driver's ``call(stage, ...)`` (outer: for the flow the whole task run with
its state transitions and events) and around the Runner method itself (inner). **In-thread task
overhead** = (sum outer - sum inner) / task runs. **Per-iteration time** = time between the ends of
consecutive ``update`` stages, the first iteration left out (the epoch-end stages come only at the
end of these one-epoch runs: they are in the loop time). CPU: this process's main thread and its
other threads (Prefect's event and log workers, MLflow's sender, the stats sampler), and the
server's processes (PostgreSQL's included, with the children they reaped) beyond their idle rate
(measured during the plain runs, when they idle).
The task runs the server recorded (``/task_runs/count``, completed) are checked against those made.
Last, Prefect's fixed cost: 100/500 back-to-back runs of a task that does nothing.

Measured on the shared 2-core development machine. Earlier (SQLite ephemeral server, load from
other jobs), default run and ``--quick`` against plain:

    SAC   8.3 s/iteration  a task per stage: wall +2.8 % / +3.4 %, CPU +2.6 / +0.9 %
    PPO  0.66 s/iteration  a task per stage: wall +12.7 % / +17.2 %, CPU +14.9 / +22 %
                        a task per iteration: wall +4.1 % / +6.0 %, CPU +5.1 / +8.2 %

Now, PPO only (``--only ppo --epoch-size 8 --pairs 2 --noop 100``, load average 4 to 11 on the 2
cores, so whole-run wall and CPU ratios moved by 10-50 % between repeats of one driver): per task
run, in the flow's thread + server CPU, and the cost of an iteration (1.8-1.9 s of CPU) with the
server counted, a task per stage / a task per iteration:

    SQLite ephemeral server        6-9 ms + 32-37 ms (no-op: 28.5 ms)   9.9 % / 2.7 %
    PostgreSQL (stack), defaults   9-13 ms + 40-50 ms (no-op: 41.3 ms)  13.5 % / 3.9 %
    PostgreSQL, --tuned all        7-8 ms + 10-16 ms (no-op: 6.6 ms)    5.7 % / 1.0 %
    PostgreSQL, --tuned batching   4-6 ms + 10-13 ms (no-op: 6.4 ms)    4.8 % / 1.4 %

No server setting brings PPO's task per stage under 3 %; a task per iteration meets it on the tuned
PostgreSQL server, and ``tasks="auto"`` (the flow's default) chooses it for PPO from the measured
iteration time while SAC's 8 s iterations keep a task per stage.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from common import machine as cpu_line

from digideep.pipeline.params import load_params_module
from digideep_stack.stack import SERVER_BATCHING

STAGES = ("explore", "store", "sample", "update", "test", "log", "checkpoint")
ITERATION = ("explore", "store", "sample", "update")
RUNS = {  # params module -> cpanel overrides (default, quick) and the drivers compared
    "params.mujoco_sac": (  # one frame per iteration, as shipped: a task per stage would cost 4x the work
        {"number_epochs": 1, "epoch_size": 4000, "learning_starts": 1000},
        {"number_epochs": 1, "epoch_size": 2000, "learning_starts": 1000},
        ("plain", "auto"),
    ),
    "params.mujoco_ppo": (
        {"number_epochs": 1, "epoch_size": 50},
        {"number_epochs": 1, "epoch_size": 5},
        ("plain", "stage", "iteration", "auto"),
    ),
}
WARM_UP = ("params.mujoco_ppo", {"number_epochs": 1, "epoch_size": 1, "n_steps": 64})


@dataclass
class Record:
    """What one ``Runner.train`` call did, timed."""

    start: float = 0.0
    end: float = 0.0
    outer: list[tuple[str, float]] = field(default_factory=list)  # (stage, seconds of the driver's call)
    inner: list[tuple[str, float]] = field(default_factory=list)  # (stage, seconds of the Runner method)
    update_ends: list[tuple[float, int]] = field(default_factory=list)  # (time, iterations done)
    cpu_main: float = 0.0  # CPU seconds of this process's main thread (the training loop)
    cpu_other: float = 0.0  # of its other threads
    cpu_server: float = 0.0  # of child processes (the ephemeral Prefect server)
    iterations: int = 0
    task_runs: int = 0  # set by the driver
    calls_with_work: int = 0  # driver calls that ran a stage body (a task run, for the flows)

    @property
    def loop(self) -> float:
        return self.end - self.start

    def iteration_times(self) -> list[float]:
        """Seconds per iteration between consecutive ends of ``update`` or ``iterate`` stages, the first
        third of the run left out (start-up, and an off-policy run's warm-up of random actions)."""
        start = self.update_ends[-1][1] // 3
        ends = [(t, i) for t, i in self.update_ends if i > start]
        return [(b - a) / (j - i) for (a, i), (b, j) in itertools.pairwise(ends) for _ in range(j - i)]

    def in_thread_overhead(self) -> float:
        """Seconds the driver spent around the stages, in the loop's thread."""
        return sum(s for _, s in self.outer) - sum(s for _, s in self.inner)

    def stage_seconds(self) -> float:
        """Seconds inside the iteration stages per iteration."""
        return sum(s for stage, s in self.inner if stage in ITERATION) / self.iterations


RECORDS: list[Record] = []


def _cpu_children() -> float:
    """CPU seconds of the servers this process started: live descendants and those they reaped."""
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            times = child.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
    return total


def _cpu_threads() -> tuple[float, float]:
    """CPU seconds of (the main thread, the other threads) of this process."""
    main_id = threading.main_thread().native_id
    main = other = 0.0
    for thread in psutil.Process().threads():
        if thread.id == main_id:
            main += thread.user_time + thread.system_time
        else:
            other += thread.user_time + thread.system_time
    return main, other


def instrument_runner() -> None:
    """Wrap ``Runner.train`` (every driver calls it) to time the loop, each call and each stage."""
    from digideep.pipeline.runner import Runner, call_directly

    original = Runner.train

    def train(
        self: Runner,
        call: Callable[[str, Callable[[], Any]], Any] = call_directly,
        group: Callable[[], int] | None = None,
    ) -> str:
        record = Record()
        RECORDS.append(record)

        def timed_stage(stage: str, function: Callable[[], Any]) -> Callable[[], Any]:
            def run() -> Any:
                start = time.perf_counter()
                try:
                    return function()
                finally:
                    record.inner.append((stage, time.perf_counter() - start))

            return run

        for stage in STAGES:  # the schedule and the flows' tasks look the stages up on the instance
            setattr(self, stage, timed_stage(stage, getattr(self, stage)))

        def timed_call(stage: str, function: Callable[[], Any]) -> Any:
            start, bodies = time.perf_counter(), len(record.inner)
            try:
                return call(stage, function)
            finally:
                now = time.perf_counter()
                record.outer.append((stage, now - start))
                record.calls_with_work += len(record.inner) > bodies or stage not in ITERATION
                if stage in ("update", "iterate"):
                    record.update_ends.append((now, self.counters.iteration))

        (main, other), server = _cpu_threads(), _cpu_children()
        record.start = time.perf_counter()
        try:
            return original(self, timed_call, group)
        finally:
            record.end = time.perf_counter()
            main_end, other_end = _cpu_threads()
            record.cpu_main, record.cpu_other = main_end - main, other_end - other
            record.cpu_server = _cpu_children() - server
            record.iterations = self.counters.iteration
            for stage in STAGES:
                delattr(self, stage)

    Runner.train = train


# -- the drivers ------------------------------------------------------------------------------------
def run_plain(params: str, cpanel: dict[str, Any], root: Path, name: str) -> Record:
    from digideep.pipeline.training import open_run, run_training

    run_training(open_run(params, dict(cpanel), session_name=name, session_path=root))
    return RECORDS[-1]


def run_flow(driver: str, params: str, cpanel: dict[str, Any], root: Path, name: str) -> Record:
    """``flows.train.train`` with ``tasks=driver`` (stage, iteration or auto)."""
    from flows.train import train

    state = train(
        params=params,
        cpanel=dict(cpanel),
        session_name=name,
        session_path=str(root),
        tasks=driver,
        return_state=True,
    )
    if not state.is_completed():
        raise RuntimeError(f"the {driver} flow ended {state.type}: {state.message}")
    record = RECORDS[-1]
    deadline = time.perf_counter() + 20  # the server records events in batches, flushed every 5 s
    while True:
        time.sleep(1.0)
        record.task_runs = recorded_task_runs(state.state_details.flow_run_id)
        if record.task_runs >= record.calls_with_work or time.perf_counter() > deadline:
            return record


def recorded_task_runs(flow_run_id: Any) -> int:
    """Completed task runs of a flow run that the server recorded."""
    from prefect.client.orchestration import get_client

    body = {
        "flow_runs": {"id": {"any_": [str(flow_run_id)]}},
        "task_runs": {"state": {"type": {"any_": ["COMPLETED"]}}},
    }
    with get_client(sync_client=True) as client:
        return int(client._client.post("/task_runs/count", json=body).json())


def run_driver(driver: str, params: str, cpanel: dict[str, Any], root: Path, name: str) -> Record:
    if driver == "plain":
        return run_plain(params, cpanel, root, name)
    record = run_flow(driver, params, cpanel, root, name)
    expected = record.calls_with_work
    if record.task_runs != expected:
        print(f"  WARNING: the server recorded {record.task_runs} completed task runs of {expected} made")
    return record


def noop_task_runs(count: int, idle_rate: float) -> dict[str, float]:
    """``count`` back-to-back runs of a task that does nothing, declared like ``run_stage``; then wait
    until the server has recorded them (from events, asynchronously) and take its CPU over that span."""
    from prefect import flow, task
    from prefect.cache_policies import NO_CACHE

    @task(name="noop", cache_policy=NO_CACHE, persist_result=False, task_run_name="{label}")
    def noop(key: str, stage: str, label: str) -> int:
        return 0

    @flow(name="noop-tasks", persist_result=False)
    def many(count: int) -> float:
        start = time.perf_counter()
        for index in range(count):
            noop("key", "noop", f"noop[{index}]")
        return time.perf_counter() - start

    server, start = _cpu_children(), time.perf_counter()
    state = many(count, return_state=True)
    seconds = state.result()
    flow_end = time.perf_counter()
    done = 0
    while done < count and time.perf_counter() - flow_end < 90:
        done = recorded_task_runs(state.state_details.flow_run_id)
        time.sleep(0.5)
    drained = time.perf_counter() - start
    server = _cpu_children() - server - idle_rate * drained
    lag = time.perf_counter() - flow_end
    return {"wall": seconds / count, "server": server / count, "lag": lag, "done": done, "drained": drained}


BATCHING = SERVER_BATCHING  # what make stack-up gives its Prefect server
TUNED = {  # server settings tried against the defaults (see docs/tracking-prefect.md)
    "batching": BATCHING,
    # and no automations (the stack's crash detection is its watcher, not one) or event streaming
    "all": BATCHING
    | {
        "PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED": "false",
        "PREFECT_SERVER_EVENTS_STREAM_OUT_ENABLED": "false",
    },
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_postgres_server(root: Path) -> Any:
    """PostgreSQL and the Prefect server on it with basic auth, as ``make stack-up`` starts them
    (:class:`digideep_stack.stack.Stack`), on free ports under ``root``; this process becomes its client."""
    from digideep_stack.stack import Stack, StackConfig

    root.chmod(0o755)  # PostgreSQL runs as the postgres user, who must reach its cluster folder
    config = StackConfig(
        data=root / "stack",
        env_file=root / ".env",
        postgres_port=free_port(),
        prefect_port=free_port(),
        workers=0,
        deploy=False,
        server_settings={},  # Prefect's defaults unless --tuned puts settings in the environment
    )
    stack = Stack(config, announce=lambda line: print(f"  {line}"))
    try:
        stack.start_postgres()
        stack.start_prefect()
    except BaseException:
        stack.stop()
        raise
    os.environ["PREFECT_API_URL"] = stack.prefect_api
    os.environ["PREFECT_API_AUTH_STRING"] = stack.secrets["PREFECT_API_AUTH_STRING"]
    return stack


def machine() -> str:
    """torch's version, its CPU capability and the relevant flags, cores and load."""
    import torch

    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    wanted = ("avx", "avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")
    return f"torch {torch.__version__}, {cpu_line(wanted)}, load average {load}"


def stop_ephemeral_server() -> None:
    from prefect.server.api.server import SubprocessASGIServer

    for server in list(SubprocessASGIServer._instances.values()):
        with contextlib.suppress(Exception):
            server.stop()


# -- report -----------------------------------------------------------------------------------------
def pct(value: float, base: float) -> str:
    return f"{100 * (value - base) / base:+.1f} %"


def med(values: Any) -> float:
    return statistics.median(list(values))


def report(params: str, cpanel: dict[str, Any], runs: dict[str, list[Record]], idle_rate: float) -> dict:
    """Print the comparison of one algorithm against its plain runs; return the headline figures."""
    plain = runs["plain"]
    print(f"\n{params} {cpanel}: {len(plain)} runs per driver, {plain[0].iterations} iterations each")
    base_iteration = med(t for r in plain for t in r.iteration_times())
    base_cpu = med((r.cpu_main + r.cpu_other) / r.iterations for r in plain)
    base_stages = med(r.stage_seconds() for r in plain)
    headline = {}
    for driver, records in runs.items():
        iteration = med(t for r in records for t in r.iteration_times())
        main, other = (
            med(r.cpu_main / r.iterations for r in records),
            med(r.cpu_other / r.iterations for r in records),
        )
        print(
            f"  {driver:<10} per iteration {iteration:.3f} s ({pct(iteration, base_iteration)}); loop "
            f"{med(r.loop for r in records):.2f} s (each: {', '.join(f'{r.loop:.2f}' for r in records)}); "
            f"stage bodies {med(r.stage_seconds() for r in records):.3f} s/iteration "
            f"({pct(med(r.stage_seconds() for r in records), base_stages)})"
        )
        if driver == "plain":
            print(f"             CPU/iteration: main thread {main:.3f} s, other threads {other:.3f} s")
            continue
        tasks = med(r.task_runs / r.iterations for r in records)
        per_task = med(r.in_thread_overhead() / r.task_runs for r in records)
        server = med(max(r.cpu_server - idle_rate * r.loop, 0.0) / r.task_runs for r in records)
        extra_cpu = main + other - base_cpu + tasks * server
        rate = sum(r.task_runs for r in records) / sum(r.loop for r in records) * 60
        print(
            f"             CPU/iteration: main thread {main:.3f} s, other threads {other:.3f} s; server "
            f"{1e3 * server:.1f} ms per task run; together {100 * extra_cpu / base_cpu:+.1f} % of plain's CPU"
        )
        print(
            f"             {tasks:.2f} task runs/iteration ({rate:.0f}/minute) x {1e3 * per_task:.1f} ms in the "
            f"loop's thread = {100 * tasks * per_task / base_iteration:.2f} % of a plain iteration"
        )
        if driver == "stage":
            by_stage: dict[str, list[float]] = {}
            for r in records:
                for (stage, outer), (_, inner) in zip(r.outer, r.inner, strict=True):
                    by_stage.setdefault(stage, []).append(outer - inner)
            print(
                "             in-thread by stage: "
                + ", ".join(f"{s} {1e3 * med(v):.1f} ms" for s, v in by_stage.items())
            )
        headline[driver] = {
            "wall": (iteration - base_iteration) / base_iteration,
            "in_thread": tasks * per_task / base_iteration,
            "cpu": extra_cpu / base_cpu,
            "tasks": tasks,
            "iteration": iteration,
        }
    shipped = load_params_module(params).cpanel
    epoch = shipped["epoch_size"]
    default_tasks = 4 + (1 + 1 / shipped["test_interval"] + 1 / shipped["save_interval"]) / epoch
    if "stage" not in headline:
        return headline
    headline["stage"]["rate"] = default_tasks * 60 / headline["stage"]["iteration"]
    print(
        f"  a default run ({shipped['number_epochs']} epochs x {epoch} iterations) with a task per stage: "
        f"{default_tasks:.2f} task runs per iteration, ~{headline['stage']['rate']:.0f} per minute at this speed"
    )
    return headline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round of short runs (~2 minutes)")
    parser.add_argument("--pairs", type=int, default=None, help="rounds of drivers (default 2, quick 1)")
    parser.add_argument("--only", choices=("sac", "ppo"), help="one algorithm only")
    parser.add_argument(
        "--server",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="sqlite: Prefect's ephemeral server on SQLite; postgres: PostgreSQL and a Prefect server "
        "with basic auth, as make stack-up runs them",
    )
    parser.add_argument("--tuned", choices=tuple(TUNED), help="server settings from TUNED")
    parser.add_argument("--epoch-size", type=int, help="iterations per run (overrides the cpanel's)")
    parser.add_argument("--noop", type=int, help="no-op task runs at the end (default 500, quick 100)")
    args = parser.parse_args()
    print(machine())
    rounds = args.pairs or (1 if args.quick else 2)
    started = time.perf_counter()
    repository = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="bench_orchestration_") as tmp:
        root = Path(tmp)
        os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
        os.environ["PREFECT_HOME"] = str(root / "prefect")  # a fresh database, shared with no other job
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{root / 'mlflow.db'}"
        os.environ.pop("PREFECT_API_URL", None)  # the ephemeral server, unless --server postgres
        os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")  # loaded cores
        if args.tuned:
            os.environ.update(TUNED[args.tuned])
        stack = start_postgres_server(root) if args.server == "postgres" else None
        print(
            f"server: {args.server}{' with ' + ' '.join(f'{k}={v}' for k, v in TUNED[args.tuned].items()) if args.tuned else ', default settings'}"
        )
        logging.basicConfig(level=logging.WARNING)
        for handler in logging.getLogger().handlers:  # the flow sets digideep's loggers to INFO
            handler.setLevel(logging.WARNING)
        sys.path.insert(0, str(repository))
        os.chdir(repository)  # parameter files are found from the cwd
        instrument_runner()
        sessions = root / "sessions"
        warm = time.perf_counter()
        run_plain(*WARM_UP, sessions, "warm-plain")
        run_flow("stage", *WARM_UP, sessions, "warm-flow")
        print(f"warm-up (imports, server start, first runs): {time.perf_counter() - warm:.1f} s")
        measured: dict[str, tuple[dict[str, Any], dict[str, list[Record]]]] = {}
        for params, (default, quick, drivers) in RUNS.items():
            short = params.rsplit("_", 1)[-1]
            if args.only and args.only != short:
                continue
            cpanel = dict(quick if args.quick else default)
            if args.epoch_size:
                cpanel["epoch_size"] = args.epoch_size
            runs: dict[str, list[Record]] = {driver: [] for driver in drivers}
            for round_ in range(rounds):
                for driver in drivers:
                    name = f"{short}-{driver}-{round_}"
                    runs[driver].append(run_driver(driver, params, cpanel, sessions, name))
            measured[params] = (cpanel, runs)
        all_plain = [r for _, runs in measured.values() for r in runs["plain"]]
        idle_rate = sum(r.cpu_server for r in all_plain) / sum(r.loop for r in all_plain)
        print(f"the server idles at {100 * idle_rate:.1f} % of a core (during the plain runs)")
        results = {
            params: report(params, cpanel, runs, idle_rate) for params, (cpanel, runs) in measured.items()
        }
        count = args.noop or (100 if args.quick else 500)
        noop = noop_task_runs(count, idle_rate)
        print(
            f"\nno-op task runs, {count} back to back: {1e3 * noop['wall']:.1f} ms each in the flow's thread "
            f"({60 / noop['wall']:,.0f} per minute); the server had recorded {noop['done']:.0f}/{count} "
            f"{noop['lag']:.1f} s after the flow ended ({noop['done'] / noop['drained'] * 60:,.0f} per "
            f"minute), {1e3 * noop['server']:.1f} ms of server CPU per task run"
        )
        stop_ephemeral_server()  # before its database folder goes
        if stack is not None:
            stack.stop()
    print("\nsummary against plain (goal <= +3 %):")
    for params, headline in results.items():
        for driver, figures in headline.items():
            print(
                f"  {params:<18} {driver:<10} wall per iteration {100 * figures['wall']:+5.1f} %, in-thread "
                f"{100 * figures['in_thread']:4.2f} %, CPU {100 * figures['cpu']:+5.1f} %, "
                f"{figures['tasks']:.2f} task runs/iteration"
                + (f", default run ~{figures['rate']:.0f} task runs/minute" if "rate" in figures else "")
            )
    print(f"\n{machine()}")
    print(f"total bench time {time.perf_counter() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
