"""Cost per call of the Monitor and the Profiler, against an empty Python loop and a bare function call.

    python bench/bench_debug_tools.py

The goal is "cheap enough to leave on": about a microsecond or less per call, small next to one
MuJoCo env step (tens of microseconds) or a gradient step (milliseconds).
"""

from __future__ import annotations

import time

import numpy as np

from digideep.utility.monitoring import Monitor
from digideep.utility.profiling import KeepTime, Profiler

N = 200_000


def per_call(func, n: int = N) -> float:
    start = time.perf_counter()
    func(n)
    return (time.perf_counter() - start) / n


def empty_loop(n: int) -> None:
    for _ in range(n):
        pass


def noop() -> None:
    pass


def bare_calls(n: int) -> None:
    for _ in range(n):
        noop()


def monitor_scalar(n: int) -> None:
    monitor = Monitor()
    for i in range(n):
        monitor("/explore/train/episode_return", i)


def monitor_array(n: int) -> None:
    monitor = Monitor()
    values = np.ones(8, dtype=np.float32)
    for _ in range(n):
        monitor("/losses/qf", values)


def keep_time_nested(n: int) -> None:
    profiler = Profiler()
    with KeepTime("train", profiler):
        for _ in range(n):
            with KeepTime("step", profiler):
                pass


def main() -> None:
    base = per_call(empty_loop)
    call = per_call(bare_calls) - base
    print(f"{'what':36s} {'ns/call':>10s} {'x bare call':>12s}")
    print(f"{'bare Python function call':36s} {call * 1e9:10.0f} {1.0:12.1f}")
    for name, func in [
        ("monitor(name, float)", monitor_scalar),
        ("monitor(name, array of 8)", monitor_array),
        ("with KeepTime(name): (nested)", keep_time_nested),
    ]:
        cost = per_call(func) - base
        print(f"{name:36s} {cost * 1e9:10.0f} {cost / call:12.1f}")


if __name__ == "__main__":
    main()
