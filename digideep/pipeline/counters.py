"""A run's progress counters: what both checkpoint files hold besides the states."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from digideep.errors import UsageError

__all__ = ["Counters"]


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
        """Counters from a checkpoint; fields added since it was written take their defaults.

        Raises:
            UsageError: ``saved`` holds a field these counters do not know (a newer digideep's checkpoint).
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(saved) - known)
        if unknown:
            raise UsageError(
                f"checkpoint counters {unknown} are unknown to this digideep version; "
                "resume it with the version that wrote it"
            )
        return cls(**saved)
