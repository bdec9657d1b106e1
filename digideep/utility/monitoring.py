"""A lightweight monitor: named values summarised as count, mean, std, min and max.

Usage::

    from digideep.utility.monitoring import monitor

    monitor("/explore/train/episode_return", 123.4)   # one value
    monitor("/losses/qf_loss", losses_array)            # every element of an array
    monitor.summary()  # {"/explore/train/episode_return": {"count": 1, "mean": 123.4, ...}}
    monitor.reset()    # start the next log interval

Each name keeps running sums since the last :meth:`Monitor.reset` (the Runner resets it every log
interval), so a call costs a dict look-up and a few float operations. A name registered with
:meth:`Monitor.set_window` instead keeps its last ``window`` values across resets (episodic returns
averaged over ``test_win_size`` episodes, as in the original Digideep). Calls may come from several
threads (the CPU/GPU stats sampler runs in one).
"""

from __future__ import annotations

import math
import threading
from collections import deque

import numpy as np

__all__ = ["Monitor", "monitor"]


class _Running:
    """Count, sum, sum of squares, min and max of the values seen since the last reset."""

    __slots__ = ("count", "max", "min", "sq", "total")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.sq = 0.0
        self.min = math.inf
        self.max = -math.inf

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.sq += value * value
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value

    def add_array(self, values: np.ndarray) -> None:
        if values.size == 0:
            return
        values = values.astype(np.float64, copy=False)
        self.count += values.size
        self.total += float(values.sum())
        self.sq += float(np.dot(values.ravel(), values.ravel()))
        self.min = min(self.min, float(values.min()))
        self.max = max(self.max, float(values.max()))

    def stats(self) -> dict[str, float]:
        mean = self.total / self.count
        var = max(self.sq / self.count - mean * mean, 0.0)
        return {"count": self.count, "mean": mean, "std": math.sqrt(var), "min": self.min, "max": self.max}


class _Window:
    """The last ``size`` values; survives resets."""

    __slots__ = ("values",)

    def __init__(self, size: int) -> None:
        self.values: deque[float] = deque(maxlen=size)

    def add(self, value: float) -> None:
        self.values.append(value)

    def add_array(self, values: np.ndarray) -> None:
        self.values.extend(values.astype(np.float64, copy=False).ravel().tolist())

    def stats(self) -> dict[str, float]:
        array = np.fromiter(self.values, dtype=np.float64, count=len(self.values))
        return {
            "count": array.size,
            "mean": float(array.mean()),
            "std": float(array.std()),
            "min": float(array.min()),
            "max": float(array.max()),
        }


class Monitor:
    """Named values with windowed statistics. See the module docstring."""

    def __init__(self) -> None:
        self._entries: dict[str, _Running | _Window] = {}
        self._windows: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, name: str, value: float | np.ndarray) -> None:
        """Record ``value`` (a number, or every element of an array) under ``name``."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is None:
                size = self._windows.get(name)
                entry = self._entries[name] = _Window(size) if size else _Running()
            if isinstance(value, np.ndarray):
                entry.add_array(value)
            else:
                entry.add(float(value))

    def set_window(self, name: str, size: int) -> None:
        """Keep the last ``size`` values of ``name`` across resets instead of per-interval sums."""
        if size < 1:
            raise ValueError(f"monitor window for '{name}' must be >= 1, got {size}")
        with self._lock:
            self._windows[name] = size
            self._entries.pop(name, None)

    def summary(self) -> dict[str, dict[str, float]]:
        """Statistics of every name that holds at least one value, sorted by name."""
        with self._lock:
            items = sorted(self._entries.items())
            return {name: entry.stats() for name, entry in items if _has_values(entry)}

    def window_values(self, name: str) -> list[float]:
        """The values a window of :meth:`set_window` holds now, oldest first (empty if none)."""
        with self._lock:
            entry = self._entries.get(name)
            return list(entry.values) if isinstance(entry, _Window) else []

    def reset(self) -> None:
        """Start a new interval: per-interval sums are cleared, windows are kept."""
        with self._lock:
            self._entries = {n: e for n, e in self._entries.items() if isinstance(e, _Window)}

    def state_dict(self) -> dict:
        """The windows' values and the running sums of the interval so far: a checkpoint mid-interval
        (a run stopped by a signal) resumes to the summary a run never stopped logs."""
        with self._lock:
            return {
                "windows": dict(self._windows),
                "values": {n: list(e.values) for n, e in self._entries.items() if isinstance(e, _Window)},
                "running": {
                    n: {slot: getattr(e, slot) for slot in _Running.__slots__}
                    for n, e in self._entries.items()
                    if isinstance(e, _Running)
                },
            }

    def load_state_dict(self, state: dict) -> None:
        with self._lock:
            self._windows = dict(state["windows"])
            self._entries = {}
            for name, values in state["values"].items():
                window = self._entries[name] = _Window(self._windows[name])
                window.values.extend(values)
            for name, sums in state["running"].items():
                running = self._entries[name] = _Running()
                for slot, value in sums.items():
                    setattr(running, slot, value)


def _has_values(entry: _Running | _Window) -> bool:
    return bool(entry.values) if isinstance(entry, _Window) else entry.count > 0


monitor = Monitor()
"""The process-wide monitor that the Explorer, agents and stats sampler feed."""
