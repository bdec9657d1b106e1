"""What a run reports: metrics from the Monitor and Profiler, the progress line and bar fields.

:class:`Reporter` makes the metrics of the Runner's ``log`` stage (appended to the session's metrics
journal, on disk first) and the figures of the progress line and bar between logs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from digideep.pipeline.counters import Counters, WallClock
from digideep.pipeline.evaluation import RETURN_METRIC
from digideep.tracking.journal import MetricsJournal
from digideep.tracking.naming import metrics_from_summary
from digideep.utility.monitoring import Monitor, monitor
from digideep.utility.profiling import profiler

__all__ = ["Progress", "Reporter", "metrics_from_summaries", "progress_fields", "progress_line"]


@dataclass(frozen=True)
class Progress:
    """Where a run stands: the figures the progress line and bar show (:meth:`Reporter.progress`).

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


class Reporter:
    """The metrics of a run's log stage and its progress figures.

    Args:
        counters: the run's counters (``frames``, ``iteration``; ``last_log_frames`` is set here).
        monitor: the Runner's own Monitor, summarised with the process-wide ``monitor``.
        journal: the session's metrics journal, or None (nothing written).
        clock: the run's wall clock (for the time left).
        number_epochs: epochs to train; epoch_size: iterations per epoch.
    """

    def __init__(
        self,
        counters: Counters,
        monitor: Monitor,
        journal: MetricsJournal | None,
        clock: WallClock,
        *,
        number_epochs: int,
        epoch_size: int,
    ) -> None:
        self.counters = counters
        self.monitor = monitor
        self.journal = journal
        self.clock = clock
        self.number_epochs = number_epochs
        self.epoch_size = epoch_size
        self._log_start = time.perf_counter()

    def metrics(self, evaluation: float | None) -> dict[str, float]:
        """This log's metrics: the Monitors and the Profiler summarised since the last log, the speed,
        epoch and iteration, and ``evaluation`` (the epoch's test mean, :data:`RETURN_METRIC`) when
        there is one; appended to the journal at the current frame count."""
        summary = {**monitor.summary(), **self.monitor.summary()}  # the process-wide one: ad-hoc values
        metrics = metrics_from_summaries(summary, profiler.summary())
        metrics["charts/frames_per_second"] = self.frames_per_second()
        self._log_start = time.perf_counter()
        self.counters.last_log_frames = self.counters.frames
        metrics["charts/epoch"] = float(self.counters.iteration // self.epoch_size)
        metrics["charts/iteration"] = float(self.counters.iteration)
        if evaluation is not None:  # this epoch's evaluation alone, unlike the windowed test return
            metrics[RETURN_METRIC] = evaluation
        if self.journal is not None:  # on disk first; the tracker sends what the journal holds
            self.journal.append(self.counters.frames, metrics)
        return metrics

    def reset(self) -> None:
        """Start the next log's interval: both Monitors and the Profiler emptied."""
        self.monitor.reset()
        monitor.reset()
        profiler.reset()

    def frames_per_second(self) -> float:
        """Train frames per second since the last log."""
        elapsed = max(time.perf_counter() - self._log_start, 1e-9)
        return (self.counters.frames - self.counters.last_log_frames) / elapsed

    def progress(self) -> Progress:
        """Where the run stands, for the progress line and bar."""
        return Progress(
            epoch=self.counters.iteration // self.epoch_size,
            number_epochs=self.number_epochs,
            iteration=self.counters.iteration,
            epoch_size=self.epoch_size,
            frames=self.counters.frames,
            wall_time=self.clock.now(),
        )

    def status_fields(self) -> dict[str, Any]:
        """The progress bar's fields between logs: returns so far this interval, speed since the last log."""
        summary = self.monitor.summary()
        metrics = {
            f"explore/{mode}/episode_return": summary[name]["mean"]
            for mode in ("train", "test")
            if (name := f"/explore/{mode}/episode_return") in summary
        }
        metrics["charts/frames_per_second"] = self.frames_per_second()
        return progress_fields(self.progress(), metrics)
