"""Benchmark of the circular memory against a plain numpy ring measured in the same run.

    python bench/bench_memory.py                      # capacity 1,000,000, HalfCheetah sizes
    python bench/bench_memory.py --capacity 200000    # quicker
    python bench/bench_memory.py --compression        # also compare Zarr compressors
    python bench/bench_memory.py --retention-only --capacity 200000   # the log's size on disk
    python bench/bench_memory.py --checksum-only --capacity 200000   # the chunks' crc32c, CPU time
    python bench/bench_memory.py --write-behind-only --s3 --capacity 100000   # store, checkpoint,
                                                      # resume of 1M rows, disk and S3, before/after
    python bench/bench_memory.py --checkpoint-ab 5 --s3 --capacity 100000   # the checkpoint alone,
                                                      # before and after alternated in 5 processes each

HalfCheetah-sized transitions: observations and next observations 17 float32, actions 6 float32,
rewards, terminals, truncations, masks, hidden state 1 float32 each (180 bytes a row). Data are
standard-normal floats (compressing about as badly as real MuJoCo observations) and flags set
as in 1000-step episodes (terminals, truncations, masks, hidden state: nearly constant). Figures are
medians of repeated runs; the machine's other load makes them noisy. Each line prints the absolute
time and the ratio against the plain numpy ring (``x numpy``) or the target.

Measured on the 2-core development machine (capacity 1,000,000, 180 MB raw): store 0.013 ms
(0.8-1.0 x numpy), sample 256 in 0.04 ms (1.6 x numpy with ``np.take``), flush of 50,000 dirty
rows 25-65 ms, load 0.2-0.8 s, peak RAM 1.09 x (store + flush) and 1.20 x (load) the raw size;
disk mode: store 14 ms (about 1000 x), sample 256 in 55-70 ms (about 1500 x ram mode).

The log's size on disk (``--retention-only``): a memory of ``--capacity`` rows checkpointed every
50,000 rows, the newest 3 checkpoints kept (``checkpoint_committed(keep=3)``, as the Runner does
with ``keep_checkpoints: 3``), against the raw size of the capacity plus the rows stored since the
oldest kept checkpoint. Figures are in ``docs/memory.md``.

The store stage, the checkpoint and the resume (``--write-behind-only``; ``--s3`` adds a moto S3
server on 127.0.0.1, started as ``tests/s3.py`` does): a training loop stores one 1,000-step chunk
per iteration (plus ``--pause`` seconds of other work) and checkpoints (``flush`` +
``checkpoint_committed``) every ``--every`` iterations, after the ring wrapped once. Before each
checkpoint the loop waits for the background writer, untimed: the checkpoint is timed as training
sees it when an iteration outlasts the writer's work for a chunk, and that work per chunk is
printed beside it. The same loop runs in child processes on two code trees: ``--before`` (a git
revision, extracted with ``git archive``) and the working tree ("after"), on a local temporary
folder and on S3. Then a memory of ``--resume-capacity`` rows is filled, checkpointed, and a new
memory restores it (the resume), timed; and one real SAC HalfCheetah-v5 iteration is timed (as
``bench/bench_checkpoint.py`` runs it) to give the checkpoint as a share of an iteration (goal
<= 5 %; resume goal <= 10 s). ``--iteration-seconds`` skips that and says so.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from common import machine

# the repository root (tests/s3.py), or the tree of the code measured as "before" (a child process)
sys.path.insert(0, os.environ.get("BENCH_MEMORY_TREE") or str(Path(__file__).resolve().parents[1]))

from digideep.memory import Memory, Sampler, uniform_transitions

FEATURES = {
    "/observations": 17,
    "/next_observations": 17,
    "/agents/agent/actions": 6,
    "/rewards": 1,
    "/terminals": 1,
    "/truncations": 1,
    "/masks": 1,
    "/agents/agent/hidden_state": 1,
}
SAMPLE_KEYS = [
    "/observations",
    "/agents/agent/actions",
    "/rewards",
    "/next_observations",
    "/terminals",
    "/truncations",
]
ROW_BYTES = 4 * sum(FEATURES.values())
# the Runner's retention (keep_checkpoints: 3), where the memory under test takes it (the log does)
KEEP = {"keep": 3} if "keep" in inspect.signature(Memory.checkpoint_committed).parameters else {}
BEFORE = "fded901"  # the memory before the log: a Zarr ring rewritten in place, with an undo area


def make_chunk(rng: np.random.Generator, workers: int, rows: int) -> dict[str, np.ndarray]:
    """Random observations, actions and rewards; flags as in a run with 1000-step episodes."""
    chunk = {k: rng.standard_normal((workers, rows, f), dtype=np.float32) for k, f in FEATURES.items()}
    chunk["/terminals"][:] = 0.0
    chunk["/truncations"][:] = 0.0
    chunk["/truncations"][:, -2] = 1.0
    chunk["/masks"][:] = 1.0
    chunk["/masks"][:, -1] = 0.0
    chunk["/agents/agent/hidden_state"][:] = 0.0
    return chunk


def median_time(fn: Callable[[], object], repeats: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


class NumpyRing:
    """The baseline: Stable-Baselines3-style preallocated arrays ``(capacity, features)``, one worker."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.pos, self.full = capacity, 0, False
        self.arrays = {k: np.zeros((capacity, f), np.float32) for k, f in FEATURES.items()}

    def store(self, chunk: dict[str, np.ndarray]) -> None:
        rows = next(iter(chunk.values())).shape[1]
        stop = self.pos + rows
        for key, ring in self.arrays.items():
            if stop <= self.capacity:
                ring[self.pos : stop] = chunk[key][0]
            else:
                first = self.capacity - self.pos
                ring[self.pos :] = chunk[key][0, :first]
                ring[: stop - self.capacity] = chunk[key][0, first:]
        self.full = self.full or stop >= self.capacity
        self.pos = (self.pos + rows - 1) % self.capacity

    def sample(self, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
        index = rng.integers(0, self.capacity if self.full else self.pos, n)
        return {key: self.arrays[key].take(index, axis=0) for key in SAMPLE_KEYS}


def fill(memory: Memory, rng: np.random.Generator, rows: int, chunk_steps: int = 1000) -> None:
    """Store fresh random chunks until ``rows`` rows per worker were written (the ring is full)."""
    for _ in range(rows // chunk_steps + 1):
        memory.store(make_chunk(rng, memory.num_workers, chunk_steps + 1))


def line(name: str, seconds: float, baseline: float | None = None, target: float | None = None) -> None:
    text = f"{name:<46} {seconds * 1e3:10.3f} ms"
    if baseline is not None:
        text += f"   {seconds / baseline:6.2f} x numpy ({baseline * 1e3:.3f} ms)"
    if target is not None:
        text += f"   target <= {target * 1e3:g} ms: {'ok' if seconds <= target else 'MISSED'}"
    print(text, flush=True)


def bench_ram(root: Path, capacity: int, compression: str | None) -> None:
    rng = np.random.default_rng(0)
    ring = NumpyRing(capacity)
    memory = Memory(root / "ram.zarr", num_workers=1, capacity=capacity, compression=compression)
    chunk = make_chunk(rng, 1, 1001)
    store_numpy = median_time(lambda: ring.store(chunk), 200)
    store_ours = median_time(lambda: memory.store(chunk), 200)
    line("store 1,000-step chunk (1 worker)", store_ours, store_numpy)
    fill(memory, rng, capacity)
    for _ in range(capacity // 1000 + 1):
        ring.store(chunk)

    sampler = Sampler([uniform_transitions], {"batch_size": 256, "keys": SAMPLE_KEYS, "seed": 0})
    sample_numpy = median_time(lambda: ring.sample(rng, 256), 2000)
    sample_ours = median_time(lambda: sampler(memory), 2000)
    line("sample 256 transitions", sample_ours, sample_numpy, target=2e-4)
    many = Sampler([uniform_transitions], {"batch_size": 256, "num_batches": 1000, "keys": SAMPLE_KEYS})
    many_numpy = median_time(lambda: ring.sample(rng, 256_000), 5, warmup=1)
    line("sample 1000 x 256 transitions (one draw)", median_time(lambda: many(memory), 5, 1), many_numpy)

    memory.flush()
    for _ in range(50):  # 50,000 dirty transitions, wrapping around the ring
        memory.store(make_chunk(rng, 1, 1001))
    start = time.perf_counter()
    memory.flush()
    line("flush 50,000 dirty transitions", time.perf_counter() - start, target=0.1)

    loaded = Memory(root / "ram.zarr", num_workers=1, capacity=capacity)
    start = time.perf_counter()
    loaded.load()
    line(f"load {capacity:,} transitions", time.perf_counter() - start, target=2.0)
    size = sum(p.stat().st_size for p in (root / "ram.zarr").rglob("*") if p.is_file())
    print(f"{'zarr size on disk':<46} {size / 1e6:10.1f} MB   raw {capacity * ROW_BYTES / 1e6:.1f} MB")


def bench_workers(root: Path, capacity: int) -> None:
    """The same figures with 8 workers (capacity split among them)."""
    rng = np.random.default_rng(1)
    workers, per_worker = 8, capacity // 8
    memory = Memory(root / "w8.zarr", num_workers=workers, capacity=per_worker)
    chunk = make_chunk(rng, workers, 126)
    stacked = NumpyRing(per_worker * workers)
    flat_chunk = {k: v.reshape(1, -1, v.shape[-1]) for k, v in chunk.items()}
    line(
        "store 8 x 125-step chunk (8 workers)",
        median_time(lambda: memory.store(chunk), 200),
        median_time(lambda: stacked.store(flat_chunk), 200),
    )
    fill(memory, rng, per_worker, chunk_steps=125)
    for _ in range(capacity // 1000 + 1):
        stacked.store(flat_chunk)
    sampler = Sampler([uniform_transitions], {"batch_size": 256, "keys": SAMPLE_KEYS, "seed": 0})
    line(
        "sample 256 transitions (8 workers)",
        median_time(lambda: sampler(memory), 2000),
        median_time(lambda: stacked.sample(rng, 256), 2000),
        target=2e-4,
    )


def bench_disk(root: Path, capacity: int) -> None:
    rng = np.random.default_rng(2)
    ram = Memory(root / "cmp.zarr", num_workers=1, capacity=capacity)
    disk = Memory(root / "disk.zarr", num_workers=1, capacity=capacity, mode="disk")
    chunk = make_chunk(rng, 1, 1001)
    line(
        "disk mode: store 1,000-step chunk",
        median_time(lambda: disk.store(chunk), 20),
        median_time(lambda: ram.store(chunk), 20),
    )
    fill(disk, rng, capacity)
    fill(ram, rng, capacity)
    sampler = Sampler([uniform_transitions], {"batch_size": 256, "keys": SAMPLE_KEYS, "seed": 0})
    ram_time = median_time(lambda: sampler(ram), 500)
    disk_time = median_time(lambda: sampler(disk), 10, warmup=1)
    print(
        f"{'disk mode: sample 256 transitions':<46} {disk_time * 1e3:10.3f} ms   "
        f"{disk_time / ram_time:6.0f} x ram mode ({ram_time * 1e3:.3f} ms)",
        flush=True,
    )


def bench_retention(root: Path, capacity: int, keep: int = 3, every: int = 50_000) -> None:
    """Bytes of the log on disk once the ring wrapped twice, checkpoints every ``every`` rows, ``keep`` kept."""
    rng = np.random.default_rng(5)
    chunks = [make_chunk(rng, 1, 1001) for _ in range(25)]
    memory = Memory(root / "retention.zarr", num_workers=1, capacity=capacity)
    stored = 0
    while stored < 2 * capacity + every * keep:
        memory.store(chunks[(stored // 1000) % len(chunks)])
        stored += 1000
        if stored % every == 0:
            memory.flush()
            memory.checkpoint_committed(keep=keep)
    memory.close()
    rows = (root / "retention.zarr").rglob("*")
    size = sum(p.stat().st_size for p in rows if p.is_file())
    since = stored - (stored // every - keep + 1) * every  # rows stored since the oldest kept checkpoint
    bound = (capacity + since) * ROW_BYTES
    print(
        f"{'log on disk, ' + f'{keep} checkpoints kept':<46} {size / 1e6:10.1f} MB   "
        f"{size / bound:6.2f} x the raw size of the capacity plus the {since:,} rows stored since the "
        f"oldest kept checkpoint ({bound / 1e6:.1f} MB)",
        flush=True,
    )


def training_loop(
    memory: object,
    chunks: list[dict[str, np.ndarray]],
    iterations: int,
    pause: float,
    every: int,
    backlog: list[float] | None = None,
) -> tuple[list[float], list[float]]:
    """Store ``iterations`` chunks, checkpoint every ``every``; the store and checkpoint seconds.

    With ``backlog``, the loop waits for the background writer before each checkpoint (untimed in
    the checkpoint, appended to ``backlog``): what a checkpoint costs once the writer caught up,
    as it does when an iteration lasts longer than the writer needs for a chunk.
    """
    stores, checkpoints = [], []
    for i in range(iterations):
        time.sleep(pause)  # explore and update: the background writer runs meanwhile
        start = time.perf_counter()
        memory.store(chunks[i % len(chunks)])
        stores.append(time.perf_counter() - start)
        if (i + 1) % every == 0:
            if backlog is not None:
                start = time.perf_counter()
                memory.wait()
                backlog.append(time.perf_counter() - start)
            start = time.perf_counter()
            memory.flush()
            memory.checkpoint_committed(**KEEP)
            checkpoints.append(time.perf_counter() - start)
    return stores, checkpoints


def stage_child(where: str, capacity: int, pause: float, every: int, iterations: int) -> dict[str, float]:
    """Run in a process of the code under test: the store stage and the checkpoint, medians in seconds.

    The ring is filled (wrapped once, checkpoints included) without pauses, then ``iterations``
    chunks are stored with ``pause`` seconds of other work each and a checkpoint every ``every``.
    """
    rng = np.random.default_rng(6)
    chunks = [make_chunk(rng, 1, 1001) for _ in range(25)]
    floor = Memory(None, num_workers=1, capacity=capacity)
    stores, _ = training_loop(floor, chunks, 200, 0.0, 10**9)
    memory = Memory(f"{where}/behind.zarr", num_workers=1, capacity=capacity)
    training_loop(memory, chunks, capacity // 1000 + 1, 0.0, every)
    memory.flush()
    memory.checkpoint_committed()
    backlog: list[float] = []
    store, checkpoint = training_loop(memory, chunks, iterations, pause, every, backlog)
    memory.close()
    return {
        "floor": float(np.median(stores)),
        "store": float(np.median(store)),
        "checkpoint": float(np.median(checkpoint)),
        "checkpoint_max": float(np.max(checkpoint)),
        # the writer's time for one chunk: the backlog left after `every` stores with `pause` each
        "writer": float(np.median(backlog)) / every + pause,
    }


def resume_child(where: str, capacity: int) -> dict[str, float]:
    """Run in a process of the code under test: fill ``capacity`` rows, checkpoint, then time a resume
    (a new memory restores the checkpoint's state: the RAM ring read back from Zarr)."""
    rng = np.random.default_rng(7)
    chunks = [make_chunk(rng, 1, 1001) for _ in range(25)]
    memory = Memory(f"{where}/resume.zarr", num_workers=1, capacity=capacity)
    start = time.perf_counter()
    training_loop(memory, chunks, capacity // 1000 + 1, 0.0, 10**9)
    memory.flush()
    memory.checkpoint_committed()
    fill = time.perf_counter() - start
    state = memory.state_dict()
    memory.close()
    del memory
    start = time.perf_counter()
    resumed = Memory(f"{where}/resume.zarr", num_workers=1, capacity=capacity)
    resumed.restore(state)
    resume = time.perf_counter() - start
    assert resumed.state_dict() == state and resumed.size == capacity - 1
    return {"fill": fill, "resume": resume}


def checkpoint_child(where: str, capacity: int, rounds: int = 8) -> dict[str, float]:
    """Run in a process of the code under test: fill the ring (wrapped once, checkpoints included),
    then ``rounds`` times store 10 chunks, wait for the writer (untimed) and time the flush and the
    ``checkpoint_committed`` apart; medians in seconds."""
    rng = np.random.default_rng(6)
    chunks = [make_chunk(rng, 1, 1001) for _ in range(25)]
    memory = Memory(f"{where}/ab.zarr", num_workers=1, capacity=capacity)
    training_loop(memory, chunks, capacity // 1000 + 1, 0.0, 10)
    flushes, commits = [], []
    for _ in range(rounds):
        for i in range(10):
            memory.store(chunks[i % len(chunks)])
        memory.wait()
        start = time.perf_counter()
        memory.flush()
        middle = time.perf_counter()
        memory.checkpoint_committed(**KEEP)
        flushes.append(middle - start)
        commits.append(time.perf_counter() - middle)
    memory.close()
    return {"flush": float(np.median(flushes)), "commit": float(np.median(commits))}


def bench_checkpoint_ab(places: dict[str, str], trees: dict[str, Path], capacity: int, repeats: int) -> None:
    """The checkpoint of each tree in child processes alternated ``repeats`` times, at each place."""
    for label, where in places.items():
        figures: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for repeat in range(repeats):
            for name, tree in trees.items():
                result = run_child(tree, "checkpoint", where=f"{where}/ab-{name}-{repeat}", capacity=capacity)
                figures[name].append(result)
        line = (
            f"{label}: checkpoint A/B, {repeats} alternated processes x 8 checkpoints, capacity {capacity:,}:"
        )
        totals = {}
        for name, runs in figures.items():
            flush = float(np.median([r["flush"] for r in runs]))
            commit = float(np.median([r["commit"] for r in runs]))
            totals[name] = flush + commit
            line += f"  {name} flush {flush * 1e3:.1f} ms + committed {commit * 1e3:.1f} ms;"
        if len(totals) == 2:
            before, after = totals.values()
            line += f"  after / before {after / before:.2f} x"
        print(line, flush=True)


def run_child(tree: Path, task: str, **kwargs: object) -> dict[str, float]:
    """``stage_child`` or ``resume_child`` in a fresh process that imports digideep from ``tree``."""
    env = {**os.environ, "BENCH_MEMORY_TREE": str(tree), "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps({"task": task, **kwargs})],
        capture_output=True,
        text=True,
        env=env,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{task} child on {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def before_tree(rev: str, root: Path) -> Path:
    """The ``digideep`` package as of git revision ``rev``, extracted under ``root``."""
    repo = Path(__file__).resolve().parents[1]
    tree = root / f"before-{rev}"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", rev, "digideep"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    if not any((tree / "digideep" / where / "location.py").exists() for where in ("memory", "storage")):
        raise SystemExit(f"--before {rev}: that revision cannot write to a URL; pick one after the split")
    return tree


def bench_stages(places: dict[str, str], trees: dict[str, Path], args: argparse.Namespace) -> dict:
    """The store stage and the checkpoint of each tree at each place (same chunks, same loop)."""
    results = {}
    for label, where in places.items():
        print(
            f"{label}: store one 1,000-step chunk per iteration ({args.pause * 1e3:g} ms of other work), "
            f"checkpoint every {args.every} ({args.every * 1000:,} rows), capacity {args.capacity:,}, "
            f"{args.iterations} iterations after the ring wrapped",
            flush=True,
        )
        for name, tree in trees.items():
            figures = run_child(
                tree,
                "stage",
                where=f"{where}/{name}",
                capacity=args.capacity,
                pause=args.pause,
                every=args.every,
                iterations=args.iterations,
            )
            results[(label, name)] = figures
            print(
                f"  {name:<7} store {figures['store'] * 1e3:7.3f} ms ({figures['store'] / figures['floor']:4.2f} x "
                f"RAM only {figures['floor'] * 1e3:.3f} ms)   checkpoint {figures['checkpoint'] * 1e3:8.1f} ms "
                f"(max {figures['checkpoint_max'] * 1e3:.1f})   writer ~{figures['writer'] * 1e3:.0f} ms a chunk",
                flush=True,
            )
        if len(trees) == 2:
            before, after = (results[(label, name)] for name in trees)
            print(
                f"  after / before: store {after['store'] / before['store']:.2f} x, "
                f"checkpoint {after['checkpoint'] / before['checkpoint']:.3f} x",
                flush=True,
            )
    return results


def bench_resume(where: str, label: str, trees: dict[str, Path], capacity: int) -> dict:
    results = {}
    for name, tree in trees.items():
        figures = run_child(tree, "resume", where=f"{where}/{name}", capacity=capacity)
        results[name] = figures
        verdict = "ok" if figures["resume"] <= 10 else "MISSED"
        print(
            f"{label}: resume {capacity:,} transitions, {name:<7} {figures['resume']:7.2f} s   target <= 10 s: "
            f"{verdict}   (filling them took {figures['fill']:.1f} s)",
            flush=True,
        )
    if len(results) == 2:
        before, after = results.values()
        print(f"{label}: resume after / before {after['resume'] / before['resume']:.2f} x", flush=True)
    return results


def iteration_seconds() -> float:
    """One real SAC HalfCheetah-v5 training iteration (shipped params), as bench_checkpoint.py runs it."""
    from bench_checkpoint import new_runner, timed_iteration

    with tempfile.TemporaryDirectory(prefix="bench_memory_sac_") as tmp:
        runner, session = new_runner(Path(tmp), "iteration")
        try:
            timed_iteration(runner)  # the warm start: random actions, learning starts after it
            seconds, _ = timed_iteration(runner)
        finally:
            runner.close()
            session.close()
    return seconds


@contextlib.contextmanager
def s3_bucket() -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 (as tests/s3.py starts it) and a bucket on it: ``s3://name``."""
    from tests.s3 import moto_server

    with tempfile.TemporaryDirectory(prefix="bench_memory_moto_") as tmp:
        servers = moto_server(Path(tmp) / "moto.log")
        server = next(servers)
        os.environ.update(server.env)
        try:
            yield f"s3://{server.make_bucket('bench')}"
        finally:
            servers.close()


def bench_compression(root: Path, capacity: int) -> None:
    rng = np.random.default_rng(3)
    for compression in (None, "lz4", "zstd"):
        path = root / f"c_{compression}.zarr"
        memory = Memory(path, num_workers=1, capacity=capacity, compression=compression)
        fill(memory, rng, capacity)
        start = time.perf_counter()
        memory.flush()
        flush_all = time.perf_counter() - start
        for _ in range(50):
            memory.store(make_chunk(rng, 1, 1001))
        start = time.perf_counter()
        memory.flush()
        flush_50k = time.perf_counter() - start
        start = time.perf_counter()
        Memory(path, num_workers=1, capacity=capacity).load()
        load = time.perf_counter() - start
        size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        print(
            f"compression {compression!s:<5} flush all {flush_all:6.3f} s  flush 50k {flush_50k * 1e3:7.1f} ms  "
            f"load {load:6.3f} s  {size / (capacity * ROW_BYTES):.2f} of raw size",
            flush=True,
        )
        shutil.rmtree(path)


def peak_child(task: str, path: str, capacity: int) -> None:
    """Run in a fresh process: print the peak RSS above the RSS before the memory existed."""
    import psutil

    before = psutil.Process().memory_info().rss
    if task == "fill":
        memory = Memory(path, num_workers=1, capacity=capacity)
        fill(memory, np.random.default_rng(4), capacity)
        memory.flush()
    else:
        Memory(path, num_workers=1, capacity=capacity).load()
    # VmHWM: this process's own peak (ru_maxrss would report the parent's peak, inherited at fork)
    status = Path("/proc/self/status").read_text().split("\n")
    peak = next(int(row.split()[1]) * 1024 for row in status if row.startswith("VmHWM"))
    print(json.dumps({"extra": peak - before}))


def bench_peak(root: Path, capacity: int) -> None:
    raw = capacity * ROW_BYTES
    path = str(root / "peak.zarr")
    for task in ("fill", "load"):
        out = subprocess.run(
            [sys.executable, __file__, "--peak-child", task, path, "--capacity", str(capacity)],
            capture_output=True,
            text=True,
            check=True,
        )
        extra = json.loads(out.stdout.strip().splitlines()[-1])["extra"]
        verdict = "ok" if extra <= 1.3 * raw else "MISSED"
        print(
            f"{'peak RAM, ' + ('store + flush' if task == 'fill' else 'load'):<46} {extra / 1e6:10.1f} MB   "
            f"{extra / raw:6.2f} x raw data ({raw / 1e6:.1f} MB)   target <= 1.3: {verdict}",
            flush=True,
        )


def bench_checksum(root: Path, capacity: int, repeats: int = 5) -> None:
    """CPU seconds of writing and reading back ``capacity`` rows with and without the chunks' crc32c.

    The same code in one process, the array codecs alone differing (those of the version before the
    checksum: the compression alone), alternated ``repeats`` times; the minimum of each, in CPU time
    of the process (every thread), so that the other load of a shared machine counts least. Write:
    stores of 1,000-step chunks filling the ring (written in ``store``, no background thread), the
    flush and the checkpoint. Read: a new memory restoring that checkpoint (a resume).
    """
    import digideep.memory.log as zarr_log
    from digideep.memory import record

    rng = np.random.default_rng(8)
    chunks = [make_chunk(rng, 1, 1001) for _ in range(25)]

    def without(compression: str | None, spec: object = None) -> tuple:
        return record.compressors(compression, spec)[:-1]  # the crc32c is the last codec

    variants = {"with crc32c": record.compressors, "without": without}
    times: dict[str, dict[str, list[float]]] = {name: {"write": [], "read": []} for name in variants}
    for repeat in range(repeats):
        for name, codecs in variants.items():
            zarr_log.compressors = codecs
            path = root / f"checksum-{repeat}-{name.replace(' ', '-')}.zarr"
            start = time.process_time()
            memory = Memory(path, num_workers=1, capacity=capacity, write_behind=False)
            training_loop(memory, chunks, capacity // 1000 + 1, 0.0, 10**9)
            memory.flush()
            memory.checkpoint_committed()
            state = memory.state_dict()
            memory.close()
            times[name]["write"].append(time.process_time() - start)
            start = time.process_time()
            with Memory(path, num_workers=1, capacity=capacity) as resumed:
                resumed.restore(state)
            times[name]["read"].append(time.process_time() - start)
            shutil.rmtree(path, ignore_errors=True)
    zarr_log.compressors = record.compressors
    for what in ("write", "read"):
        best = {name: min(figures[what]) for name, figures in times.items()}
        print(
            f"{what} {capacity:,} rows, CPU s (min of {repeats}): with crc32c {best['with crc32c']:.3f}, "
            f"without {best['without']:.3f}: {best['with crc32c'] / best['without']:.2f} x",
            flush=True,
        )


def cpu_flags() -> str:
    """torch's CPU capability and the SIMD flags that numpy and the codecs use."""
    return machine(("sse4_2", "avx", "avx2", "avx512f", "fma"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--compression", action="store_true", help="also compare Zarr compressors")
    parser.add_argument("--skip-disk", action="store_true")
    parser.add_argument("--retention-only", action="store_true", help="only the log's size on disk")
    parser.add_argument(
        "--checksum-only", action="store_true", help="only the chunks' crc32c: write and read CPU time"
    )
    parser.add_argument(
        "--write-behind-only",
        action="store_true",
        help="only the store stage and checkpoint (before and after), the resume, the iteration",
    )
    parser.add_argument("--s3", action="store_true", help="also run on a moto S3 server on 127.0.0.1")
    parser.add_argument(
        "--checkpoint-ab",
        type=int,
        default=0,
        metavar="N",
        help="only the checkpoint (flush, checkpoint_committed) of before and after, N alternated processes each",
    )
    parser.add_argument(
        "--before", default=BEFORE, help=f"git revision measured as 'before' (default {BEFORE}); '' for none"
    )
    parser.add_argument("--pause", type=float, default=0.0, help="seconds of other work per iteration")
    parser.add_argument("--every", type=int, default=10, help="iterations between checkpoints")
    parser.add_argument("--iterations", type=int, default=60, help="timed iterations after the fill")
    parser.add_argument("--resume-capacity", type=int, default=1_000_000, help="rows of the resume timing")
    parser.add_argument(
        "--iteration-seconds",
        type=float,
        default=None,
        help="a SAC HalfCheetah iteration's seconds (default: measure one real iteration)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--peak-child", nargs=2, metavar=("TASK", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        job = json.loads(args.child)
        task = job.pop("task")
        tasks = {"stage": stage_child, "resume": resume_child, "checkpoint": checkpoint_child}
        print(json.dumps(tasks[task](**job)))
        return
    if args.peak_child:
        peak_child(args.peak_child[0], args.peak_child[1], args.capacity)
        return
    print(
        f"capacity {args.capacity:,} rows, {ROW_BYTES} bytes a row ({args.capacity * ROW_BYTES / 1e6:.0f} MB raw)"
    )
    print(f"machine: {platform.processor() or platform.machine()}, {cpu_flags()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench_memory_") as tmp:
        root = Path(tmp)
        if args.retention_only:
            bench_retention(root, args.capacity)
            return
        if args.checksum_only:
            bench_checksum(root, args.capacity)
            return
        trees = {"before": before_tree(args.before, root)} if args.before else {}
        trees["after"] = Path(__file__).resolve().parents[1]
        if args.before:
            print(f"before: git revision {args.before}; after: the working tree", flush=True)
        with contextlib.ExitStack() as stack:
            places = {"local disk": str(root / "stages")}
            if args.s3:
                places["S3 (moto, 127.0.0.1)"] = stack.enter_context(s3_bucket())
            if args.checkpoint_ab:
                bench_checkpoint_ab(places, trees, args.capacity, args.checkpoint_ab)
                return
            stages = bench_stages(places, trees, args)
            if args.s3:
                bench_resume(places["S3 (moto, 127.0.0.1)"], "S3", trees, args.resume_capacity)
            bench_resume(str(root / "resume"), "local disk", trees, args.resume_capacity)
        seconds = args.iteration_seconds
        if seconds is None:
            seconds = iteration_seconds()
            print(f"one real SAC HalfCheetah-v5 iteration (shipped params): {seconds:.2f} s")
        else:
            print(f"one SAC HalfCheetah-v5 iteration: {seconds:.2f} s (given, not measured)")
        for (label, name), figures in stages.items():
            share = figures["checkpoint"] / seconds
            print(
                f"  checkpoint, {label}, {name}: {share * 100:.2f} % of an iteration   target <= 5 %: "
                f"{'ok' if share <= 0.05 else 'MISSED'}"
            )
        if args.write_behind_only:
            return
        bench_ram(root, args.capacity, None)
        bench_workers(root, args.capacity)
        bench_peak(root, args.capacity)
        if not args.skip_disk:
            bench_disk(root, args.capacity)
        bench_retention(root, args.capacity)
        if args.compression:
            bench_compression(root, args.capacity)


if __name__ == "__main__":
    main()
