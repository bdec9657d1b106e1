"""What a checkpoint and a resume cost a SAC HalfCheetah run with 100,000 transitions in memory.

    .venv/bin/python bench/bench_checkpoint.py            # local disk and S3 (moto on 127.0.0.1)
    .venv/bin/python bench/bench_checkpoint.py --quick    # ~2 minutes on a busy 2-core machine
    .venv/bin/python bench/bench_checkpoint.py --no-s3    # local disk only

Setup: ``params/mujoco_sac.py`` (HalfCheetah-v5, shipped replay capacity 1,000,001 rows) with the
cpanel overrides ``n_steps`` 1000 (so ``updates_per_iteration`` 1000: an iteration is the work of
1,000 of the shipped one-frame iterations) and ``learning_starts`` 1000, so the explorer's random
warm start ends after the first chunk. The memory is filled to
100,000 transitions by one really explored chunk plus 99 **synthetic** chunks in the exact
trajectory format (keys, shapes and dtypes copied from the real chunk; noise added to its floats).
Then, in the same process:

* **iteration**: one training iteration with the shipped params (explore 1000 steps + store +
  sample + 1000 SAC gradient steps), the baseline every other figure is divided by;
* **checkpoint (a)**: the first ``Runner.checkpoint()`` after the 100,000 rows were stored (all
  dirty), in a fresh session each round;
* **checkpoint (b)**: the steady state, a ``Runner.checkpoint()`` right after each timed iteration
  (only that iteration's 1,001 rows dirty; retention deletes the oldest checkpoint once 3 exist);
* **resume**: ``Session(resume=True)`` + ``resuming.from_checkpoint`` of the newest checkpoint, memory
  load included (the Zarr files are in the page cache: they were just written).

Checkpoints are split into ``flush`` (Memory.flush of the dirty rows), ``collect`` (the runner's
``state_dict()`` and ``runner_info()``), ``write`` (``save_checkpoint``: runner.json + states.pt,
fsynced, atomic rename) and ``retention``; resumes into ``read`` (``load_checkpoint``), ``build``
(envs, networks), ``memory`` (``Memory.prepare_restore``: Zarr -> RAM ring) and the rest (loading agent,
explorer and RNG states). The parts are timed by wrapping those functions in this process only.
Figures are medians over the rounds (best in brackets): the 2-core machine is shared with other
jobs, so single timings vary by 2x. The goal: a save must not stall training for longer than one
iteration (checkpoint / iteration < 1).

Measured on the shared 2-core development machine (other jobs kept both cores busy; medians),
``--quick`` (38 s) / default (89 s); the ratio is against the iteration of the same run:

    iteration (baseline)        11.6 s / 11.0 s     update 98 %: ~11 ms per SAC gradient step here
    checkpoint (a) 100k dirty   0.089 / 0.076 s     0.008 / 0.007 x iteration
        flush 0.055 / 0.047 s, write 0.031 / 0.022 s, collect 0.003 s (one earlier quick run: 0.42 s)
    checkpoint (b) 1k dirty     0.060 / 0.066 s     0.005 / 0.006 x iteration
        flush 0.028 / 0.029 s (1,001 rows touch whole ~1 MiB Zarr chunks),
        write 0.025 / 0.031 s, retention 0.008 s
    resume (100k rows)          0.30 / 0.06 s       0.026 / 0.005 x iteration (single resumes 0.05-0.47 s:
        the memory load, 0.03-0.45 s, allocates the 1,000,001-row ring and reads 100k rows)
    states.pt 3.3 MB, runner.json 2.2 kB, memory folder 27-29 MB (20.8 MB of rows)

Goal met by two orders of magnitude: a checkpoint costs < 1 % of an iteration, a resume < 3 %.

**S3 against local disk.** Each measurement above runs twice in one process: sessions in a local
folder, then under ``s3://<bucket>/sessions`` on a moto server on 127.0.0.1 (``tests/s3.py``). The
iteration baseline is the median over both. A checkpoint now writes its files in place and commits
with ``commit.json`` (``write`` includes it); ``upload`` is the URL session's journal and log. Until
the Zarr memory is given the session's URL (the memsplit work), an S3 session's memory is flushed to
its local working folder, so ``flush`` and the resume's ``memory`` are local-disk figures on both.
``--quick``, same shared 2-core machine (AVX512), iteration 24.9 s (busy cores: 18.8-29.6 s):

    local disk   checkpoint (a) 0.147 s   0.6 %   flush 0.093, write 0.034
                 checkpoint (b) 0.216 s   0.9 %   flush 0.113, write 0.065
                 resume         0.831 s   3.3 %   memory 0.686
    S3 (moto)    checkpoint (a) 0.457 s   1.8 %   flush 0.138, write 0.227, upload 0.030
                 checkpoint (b) 0.449 s   1.8 %   flush 0.116, write 0.217, upload 0.032
                 resume         0.995 s   4.0 %   read 0.175 (3.3 MB states.pt), session open ~0.6
    S3 / local: checkpoint 3.1 x (a), 2.1 x (b); resume 1.2 x

The issue's goal, a checkpoint to S3 <= 5 % of an iteration, is met (1.8 %) for the checkpoint
files; it has to be measured again once the memory flushes to S3. Resume of 1M transitions from S3
(goal <= 10 s) is not measured here: 100k rows, and the memory is local.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a script: the repository (digideep, tests.s3) is importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import machine

from digideep.memory import Memory
from digideep.pipeline import checkpointing, components, resuming
from digideep.pipeline import runner as runner_module
from digideep.pipeline.devices import set_torch_threads
from digideep.pipeline.params import resolve_params, write_params
from digideep.pipeline.runner import Runner
from digideep.storage.checkpoint import latest_checkpoint
from digideep.storage.session import Session

PARAMS = "params.mujoco_sac"
# chunks of 1,000 frames (the shipped files act one frame per iteration): an iteration here is the
# work of 1,000 of those, and the warm start (random actions) ends after the first chunk
CPANEL = {"learning_starts": 1000, "n_steps": 1000, "epoch_size": 10}
TARGET_ROWS = 100_000


# -- timing helpers ---------------------------------------------------------------------------------
class Parts:
    """Seconds spent in named parts during one measured operation."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def wrap(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

        return timed


