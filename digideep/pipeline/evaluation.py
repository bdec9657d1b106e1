"""The evaluation protocol every run follows, and that a benchmark's cells share.

An *evaluation* is one test stage: the test explorer plays ``K`` deterministic episodes with the
train normalisers copied in. A run evaluates every ``frame_interval`` train frames (its
``test_interval`` epochs' frames) and always at its frame budget (``number_epochs`` epochs'
frames), so that its last evaluation is its score. Each evaluation is logged as the metric
``eval/return`` at step = frames: the mean undiscounted return of that evaluation's ``K``
episodes only (``explore/test/episode_return`` is a window over ``test_win_size`` episodes instead).
The protocol is also logged as three MLflow params, ``eval/frame_interval``, ``eval/episodes`` and
``eval/frame_budget``, so that a report can refuse runs that were evaluated differently.
``docs/benchmark.md`` writes the protocol down.

Intervals are given in frames but the Runner evaluates at epoch ends, so a frame interval maps
onto ``test_interval = frame_interval / (epoch_size x n_steps x num_workers)`` epochs and must be
a whole number of epochs' frames (:func:`whole_epochs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from digideep.errors import UsageError

__all__ = ["RETURN_METRIC", "EvaluationProtocol", "frames_per_epoch", "whole_epochs"]

RETURN_METRIC = "eval/return"
"""Mean undiscounted return of one evaluation's episodes, at step = train frames."""


@dataclass(frozen=True)
class EvaluationProtocol:
    """How a run is evaluated, in frames.

    Attributes:
        frame_interval: train frames between evaluations (0: only at the end).
        episodes: deterministic episodes per evaluation (``K``).
        frame_budget: train frames of the whole run; the last evaluation is made there.
    """

    frame_interval: int
    episodes: int
    frame_budget: int

    @classmethod
    def of_params(cls, params: Mapping[str, Any]) -> EvaluationProtocol | None:
        """The protocol of a params tree (None when it has no test explorer)."""
        test = params.get("explorer", {}).get("test")
        if not test:
            return None
        runner = params["runner"]
        epoch = frames_per_epoch(params)
        return cls(
            frame_interval=runner.get("test_interval", 1) * epoch,
            episodes=int(test.get("n_episodes") or 1),
            frame_budget=runner["number_epochs"] * epoch,
        )

    def mlflow_params(self) -> dict[str, str]:
        """The protocol as MLflow params (strings, as MLflow stores them)."""
        return {
            "eval/frame_interval": str(self.frame_interval),
            "eval/episodes": str(self.episodes),
            "eval/frame_budget": str(self.frame_budget),
        }


def frames_per_epoch(params: Mapping[str, Any]) -> int:
    """Train frames of one epoch: ``epoch_size`` iterations of ``n_steps`` steps of every worker."""
    train = params["explorer"]["train"]
    return params["runner"]["epoch_size"] * train.get("n_steps", 0) * train.get("num_workers", 1)


def whole_epochs(frames: int, epoch_frames: int, what: str) -> int:
    """``frames`` in epochs of ``epoch_frames`` frames each.

    Raises:
        UsageError: ``frames`` is not a positive whole number of epochs (one line naming ``what``).
    """
    if frames <= 0 or frames % epoch_frames:
        raise UsageError(
            f"{what} ({frames} frames) is not a whole number of epochs of {epoch_frames} frames "
            f"(epoch_size x n_steps x num_workers); give a positive multiple of {epoch_frames}"
        )
    return frames // epoch_frames
