"""Learning-curve PNGs, drawn with matplotlib's Agg canvas (no display, no pyplot global state)."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from digideep.storage.files import atomic_write_bytes

__all__ = ["plot_learning_curves"]


def plot_learning_curves(
    curves: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    out_png: str | Path,
    *,
    title: str = "",
    xlabel: str = "environment frames",
    ylabel: str = "episode return",
) -> Path:
    """Draw one line per curve and write the PNG atomically (readers never see half a file).

    Args:
        curves: ``{label: (steps, values)}``; ``steps`` and ``values`` are equally long 1-D
            sequences of numbers (``(n,)`` int64 and float64 once converted); NaN values leave gaps.
        out_png: where to write; its folder is created.
        title: figure title.
        xlabel: x-axis label.
        ylabel: y-axis label.

    Returns:
        ``out_png`` as a Path.

    Raises:
        ValueError: no curves, or a curve whose steps and values differ in length.
    """
    if not curves:
        raise ValueError("plot_learning_curves: no curves to draw; pass {label: (steps, values)}")
    out_png = Path(out_png)
    figure = Figure(figsize=(8, 4.5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for label, (steps, values) in curves.items():
        x = np.asarray(steps, dtype=np.int64)
        y = np.asarray(values, dtype=np.float64)
        if x.shape != y.shape or x.ndim != 1:
            raise ValueError(
                f"plot_learning_curves: curve '{label}' has steps of shape {x.shape} and values of shape "
                f"{y.shape}; both must be 1-D and equally long"
            )
        order = np.argsort(x, kind="stable")
        axes.plot(x[order], y[order], label=label, linewidth=1.2, marker="." if x.size < 30 else None)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    if title:
        axes.set_title(title)
    axes.grid(alpha=0.3)
    # below the axes, never over the curves: one column per label up to three
    axes.legend(
        loc="upper center", bbox_to_anchor=(0.5, -0.18), fontsize="small", ncol=min(3, len(curves)),
        frameon=False,
    )  # fmt: skip
    figure.set_size_inches(8, 4.5 + 0.25 * ((len(curves) + 2) // 3))
    figure.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    png = io.BytesIO()
    figure.savefig(png, format="png")
    atomic_write_bytes(out_png, png.getvalue())
    return out_png
