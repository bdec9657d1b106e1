"""The report's figures, drawn with rliable's own plotting functions and returned as PNG bytes.

Each function takes the numbers :mod:`digideep.report.statistics` computed and returns the PNG
file's bytes, so that the CLI can write them atomically and the HTML page can inline them.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never a window

import matplotlib.pyplot as plt
import numpy as np
from rliable import plot_utils

from digideep.report.statistics import AGGREGATES, Interval

__all__ = ["aggregates_png", "improvement_png", "profile_png", "sample_efficiency_png"]

DPI = 110


def aggregates_png(aggregates: Mapping[str, Mapping[str, Interval]], xlabel: str) -> bytes:
    """IQM, mean, median and optimality gap of each group, with their 95 % intervals."""
    groups = list(aggregates)
    points = {g: np.array([aggregates[g][name].point for name in AGGREGATES]) for g in groups}
    bands = {
        g: np.array([[aggregates[g][n].low for n in AGGREGATES], [aggregates[g][n].high for n in AGGREGATES]])
        for g in groups
    }
    fig, _ = plot_utils.plot_interval_estimates(
        points,
        bands,
        metric_names=list(AGGREGATES),
        algorithms=groups,
        xlabel=xlabel,
        max_ticks=3,
        xlabel_y_coordinate=-0.25 - 0.7 / len(groups),  # below the ticks however many rows
    )
    return _png(fig)


def profile_png(
    profiles: Mapping[str, np.ndarray], bands: Mapping[str, np.ndarray], taus: np.ndarray, xlabel: str
) -> bytes:
    """Performance profiles: the fraction of runs scoring above each threshold, with bands."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    plot_utils.plot_performance_profiles(
        dict(profiles), taus, performance_profile_cis=dict(bands), xlabel=xlabel, ax=ax, legend=False
    )
    _legend_outside(ax)
    return _png(fig)


def sample_efficiency_png(
    frames: np.ndarray,
    iqm: Mapping[str, np.ndarray],
    bands: Mapping[str, np.ndarray],
    ylabel: str,
) -> bytes:
    """IQM of the score against training frames, with 95 % bands."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    plot_utils.plot_sample_efficiency_curve(
        frames,
        dict(iqm),
        dict(bands),
        algorithms=list(iqm),
        xlabel="Training frames",
        ylabel=ylabel,
        ax=ax,
        labelsize="large",
        ticklabelsize="medium",
    )
    _legend_outside(ax)
    return _png(fig)


def improvement_png(pairs: Sequence[tuple[str, str, Interval]]) -> bytes:
    """P(X > Y) for each compared pair, with its 95 % interval."""
    separator = " vs "
    points = {f"{x}{separator}{y}": p.point for x, y, p in pairs}
    bands = {f"{x}{separator}{y}": np.array([[p.low], [p.high]]) for x, y, p in pairs}
    fig = plot_utils.plot_probability_of_improvement(
        points,
        bands,
        pair_separator=separator,
        figsize=(6, 1 + 0.6 * len(pairs)),
        xticks=[0.0, 0.25, 0.5, 0.75, 1.0],
    )
    return _png(fig)


def _legend_outside(ax: Any) -> None:
    """The legend right of the axes, where it covers no curve (the PNG's tight box takes it in)."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize="small")


def _png(fig: object) -> bytes:
    figure = getattr(fig, "figure", fig)  # rliable returns an Axes from some functions
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()
