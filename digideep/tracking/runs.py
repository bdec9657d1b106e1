"""Reading runs back from MLflow: the ``digideep runs`` table and learning-curve comparisons.

The table shows the train return (``last``, ``best``) and the deterministic test return
(``test_last``, ``test_best``); the trials of a tune study (``flows/tune.py``) are listed under their
study's parent run. The command line around these functions is :mod:`digideep.cli.runs`.

The functions read MLflow through its client API only. The store is found as the tracker finds it
(``--tracking-uri``, else ``MLFLOW_TRACKING_URI``, else ``sqlite:///data/mlflow.db``), see
:func:`~digideep.tracking.naming.resolve_tracking_uri`; ``--session-path P`` reads the embedded store
of runs trained with ``--session-path P`` (:func:`~digideep.tracking.naming.data_root_of`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mlflow import MlflowClient

from digideep.errors import UsageError
from digideep.tracking.failures import http_limits, one_line
from digideep.tracking.naming import (
    DEFAULT_CURVE_METRICS,
    DEFAULT_DATA_ROOT,
    TEST_RETURN_METRIC,
    TRAIN_RETURN_METRIC,
    mlflow_key,
    sqlite_path,
    tracking_uri_of,
)
from digideep.tracking.plots import plot_learning_curves

__all__ = [
    "compare_runs",
    "differing_params",
    "format_table",
    "list_runs",
    "open_client",
    "write_learning_curve",
    "write_run_curves",
]

PARENT_TAG = "mlflow.parentRunId"
STUDY_TAG = "optuna.study"
MAX_PARAM_COLUMNS = 8


def open_client(tracking_uri: str | None = None, data_root: str | Path = DEFAULT_DATA_ROOT) -> MlflowClient:
    """A client of the store the tracker writes to; fails with one line when there is none.

    Raises:
        UsageError: the embedded store does not exist yet, or the server does not answer.
    """
    uri = tracking_uri_of(tracking_uri, data_root)
    db_path = sqlite_path(uri)
    if db_path is not None and not db_path.exists():
        raise UsageError(
            f"no MLflow store at {uri}; train a run first, or pass the --session-path the runs "
            "trained with (or --tracking-uri)"
        )
    client = MlflowClient(uri)
    try:
        with http_limits(retries=0, timeout=5):
            client.search_experiments(max_results=1)
    except Exception as error:
        raise UsageError(f"MLflow tracking at {uri} is not available ({one_line(error)})") from None
    return client


def differing_params(params: Sequence[Mapping[str, str]]) -> list[str]:
    """Param keys whose value is not the same in every run (a missing key counts as a value).

    ``cpanel/...`` keys come first. A params-tree key whose values across the runs equal those of
    an earlier listed key is left out (``agents/sac/args/seed`` repeats ``cpanel/seed``).
    """
    keys = sorted(set().union(*params), key=lambda k: (not k.startswith("cpanel/"), k)) if params else []
    chosen: list[str] = []
    seen: set[tuple] = set()
    for key in keys:
        values = tuple(p.get(key) for p in params)
        if len(set(values)) > 1 and values not in seen:
            chosen.append(key)
            seen.add(values)
    return chosen


def list_runs(
    experiment: str,
    tracking_uri: str | None = None,
    metric: str = TRAIN_RETURN_METRIC,
    *,
    data_root: str | Path = DEFAULT_DATA_ROOT,
    max_runs: int = 200,
    client: MlflowClient | None = None,
) -> list[dict[str, Any]]:
    """The runs of ``experiment``, oldest first, as table rows.

    Returns:
        One dict per run with keys, in column order: ``run_id``, ``name``, ``status``, the
        differing params (:func:`differing_params`), ``steps`` (highest step of ``metric``),
        ``last`` and ``best`` (last and highest value of ``metric``), ``test_last`` and
        ``test_best`` (the same of the deterministic test return) and ``wall_time`` (seconds from
        start to end, or to now while running). Missing figures are None. Nested runs (the trials
        of a tune study) follow their parent, their names indented.

    Raises:
        UsageError: the store is unreachable or has no such experiment.
    """
    client = client or open_client(tracking_uri, data_root)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        names = sorted(e.name for e in client.search_experiments())
        raise UsageError(f"no experiment '{experiment}' at {client.tracking_uri}; known experiments: {names}")
    runs = client.search_runs(
        [found.experiment_id], order_by=["attributes.start_time ASC"], max_results=max_runs
    )
    runs = _nested_order(runs)
    key = mlflow_key(metric)
    columns = differing_params(
        [run.data.params for run in runs if PARENT_TAG in run.data.tags or not _is_study(run)]
    )
    rows = []
    for run in runs:
        history = _history(client, run, key)
        tests = _history(client, run, mlflow_key(TEST_RETURN_METRIC))
        end = run.info.end_time or int(time.time() * 1000)
        name = run.info.run_name
        if PARENT_TAG in run.data.tags:
            trial = run.data.tags.get("optuna.trial")
            name = f"  trial {trial}: {name}" if trial else f"  {name}"
        row: dict[str, Any] = {"run_id": run.info.run_id, "name": name, "status": run.info.status}
        row.update({column: run.data.params.get(column) for column in columns})
        row["steps"] = history[-1].step if history else None
        row["last"] = history[-1].value if history else None
        row["best"] = max(m.value for m in history) if history else None
        row["test_last"] = tests[-1].value if tests else None
        row["test_best"] = max(m.value for m in tests) if tests else None
        row["wall_time"] = (end - run.info.start_time) / 1000 if run.info.start_time else None
        rows.append(row)
    return rows


def _history(client: MlflowClient, run: Any, key: str) -> list[Any]:
    history = client.get_metric_history(run.info.run_id, key) if key in run.data.metrics else []
    return sorted(history, key=lambda m: (m.step, m.timestamp))


def _is_study(run: Any) -> bool:
    return run.data.tags.get("digideep.kind") == "study"


def _nested_order(runs: Sequence[Any]) -> list[Any]:
    """``runs`` (oldest first) with every nested run moved right after its parent."""
    ids = {run.info.run_id for run in runs}
    children: dict[str, list[Any]] = {}
    for run in runs:
        parent = run.data.tags.get(PARENT_TAG)
        if parent in ids:
            children.setdefault(parent, []).append(run)
    ordered = []
    for run in runs:
        if run.data.tags.get(PARENT_TAG) not in ids:
            ordered.append(run)
            ordered.extend(children.get(run.info.run_id, []))
    return ordered


def format_table(rows: Sequence[Mapping[str, Any]], max_param_columns: int = MAX_PARAM_COLUMNS) -> str:
    """Rows of :func:`list_runs` as an aligned text table (wall time as h:mm:ss)."""
    if not rows:
        return "(no runs)"
    columns = list(rows[0])
    fixed = {"run_id", "name", "status", "steps", "last", "best", "test_last", "test_best", "wall_time"}
    params = [c for c in columns if c not in fixed]
    note = ""
    if len(params) > max_param_columns:
        note = f"\n(+{len(params) - max_param_columns} more differing params not shown)"
        columns = [c for c in columns if c in fixed or c in params[:max_param_columns]]
    cells = [[_cell(column, row.get(column)) for column in columns] for row in rows]
    widths = [max(len(column), *(len(line[i]) for line in cells)) for i, column in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in cells]
    return "\n".join(line.rstrip() for line in lines) + note


def _cell(column: str, value: Any) -> str:
    if value is None:
        return "-"
    if column == "wall_time":
        seconds = int(value)
        return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
    if isinstance(value, float):
        return f"{value:.4g}"
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def write_run_curves(
    client: MlflowClient, run_id: str, metrics: Sequence[str], out_png: str | Path
) -> Path | None:
    """Plot the histories of ``metrics`` of one run into ``out_png``; None when it has none of them."""
    run = client.get_run(run_id)
    curves = {}
    for metric in metrics:
        key = mlflow_key(metric)
        if key in run.data.metrics:
            history = client.get_metric_history(run_id, key)
            curves[key] = ([m.step for m in history], [m.value for m in history])
    if not curves:
        return None
    title = f"{run.info.run_name or run_id} ({run_id[:8]})"
    ylabel = "episode return" if all(k.endswith("episode_return") for k in curves) else "value"
    return plot_learning_curves(curves, out_png, title=title, ylabel=ylabel)


def write_learning_curve(
    run_id: str,
    out_png: str | Path,
    metrics: Sequence[str] = DEFAULT_CURVE_METRICS,
    tracking_uri: str | None = None,
    *,
    data_root: str | Path = DEFAULT_DATA_ROOT,
) -> Path | None:
    """The learning-curve PNG of one run (train and test returns by default), e.g. after training."""
    return write_run_curves(open_client(tracking_uri, data_root), run_id, metrics, out_png)


def compare_runs(
    run_ids: Sequence[str],
    metric: str = TEST_RETURN_METRIC,
    out_png: str | Path = "runs_compare.png",
    tracking_uri: str | None = None,
    *,
    data_root: str | Path = DEFAULT_DATA_ROOT,
    client: MlflowClient | None = None,
) -> Path:
    """Write a PNG with one learning curve (``metric`` against environment frames) per run.

    Raises:
        UsageError: no run ids, a run that does not exist, or no run that has ``metric``.
    """
    if not run_ids:
        raise UsageError("runs compare: give at least one run id (listed by 'digideep runs')")
    client = client or open_client(tracking_uri, data_root)
    key = mlflow_key(metric)
    runs = [run for name in run_ids for run in _runs_named(client, name)]
    columns = differing_params([run.data.params for run in runs])[:3]
    curves = {}
    for run in runs:
        history = client.get_metric_history(run.info.run_id, key)
        label = " ".join(
            [f"{run.info.run_name or 'run'} ({run.info.run_id[:8]})"]
            + [f"{c.removeprefix('cpanel/')}={_cell(c, run.data.params.get(c))}" for c in columns]
        )
        curves[label] = ([m.step for m in history], [m.value for m in history])
    if not any(len(steps) for steps, _ in curves.values()):
        raise UsageError(f"none of the runs has metric '{key}'; pick one with --metric")
    return plot_learning_curves(curves, out_png, title=key, ylabel=key)


def _runs_named(client: MlflowClient, name: str) -> list[Any]:
    """The run ``name``; else every run of the experiment ``name``; else the trials of the study ``name``.

    Raises:
        UsageError: none of the three exists.
    """
    try:
        return [client.get_run(name)]
    except Exception:
        pass
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])
        return [run for run in runs if not _is_study(run)]
    experiments = [e.experiment_id for e in client.search_experiments()]
    trials = client.search_runs(
        experiments, filter_string=f"tags.`{STUDY_TAG}` = '{name}'", order_by=["attributes.start_time ASC"]
    )
    trials = [run for run in trials if not _is_study(run)]
    if trials:
        return trials
    raise UsageError(
        f"no run '{name}' (nor an experiment or tune study of that name) at {client.tracking_uri}; "
        "list runs with 'digideep runs'"
    )
