"""The ``runner`` slice of the params tree: how long a run trains, and when it tests, logs and saves."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any

from digideep.errors import UsageError

__all__ = ["RunnerSettings"]


@dataclass(frozen=True)
class RunnerSettings:
    """What the Runner reads of ``params["runner"]`` (other keys there are for other readers, such
    as ``stage_timeouts`` for the train flow).

    Attributes:
        number_epochs: epochs to train.
        epoch_size: iterations per epoch.
        test_interval: test every this many epochs (0: never).
        save_interval: checkpoint every this many epochs (0: only when training stops).
        keep_checkpoints: how many checkpoints retention keeps, besides the best one (0: all).
        max_wall_time: seconds of training after which the run stops with a checkpoint (None: no limit).
        max_iterations: iterations after which the run stops with a checkpoint (None: no limit),
            lowered by ``$DIGIDEEP_MAX_ITERATIONS``.
        seed: the seed of the run's random generators.
        stats_interval: seconds between CPU/GPU samples (0: off).
    """

    number_epochs: int
    epoch_size: int
    test_interval: int = 1
    save_interval: int = 1
    keep_checkpoints: int = 3
    max_wall_time: float | None = None
    max_iterations: int | None = None
    seed: int = 0
    stats_interval: float = 5.0

    @classmethod
    def from_params(cls, settings: dict[str, Any]) -> RunnerSettings:
        """The settings of ``params["runner"]``, defaults where it is silent.

        Raises:
            UsageError: ``$DIGIDEEP_MAX_ITERATIONS`` is set but not a positive integer.
        """
        given = {field.name: settings[field.name] for field in fields(cls) if field.name in settings}
        given["max_iterations"] = _iteration_cap(given.get("max_iterations"))
        for required in ("number_epochs", "epoch_size"):  # no default: a KeyError names the missing one
            given[required] = settings[required]
        return cls(**given)


def _iteration_cap(max_iterations: int | None) -> int | None:
    """``max_iterations`` from params, lowered by ``$DIGIDEEP_MAX_ITERATIONS`` when that is set.

    The variable smoke-tests a parameter file (``DIGIDEEP_MAX_ITERATIONS=1 digideep train ...``):
    the run stops after that many iterations with a checkpoint, as at any limit.
    """
    cap = os.environ.get("DIGIDEEP_MAX_ITERATIONS")
    if not cap:
        return max_iterations
    if not cap.isdigit() or int(cap) < 1:
        raise UsageError(f"DIGIDEEP_MAX_ITERATIONS must be a positive integer, got '{cap}'")
    return int(cap) if max_iterations is None else min(int(cap), max_iterations)
