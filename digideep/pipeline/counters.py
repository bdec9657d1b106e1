"""A run's progress counters (what both checkpoint files hold besides the states) and its wall clock."""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, fields
from typing import Any

from digideep.errors import UsageError

__all__ = ["Counters", "WallClock"]


@dataclass
class Counters:
    """Progress of a run; saved in both checkpoint files and restored on resume."""

    iteration: int = 0  # iterations completed
    frames: int = 0  # train transitions collected (steps x workers)
    wall_time: float = 0.0  # seconds spent training, summed over resumes
    last_log_frames: int = 0  # frames at the last log stage (for steps per second)
    best_test_return: float = -math.inf  # best mean test return so far
    best_checkpoint: int = -1  # iteration of the checkpoint holding that return (-1: none)
    last_checkpoint: int = -1  # iteration of the newest checkpoint (-1: none)
    last_test_return: float = math.nan  # mean test return of the latest test (NaN: none yet)

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> Counters:
        """Counters from a checkpoint, which holds every field.

        Raises:
            UsageError: ``saved`` holds a field these counters do not know, or lacks one (a
                checkpoint of another digideep version).
        """
        known = {f.name for f in fields(cls)}
        unknown, missing = sorted(set(saved) - known), sorted(known - set(saved))
        if unknown or missing:
            what = f"{unknown} are unknown to" if unknown else f"{missing} are missing for"
            raise UsageError(
                f"checkpoint counters {what} this digideep version; "
                "resume it with the version that wrote it, or start a new session"
            )
        return cls(**saved)

    def state_dict(self) -> dict[str, Any]:
        """The counters as a plain dict (``runner.json`` and ``states.pt``)."""
        return asdict(self)

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Take the counters of a checkpoint in place (:meth:`from_dict`'s checks)."""
        loaded = Counters.from_dict(saved)
        for field in fields(self):
            setattr(self, field.name, getattr(loaded, field.name))

    def record_checkpoint(self) -> None:
        """Mark the current iteration as the newest checkpoint's, and as the best one's when the
        latest test return beats every earlier one."""
        if not math.isnan(self.last_test_return) and self.last_test_return > self.best_test_return:
            self.best_test_return = self.last_test_return
            self.best_checkpoint = self.iteration
        self.last_checkpoint = self.iteration


class WallClock:
    """The seconds a run spends training, summed over its sessions into ``counters.wall_time``.

    Args:
        counters: the run's counters; :meth:`account` adds the time since :meth:`start` to them.
    """

    def __init__(self, counters: Counters) -> None:
        self.counters = counters
        self._start: float | None = None

    def start(self) -> None:
        """Start counting (training begins)."""
        self._start = time.perf_counter()

    def now(self) -> float:
        """The run's wall time so far: what the counters hold plus the time since the last account."""
        running = time.perf_counter() - self._start if self._start is not None else 0.0
        return self.counters.wall_time + running

    def account(self) -> None:
        """Add the time since the last account (or :meth:`start`) to ``counters.wall_time``."""
        if self._start is not None:
            now = time.perf_counter()
            self.counters.wall_time += now - self._start
            self._start = now
