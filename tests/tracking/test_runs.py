"""Listing and comparing tracked runs (``digideep runs``), against both kinds of store."""

from __future__ import annotations

import io
import os
import uuid
from pathlib import Path

import matplotlib.image
import pytest

from digideep.cli.runs import main_runs
from digideep.errors import UsageError
from digideep.tracking.mlflow_logger import MlflowTracker
from digideep.tracking.runs import (
    compare_runs,
    differing_params,
    format_table,
    list_runs,
    write_learning_curve,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _two_runs(uri: str, make_params) -> tuple[str, list[str]]:
    """Two short runs of one experiment that differ in their learning rate."""
    experiment = f"runs-{uuid.uuid4().hex[:8]}"
    run_ids = []
    for lr, scale in ((1e-3, 1.0), (3e-4, 2.0)):
        params, cpanel = make_params(lr=lr)
        tracker = MlflowTracker(experiment, tracking_uri=uri, run_name=f"lr-{lr}")
        run_ids.append(tracker.start(params, cpanel))
        with tracker:
            for step in range(1, 5):
                returns = {"/explore/train/episode_return": scale * (step if step != 3 else 10)}
                tracker.log_metrics(
                    {**returns, "/explore/test/episode_return": scale * step}, step=100 * step
                )
    return experiment, run_ids


def test_runs_are_listed_with_their_differing_params(store: str, make_params) -> None:
    experiment, run_ids = _two_runs(store, make_params)
    rows = list_runs(experiment, tracking_uri=store)
    assert [row["run_id"] for row in rows] == run_ids
    assert list(rows[0]) == [
        "run_id",
        "name",
        "status",
        "cpanel/lr",
        "steps",
        "last",
        "best",
        "test_last",
        "test_best",
        "wall_time",
    ]
    assert [(row["test_last"], row["test_best"]) for row in rows] == [(4.0, 4.0), (8.0, 8.0)]
    assert [row["cpanel/lr"] for row in rows] == ["0.001", "0.0003"]
    assert [(row["steps"], row["last"], row["best"]) for row in rows] == [(400, 4.0, 10.0), (400, 8.0, 20.0)]
    assert all(row["status"] == "FINISHED" and row["wall_time"] >= 0 for row in rows)
    table = format_table(rows)
    assert all(run_id in table for run_id in run_ids)
    assert "cpanel/lr" in table and "0.0003" in table and "agents/sac/args/lr" not in table

    out = io.StringIO()
    assert main_runs(["--tracking-uri", store], out=out) == 0
    assert f"experiment {experiment}" in out.getvalue() and run_ids[1] in out.getvalue()


def test_compare_writes_a_png_of_learning_curves(store: str, make_params, tmp_path: Path) -> None:
    _, run_ids = _two_runs(store, make_params)
    png = compare_runs(run_ids, "/explore/train/episode_return", tmp_path / "compare.png", tracking_uri=store)
    assert png.read_bytes()[:8] == PNG_SIGNATURE
    image = matplotlib.image.imread(png)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100

    out = io.StringIO()
    argv = [
        "compare",
        *run_ids,
        "--metric",
        "explore/test/episode_return",
        "--out",
        str(tmp_path / "cli.png"),
    ]
    assert main_runs([*argv, "--tracking-uri", store], out=out) == 0
    assert (tmp_path / "cli.png").read_bytes()[:8] == PNG_SIGNATURE

    curve = write_learning_curve(run_ids[0], tmp_path / "one.png", tracking_uri=store)
    assert curve is not None and curve.read_bytes()[:8] == PNG_SIGNATURE


def test_compare_plots_the_test_return_under_the_data_folder_readable_by_others(
    store: str, make_params, tmp_path: Path, monkeypatch
) -> None:
    """Its defaults: the test return (the score a run is judged by), a PNG beside the store rather
    than in the current folder, with the permissions of any new file (it was owner-only)."""
    _, run_ids = _two_runs(store, make_params)
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    assert main_runs(["compare", *run_ids, "--tracking-uri", store, "--data-root", "here"], out=out) == 0
    png = tmp_path / "here" / "runs_compare.png"
    assert out.getvalue() == f"wrote {Path('here') / 'runs_compare.png'}\n"
    assert png.read_bytes()[:8] == PNG_SIGNATURE and list(tmp_path.glob("*.png")) == []
    assert png.stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_bad_input_is_one_line(sqlite_uri: str, make_params, tmp_path: Path, unused_uri: str) -> None:
    _, run_ids = _two_runs(sqlite_uri, make_params)
    with pytest.raises(UsageError, match="no run 'nope'"):
        compare_runs([run_ids[0], "nope"], tracking_uri=sqlite_uri, out_png=tmp_path / "x.png")
    with pytest.raises(UsageError, match="none of the runs has metric 'no/such'"):
        compare_runs(run_ids, "no/such", tmp_path / "x.png", tracking_uri=sqlite_uri)
    with pytest.raises(UsageError, match="no experiment 'missing'"):
        list_runs("missing", tracking_uri=sqlite_uri)
    with pytest.raises(UsageError, match="no MLflow store"):
        list_runs("e", tracking_uri=f"sqlite:///{tmp_path / 'absent.db'}")
    with pytest.raises(UsageError) as raised:
        main_runs(["--tracking-uri", unused_uri], out=io.StringIO())
    assert unused_uri in str(raised.value) and "\n" not in str(raised.value)


def test_differing_params_prefers_the_cpanel() -> None:
    runs = [
        {"cpanel/seed": "0", "agents/a/seed": "0", "env/name": "A", "same": "1"},
        {"cpanel/seed": "1", "agents/a/seed": "1", "env/name": "A", "same": "1", "extra": "x"},
    ]
    assert differing_params(runs) == ["cpanel/seed", "extra"]
    assert differing_params([runs[0]]) == []
    assert format_table([]) == "(no runs)"
