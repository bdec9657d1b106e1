"""What the benchmarks share: the CPU line printed with every figure, and interleaved medians."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

from digideep.utility.machine import SPEED_FLAGS, cpu_flags

__all__ = ["SPEED_FLAGS", "interleaved", "machine", "timed"]


def machine(wanted: tuple[str, ...] = SPEED_FLAGS) -> str:
    """torch's CPU capability, the ``wanted`` flags this CPU has, and its core count."""
    found = ", ".join(cpu_flags(wanted)) or "unknown"
    return f"cpu capability {torch.backends.cpu.get_cpu_capability()}, flags: {found}, {os.cpu_count()} cores"


def timed(fn: Callable[[], Any]) -> float:
    """Seconds one call of ``fn`` takes."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved(
    runs: Mapping[str, Callable[[], Any]],
    repeats: int,
    work: float,
    before: Callable[[str], None] | None = None,
) -> dict[str, float]:
    """Median rates (``work`` per second) of ``{name: fn}``: one warm-up each, then ``repeats``
    timings of every name in turn, so that the machine's load changes hit all of them alike.

    ``before(name)`` runs ahead of each call of that name, outside the timing (e.g. a thread count).
    """
    prepare = before or (lambda name: None)
    for name, run in runs.items():
        prepare(name)
        run()
    timings: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            prepare(name)
            timings[name].append(timed(run))
    return {name: work / statistics.median(t) for name, t in timings.items()}
