"""What the Runner reports: metrics from the Monitor and Profiler, and the progress line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from digideep.tracking.naming import metrics_from_summary

if TYPE_CHECKING:
    from digideep.pipeline.runner import Runner

__all__ = ["format_duration", "metrics_from_summaries", "progress_line"]


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


def progress_line(runner: Runner, metrics: dict[str, float]) -> str:
    """One readable line: epoch, frames, episodic returns, speed and time left.

    Args:
        runner: the run.
        metrics: what :meth:`Runner.log` computed (``explore/<mode>/episode_return``,
            ``charts/frames_per_second``).
    """
    total, iterations = runner.number_epochs, runner.counters.iteration
    epoch = f"epoch {runner.epoch}/{total}"
    if iterations % runner.epoch_size:
        epoch += f" (iteration {iterations % runner.epoch_size}/{runner.epoch_size})"
    parts = [epoch, f"frames {runner.counters.frames:,}"]
    for mode in ("train", "test"):
        value = metrics.get(f"explore/{mode}/episode_return")
        if value is not None:
            parts.append(f"{mode} return {value:.1f}")
    parts.append(f"{metrics.get('charts/frames_per_second', 0.0):,.0f} frames/s")
    left = total * runner.epoch_size - iterations
    if iterations and left > 0:
        parts.append(f"left ~{format_duration(runner._wall_time_now() / iterations * left)}")
    return " | ".join(parts)


def format_duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s"
