"""What the Runner reports: metrics from the Monitor and Profiler, the progress line and bar fields."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from digideep.tracking.naming import metrics_from_summary

__all__ = ["Progress", "metrics_from_summaries", "progress_fields", "progress_line"]


@dataclass(frozen=True)
class Progress:
    """Where a run stands: the figures the progress line and bar show (``Runner.progress()``).

    Attributes:
        epoch: epochs completed; number_epochs: epochs to train.
        iteration: iterations completed; epoch_size: iterations per epoch.
        frames: train frames collected.
        wall_time: seconds spent training, summed over all the run's sessions (resumes included).
    """

    epoch: int
    number_epochs: int
    iteration: int
    epoch_size: int
    frames: int
    wall_time: float


def metrics_from_summaries(
    summary: dict[str, dict[str, float]], timers: dict[str, dict[str, float]]
) -> dict[str, float]:
    """Flatten Monitor and Profiler summaries into ``{name: value}`` metrics.

    Every Monitor name gives its mean under the plain name (``explore/train/episode_return``);
    episode returns add ``_min`` and ``_max``. Profiler timers give the seconds spent per stage since
    the last log, ``time/<stage>``.
    """
    returns = {name: stats for name, stats in summary.items() if name.endswith("episode_return")}
    metrics = metrics_from_summary(summary, ("mean",))
    metrics.update(metrics_from_summary(returns, ("mean", "min", "max")))
    metrics.update(metrics_from_summary(timers, ("total",), prefix="time"))
    return metrics


def progress_line(progress: Progress, metrics: dict[str, float]) -> str:
    """The per-epoch log line: epoch, frames, episodic returns, speed and time left.

    Kept beside the rich bar (:class:`~digideep.utility.progress.ProgressBar`): it is the progress
    report where stderr is no terminal, and its time left comes from the run's wall time over all
    its sessions, which survives a resume (the bar estimates from its own recent speed).

    Args:
        progress: where the run stands.
        metrics: what :meth:`Runner.log` computed (``explore/<mode>/episode_return``,
            ``charts/frames_per_second``).
    """
    fields = progress_fields(progress, metrics)
    iterations, epoch_size = progress.iteration, progress.epoch_size
    epoch = f"epoch {fields['epoch']}"
    if iterations % epoch_size:
        epoch += f" (iteration {iterations % epoch_size}/{epoch_size})"
    parts = [epoch, f"frames {fields['frames']:,}"]
    parts += [f"{mode} return {fields[mode]:.1f}" for mode in ("train", "test") if mode in fields]
    parts.append(f"{fields['fps']:,.0f} frames/s")
    left = progress.number_epochs * epoch_size - iterations
    if iterations and left > 0:
        parts.append(f"left ~{timedelta(seconds=int(progress.wall_time / iterations * left))}")
    return " | ".join(parts)


def progress_fields(progress: Progress, metrics: dict[str, float]) -> dict[str, Any]:
    """``epoch`` ("3/20"), ``frames``, ``fps`` and, where ``metrics`` has them, ``train``/``test`` returns."""
    returns = {
        mode: value
        for mode in ("train", "test")
        if (value := metrics.get(f"explore/{mode}/episode_return")) is not None
    }
    fps = metrics.get("charts/frames_per_second", 0.0)
    return {
        "epoch": f"{progress.epoch}/{progress.number_epochs}",
        "frames": progress.frames,
        "fps": fps,
        **returns,
    }