@contextlib.contextmanager
def patched(target: Any, name: str, parts: Parts, label: str) -> Iterator[None]:
    """Replace ``target.name`` (a module function, a class's method or an instance's) by a timed wrapper."""
    original = getattr(target, name)
    setattr(target, name, parts.wrap(label, original))
    try:
        yield
    finally:
        if isinstance(target, types.ModuleType | type):  # a module or a class: put the original back
            setattr(target, name, original)
        else:  # an instance: drop the attribute so the class method shows through again
            delattr(target, name)


def timed_checkpoint(runner: Runner) -> tuple[float, dict[str, float]]:
    """``runner.checkpoint()`` with its parts timed; returns (total seconds, parts)."""
    parts = Parts()
    with contextlib.ExitStack() as stack:
        for memory in runner.memories.values():
            stack.enter_context(patched(memory, "flush", parts, "flush"))
        stack.enter_context(patched(runner.state, "state_dict", parts, "collect"))
        stack.enter_context(patched(runner, "runner_info", parts, "collect"))
        stack.enter_context(patched(checkpointing, "write_checkpoint", parts, "write"))
        stack.enter_context(patched(runner.session.uploads, "upload", parts, "upload"))
        stack.enter_context(patched(checkpointing, "apply_retention", parts, "retention"))
        start = time.perf_counter()
        runner.checkpoint()
        total = time.perf_counter() - start
    return total, parts.seconds


def timed_resume(root: Path | str, name: str) -> tuple[float, dict[str, float], Runner, Session]:
    """Reopen session ``name`` and rebuild its Runner from the newest checkpoint, timed."""
    parts = Parts()
    with contextlib.ExitStack() as stack:
        stack.enter_context(patched(resuming, "load_checkpoint", parts, "read"))
        stack.enter_context(patched(components, "build", parts, "build"))
        stack.enter_context(patched(Memory, "prepare_restore", parts, "memory"))
        start = time.perf_counter()
        session = Session(root=root, name=name, resume=True)
        newest = resuming.resume_checkpoint(session)
        runner = resuming.from_checkpoint(session, newest.path)
        total = time.perf_counter() - start
    return total, parts.seconds, runner, session


def timed_iteration(runner: Runner) -> tuple[float, dict[str, float]]:
    """One training iteration (the Runner's four stages), each stage timed."""
    stages: dict[str, float] = {}
    start = time.perf_counter()
    for stage in runner_module.ITERATION_STAGES:
        begin = time.perf_counter()
        getattr(runner, stage)()
        stages[stage] = time.perf_counter() - begin
    return time.perf_counter() - start, stages


