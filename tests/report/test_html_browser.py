"""The HTML report shows its figures in a real browser (headless Chromium), from the one file alone."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest
from mlflow import MlflowClient

from digideep.main import cli
from tests.report.runs import linear_curve, make_benchmark

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)")


def _screenshot(page: Path, png: Path) -> np.ndarray:
    """Chromium's rendering of ``page``: ``(height, width, channels) uint8``."""
    subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",  # CI runs as root
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1200,4000",
            f"--screenshot={png}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return iio.imread(png)


def _coloured_pixels(image: np.ndarray) -> int:
    """Pixels with a clear hue: the figures' bars, bands and curves (text is black or grey)."""
    rgb = image[..., :3].astype(int)
    return int(((rgb.max(axis=-1) - rgb.min(axis=-1)) > 60).sum())


def test_the_html_report_shows_its_figures_in_chromium(mlflow_uri: str, tmp_path: Path) -> None:
    final = {("params.pendulum_sac", "Pendulum-v1"): -400.0, ("params.pendulum_td3", "Pendulum-v1"): -300.0}
    cells = [(a, e, s) for (a, e) in final for s in range(3)]
    name, _ = make_benchmark(
        MlflowClient(mlflow_uri), cells, linear_curve(final), artifacts=tmp_path / "artifacts"
    )
    out = tmp_path / "report"
    args = ["--benchmark", name, "--compare", "params.pendulum_sac", "params.pendulum_td3"]
    assert cli(["report", "--tracking-uri", mlflow_uri, "--out", str(out), "--reps", "200", *args]) == 0
    page = out / "report.html"
    (out / "figures").mkdir()
    for png in out.glob("*.png"):
        png.rename(out / "figures" / png.name)  # the page must not need them: its figures are inlined

    shot = _screenshot(page, tmp_path / "shot.png")
    assert shot.shape[0] >= 1000 and shot.shape[1] >= 1000
    bare = tmp_path / "bare.html"  # the same page without its figures
    bare.write_text(re.sub(r"<img [^>]*>", "", page.read_text()))
    without = _screenshot(bare, tmp_path / "bare.png")
    assert (
        _coloured_pixels(shot) > _coloured_pixels(without) + 5_000
    )  # about 15,000 with the figures, 0 without
