"""A lightweight profiler: nested named timers with counts and totals.

Usage::

    from digideep.utility.profiling import KeepTime, profiler

    with KeepTime("explore"):
        with KeepTime("step"):      # recorded as "/explore/step"
            ...
    profiler.summary()  # {"/explore": {"count": 1, "total": 0.12, "mean": 0.12}, "/explore/step": ...}
    profiler.reset()    # start the next log interval

Names nest per thread. A ``KeepTime`` block is cheap enough to leave on around every stage and env
step (``bench/bench_debug_tools.py`` measures it; docs/debugging.md gives the figure).
"""

from __future__ import annotations

import threading
import time

__all__ = ["KeepTime", "Profiler", "profiler"]


class Profiler:
    """Accumulates ``(count, total seconds)`` per nested timer name since the last reset."""

    def __init__(self) -> None:
        self._records: dict[str, list] = {}
        self._local = threading.local()

    def _stack(self) -> list[str]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = [""]
        return stack

    def add(self, name: str, seconds: float) -> None:
        """Add one timing of ``seconds`` under the full name ``name``."""
        record = self._records.get(name)
        if record is None:
            self._records[name] = [1, seconds]
        else:
            record[0] += 1
            record[1] += seconds

    def summary(self) -> dict[str, dict[str, float]]:
        """``{name: {"count", "total", "mean"}}`` of every timer, sorted by name."""
        return {
            name: {"count": count, "total": total, "mean": total / count}
            for name, (count, total) in sorted(self._records.items())
        }

    def reset(self) -> None:
        self._records = {}


profiler = Profiler()
"""The process-wide profiler that :class:`KeepTime` records into."""


class KeepTime:
    """Context manager timing a block under a name nested in the enclosing ``KeepTime`` blocks."""

    __slots__ = ("_name", "_profiler", "_stack", "_start")

    def __init__(self, name: str, profiler: Profiler = profiler) -> None:
        self._name = name
        self._profiler = profiler

    def __enter__(self) -> KeepTime:
        stack = self._stack = self._profiler._stack()
        stack.append(stack[-1] + "/" + self._name)
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        elapsed = time.perf_counter() - self._start
        self._profiler.add(self._stack.pop(), elapsed)