# -- the run ----------------------------------------------------------------------------------------
def new_runner(root: Path | str, name: str) -> tuple[Runner, Session]:
    resolved = resolve_params(PARAMS, None, dict(CPANEL))
    params = resolved.params
    params["tracking"] = {"enabled": False}
    session = Session(root=root, name=name, params_name=resolved.module)
    set_torch_threads(params["session"]["torch_threads"])
    write_params(session, resolved.module, resolved.cpanel, params)
    return Runner(session, params), session


def synthetic_chunk(template: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A chunk in ``template``'s exact format: same keys, shapes and dtypes; floats perturbed."""
    chunk = {}
    for key, value in template.items():
        if np.issubdtype(value.dtype, np.floating) and not key.endswith(
            ("masks", "terminals", "truncations")
        ):
            noise = rng.standard_normal(value.shape).astype(value.dtype)
            chunk[key] = value + np.where(np.isnan(value), 0, noise).astype(value.dtype)
        else:
            chunk[key] = value.copy()
    return chunk


def fill_memory(runner: Runner, rng: np.random.Generator) -> dict[str, tuple]:
    """Explore one real chunk, store it, then store synthetic chunks until TARGET_ROWS are held."""
    runner.explore()
    template = {key: value.copy() for key, value in runner._chunk.items()}
    runner.store()
    memory = runner.memories["train"]
    while memory.size < TARGET_ROWS:
        memory.store(synthetic_chunk(template, rng))
        runner.counters.frames += runner.built.frames_per_chunk
    # one gradient step on one minibatch: creates the optimizers' state as in a real run (states.pt size)
    agent = runner.agents["agent"]
    batches = agent.sample(memory)
    agent.update({key: value[:1] for key, value in batches.items()})
    return {key: (value.shape, str(value.dtype)) for key, value in template.items()}


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# -- report -----------------------------------------------------------------------------------------
def summary(values: list[float]) -> tuple[float, float]:
    return statistics.median(values), min(values)


def line(name: str, values: list[float], baseline: float | None, detail: str = "") -> None:
    median, best = summary(values)
    text = f"  {name:<34} {median:8.3f} s (best {best:.3f}, n={len(values)})"
    if len(values) <= 5:
        text += " (each: " + ", ".join(f"{v:.3f}" for v in values) + ")"
    if baseline is not None:
        text += f"   {median / baseline:6.3f} x iteration"
    print(text + (f"   [{detail}]" if detail else ""), flush=True)


def parts_detail(parts: list[dict[str, float]], names: tuple[str, ...]) -> str:
    shown = []
    for name in names:
        values = [p.get(name, 0.0) for p in parts]
        shown.append(f"{name} {statistics.median(values):.3f}")
    return ", ".join(shown)


def measure(root: Path | str, rounds_a: int, iterations: int, resumes: int, rng: np.random.Generator) -> dict:
    """Checkpoints (a) and (b), iterations and resumes of sessions under ``root`` (a folder or a URL)."""
    found: dict[str, Any] = {"a": [], "b": [], "iteration": [], "resume": []}
    for round_ in range(rounds_a):
        runner, session = new_runner(root, f"round-{round_}")
        try:
            fill_start = time.perf_counter()
            layout = fill_memory(runner, rng)
            fill_seconds = time.perf_counter() - fill_start
            memory = runner.memories["train"]
            if round_ == 0:
                found["header"] = (
                    f"{PARAMS} cpanel {CPANEL}: capacity {memory.capacity:,} rows, "
                    f"n_steps {runner.explorers['train'].n_steps}, "
                    f"updates_per_iteration {runner.agents['agent'].updates_per_iteration}\n"
                    f"memory filled to {memory.size:,} transitions in {fill_seconds:.1f} s: 1 explored "
                    f"chunk + {memory.size // 1000 - 1} SYNTHETIC chunks in the explored chunk's format:\n"
                    + "\n".join(f"    {key:<32} {shape} {dtype}" for key, (shape, dtype) in layout.items())
                )
            found["a"].append(timed_checkpoint(runner))
            if round_ == 0:
                for _ in range(iterations):
                    found["iteration"].append(timed_iteration(runner))
                    found["b"].append(timed_checkpoint(runner))
                newest = latest_checkpoint(session.checkpoints_location)
                found["sizes"] = {
                    "states.pt": (newest.location / "states.pt").size(),
                    "runner.json": (newest.location / "runner.json").size(),
                    "memory folder": folder_bytes(session.path / "memory"),
                }
                rows_held = memory.size
        finally:
            runner.close()
            session.close()
        if round_ == 0:
            for _ in range(resumes):
                total, parts, resumed, resumed_session = timed_resume(root, "round-0")
                try:
                    if resumed.memories["train"].size != rows_held:
                        print(f"  WARNING: resumed memory holds {resumed.memories['train'].size} rows")
                    found["resume"].append((total, parts))
                finally:
                    resumed.close()
                    resumed_session.close()
    return found


def report(name: str, found: dict, base: float) -> None:
    print(
        f"\n{name}: medians over rounds on a shared machine (best in brackets); ratios against the iteration:"
    )
    line("checkpoint (a): 100k rows dirty", [t for t, _ in found["a"]], base)
    names = ("flush", "collect", "write", "upload", "retention")
    print(f"      parts: {parts_detail([p for _, p in found['a']], names)}")
    line("checkpoint (b): 1 iteration dirty", [t for t, _ in found["b"]], base)
    print(f"      parts: {parts_detail([p for _, p in found['b']], names)}")
    line("resume (incl. memory load)", [t for t, _ in found["resume"]], base)
    parts_r = [dict(p, rest=t - sum(p.values())) for t, p in found["resume"]]
    print(f"      parts: {parts_detail(parts_r, ('read', 'build', 'memory', 'rest'))}")
    print("  sizes: " + ", ".join(f"{k} {v / 1e3:,.1f} kB" for k, v in found["sizes"].items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--no-s3", action="store_true", help="local disk only (no moto server)")
    args = parser.parse_args()
    rounds_a, iterations, resumes = (1, 2, 2) if args.quick else (3, 5, 4)
    logging.basicConfig(level=logging.WARNING)
    rng = np.random.default_rng(0)
    started = time.perf_counter()
    print(machine(("sse4_2", "avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")))
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench_checkpoint_") as tmp, contextlib.ExitStack() as stack:
        stack.enter_context(contextlib.chdir(tmp))  # URL sessions keep their working folder in ./data/cache
        results["local disk"] = measure(Path(tmp) / "sessions", rounds_a, iterations, resumes, rng)
        if not args.no_s3:
            s3_root = stack.enter_context(s3_sessions(Path(tmp)))
            results["S3 (moto on 127.0.0.1)"] = measure(s3_root, rounds_a, iterations, resumes, rng)
    print(results["local disk"]["header"])
    iteration = [entry for found in results.values() for entry in found["iteration"]]
    base = statistics.median(t for t, _ in iteration)
    print()
    line("iteration (baseline, both backends)", [t for t, _ in iteration], None)
    print(f"      stages: {parts_detail([s for _, s in iteration], runner_module.ITERATION_STAGES)}")
    for name, found in results.items():
        report(name, found, base)
    if len(results) == 2:
        local, s3 = results.values()
        print("\nS3 / local disk (medians):")
        for key, label in (("a", "checkpoint (a)"), ("b", "checkpoint (b)"), ("resume", "resume")):
            ratio = statistics.median(t for t, _ in s3[key]) / statistics.median(t for t, _ in local[key])
            print(f"  {label:<16} {ratio:6.2f} x")
        worst = statistics.median(t for t, _ in s3["b"]) / base
        print(
            f"goal 'a checkpoint to S3 costs <= 5 % of an iteration': {'met' if worst <= 0.05 else 'MISSED'} "
            f"({100 * worst:.2f} %)"
        )
    print(f"total bench time {time.perf_counter() - started:.0f} s", file=sys.stderr)


@contextlib.contextmanager
def s3_sessions(tmp: Path) -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 with a bucket; yields the sessions URL, the environment set."""
    import os

    from tests.s3 import moto_server

    servers = moto_server(tmp / "moto.log")
    server = next(servers)
    saved = {key: os.environ.get(key) for key in server.env}
    os.environ.update(server.env)
    try:
        yield f"s3://{server.make_bucket('bench')}/sessions"
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        next(servers, None)


if __name__ == "__main__":
    main()
