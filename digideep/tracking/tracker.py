"""Open the MLflow tracker of a session (new run, or its own run again on resume), and sync it.

The run id is kept in the session's ``session.json`` (``mlflow_run_id``), so a resumed session
(``digideep resume``, or a Prefect retry) reopens the same MLflow run and, since the tracker sends
only what the run lacks from the session's metrics journal, no metric step appears twice. The run
carries the session's count of resumes (``resumes`` in ``session.json``, counted by
:func:`~digideep.pipeline.resuming.resume`) as the tag ``digideep.resumes``, set again each time
the run opens, and the machine of each attempt (:func:`~digideep.utility.machine.describe`) as
``digideep.machine.<resumes>``. The embedded store lives beside the sessions folder:
``data/sessions`` -> ``data/mlflow.db`` and ``data/mlartifacts``.

:func:`sync_session` finishes what a run left undone in MLflow: the journal's unsent records, the
learning curve and the run's end status. ``digideep runs sync SESSION`` and resuming a finished
session call it; it does nothing when nothing is missing.

These functions know a session only as its folder and its ``session.json`` fields (``info``); the
caller passes ``record`` (the session's ``update_info``) to keep the run's id there, so tracking
does not depend on the pipeline layer above it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mlflow import MlflowClient

from digideep.errors import UsageError
from digideep.storage.checkpoint import Folder
from digideep.tracking.failures import http_limits, one_line
from digideep.tracking.journal import JOURNAL_FILE, MetricsJournal
from digideep.tracking.mlflow_logger import MlflowTracker
from digideep.tracking.naming import data_root_of, experiment_name, resolve_tracking_uri
from digideep.tracking.sender import missing_artifacts, send_artifacts
from digideep.tracking.tags import RESUMES_FIELD, RESUMES_TAG, machine_tag
from digideep.utility.machine import describe

__all__ = ["log_videos", "open_tracker", "sync_session"]

CURVE_ARTIFACT = "plots/learning_curve.png"

log = logging.getLogger(__name__)


def open_tracker(
    session_path: Path,
    info: Mapping[str, Any],
    params: Mapping[str, Any],
    cpanel: Mapping[str, Any],
    tags: Mapping[str, str] | None = None,
    journal: MetricsJournal | None = None,
    record: Callable[..., None] | None = None,
    **options: Any,
) -> MlflowTracker:
    """Start (or reopen) the session's MLflow run and record its id with ``record``.

    A ``tracking_uri`` option naming another store than the one the session's run is in starts a
    new run there (the session's tracking moves to it).

    Args:
        session_path: the session's folder (``<data>/sessions/<name>``).
        info: the session's ``session.json`` fields (``params_module``, ``mlflow_run_id``,
            ``mlflow_tracking_uri``, ``resumes``: the run's ``digideep.resumes`` tag, 0 when absent).
        params: the resolved params tree (logged flattened).
        cpanel: the cpanel (logged under ``cpanel/``; its ``experiment`` key names the experiment).
        tags: extra tags; ``prefect.flow_run_id`` and ``prefect.deployment`` become tracker tags.
        journal: the metrics journal to send (the session's ``metrics.jsonl`` by default).
        record: called as ``record(mlflow_run_id=..., mlflow_tracking_uri=...)`` once the run has
            started (``Session.update_info``), so that a resume reopens the same run.
        **options: :class:`MlflowTracker` keyword arguments from ``params["tracking"]["args"]``.

    Raises:
        TrackingUnavailableError: the store cannot be reached and tracking is ``required``.
    """
    resumes = int(info.get(RESUMES_FIELD, 0))
    tags = {**(tags or {}), RESUMES_TAG: str(resumes), machine_tag(resumes): describe()}
    module = info.get("params_module") or "digideep"
    data_root = data_root_of(session_path.parent)  # beside the sessions folder (data/cache for a URL's)
    run_id = info.get("mlflow_run_id")
    if options.get("tracking_uri") and run_id:
        uri = resolve_tracking_uri(options["tracking_uri"], data_root)[0]
        run_id = run_id if uri == info.get("mlflow_tracking_uri") else None
    tracker = MlflowTracker(
        experiment_name(module, cpanel),
        session_path,
        data_root=data_root,
        run_id=run_id,
        journal=journal or MetricsJournal(session_path / JOURNAL_FILE),
        params_module=module,
        flow_run_id=tags.pop("prefect.flow_run_id", None) or None,
        deployment=tags.pop("prefect.deployment", None) or None,
        tags=tags,
        **options,
    )
    run_id = tracker.start(dict(params), dict(cpanel))
    if run_id and record is not None:
        record(mlflow_run_id=run_id, mlflow_tracking_uri=tracker.uri)
    return tracker


def log_videos(info: Mapping[str, Any], folder: Path) -> bool:
    """Attach the MP4s in ``folder`` to the session's MLflow run, under ``videos/<folder name>``.

    Uses the client directly, so the run's status is left alone (the run may still be training).
    Returns whether they were logged; a session without a run, or a store that fails, logs a
    warning instead of failing the caller.

    Args:
        info: the session's ``session.json`` fields (``mlflow_run_id``, ``mlflow_tracking_uri``).
        folder: the videos' folder.
    """
    run_id = info.get("mlflow_run_id")
    if not run_id:
        return False
    try:
        MlflowClient(info.get("mlflow_tracking_uri")).log_artifacts(
            run_id, str(folder), f"videos/{folder.name}"
        )
    except Exception as error:  # tracking is a side channel here: the videos are on disk either way
        log.warning("videos in %s were not logged to MLflow run %s: %s", folder, run_id, error)
        return False
    return True


def sync_session(
    session_path: Path,
    info: Mapping[str, Any],
    params: Mapping[str, Any],
    cpanel: Mapping[str, Any],
    *,
    done: bool,
    record: Callable[..., None] | None = None,
    checkpoints: Folder | None = None,
    **options: Any,
) -> str:
    """Bring the session's MLflow run up to date with the session; return what was done, in a line.

    Sends the journal's records that the run lacks (each step once, see
    :class:`~digideep.tracking.sender.JournalUploader`) and every checkpoint, and for a finished
    session its final and best models, that the run lacks (an MLflow outage during training loses
    those uploads; see :func:`~digideep.tracking.sender.missing_artifacts`). It creates the run
    first when the session has none (a run trained with tracking off) and, for a session that
    finished training, uploads the learning curve and ends the run FINISHED, only once the run
    holds all of this; an unfinished session's run ends KILLED (it is reopened RUNNING when the
    session resumes). Idempotent: a run that has everything is left alone. The caller holds the
    session's lock (no training writes the journal or checkpoints meanwhile).

    Args:
        session_path: the session's folder; info: its ``session.json`` fields.
        params: its params tree; cpanel: its cpanel (logged when a run is created).
        done: whether the session finished training (it has ``done.json``).
        record: keeps a new run's id in the session (see :func:`open_tracker`).
        checkpoints: the session's checkpoints folder (its URL for a session on object storage);
            ``session_path / "checkpoints"`` when None.
        **options: :class:`MlflowTracker` keyword arguments (``tracking_uri`` among them).

    Raises:
        UsageError: the store is unreachable, or it did not take every record and artifact.
    """
    journal = MetricsJournal(session_path / JOURNAL_FILE)
    checkpoints = session_path / "checkpoints" if checkpoints is None else checkpoints
    register_as = params.get("tracking", {}).get("register_model")
    status = "FINISHED" if done else "KILLED"
    run_id, uri = info.get("mlflow_run_id"), info.get("mlflow_tracking_uri")
    target = options.get("tracking_uri")
    same_store = not target or resolve_tracking_uri(target, data_root_of(session_path.parent))[0] == uri
    if (
        run_id
        and uri
        and same_store
        and _up_to_date(MlflowClient(uri), run_id, journal, checkpoints, status, done)
    ):
        return f"MLflow run {run_id} at {uri} holds everything of session {session_path.name}; nothing to do"
    options = {"asynchronous": False, **options}
    tracker = open_tracker(session_path, info, params, cpanel, journal=journal, record=record, **options)
    unsent = journal.unsent(tracker.run_id)
    tracker.flush(wait=True)
    left = journal.unsent(tracker.run_id)
    client = MlflowClient(tracker.uri)
    missing, lacking = [], []
    try:
        missing = missing_artifacts(client, tracker.run_id, checkpoints, done=done)
        send_artifacts(client, tracker.run_id, missing, register_as)
        lacking = [
            item.artifact for item in missing_artifacts(client, tracker.run_id, checkpoints, done=done)
        ]
    except Exception as error:  # the server went away meanwhile: the run is not whole
        log.warning("could not send the session's artifacts to %s: %s", tracker.uri, one_line(error))
        lacking = [item.artifact for item in missing] or ["its checkpoints"]
    whole = not left and not lacking
    curve = tracker.log_learning_curve() if done and whole else None
    tracker.finish(status if whole else "KILLED")
    again = f"run 'digideep runs sync {session_path.name}' again"
    if left:
        raise UsageError(
            f"MLflow at {tracker.uri} took {unsent - left} of {unsent} unsent metric records of session "
            f"{session_path.name}; the journal keeps the rest: {again}"
        )
    if lacking:
        raise UsageError(
            f"MLflow at {tracker.uri} did not take {', '.join(lacking)} of session {session_path.name}; "
            f"the session keeps them: {again}"
        )
    parts = [f"sent {tracker.sent_values} metric values ({unsent} records)"]
    if missing:
        parts.append(f"uploaded {', '.join(item.artifact for item in missing)}")
    if curve is not None:
        parts.append("uploaded the learning curve")
    return f"MLflow run {tracker.run_id} at {tracker.uri}: {', '.join(parts)}, ended {status}"


def _up_to_date(
    client: MlflowClient, run_id: str, journal: MetricsJournal, checkpoints: Folder, status: str, done: bool
) -> bool:
    """Whether the run has ended ``status``, holds the whole journal, every checkpoint (and, once
    ``done``, the models and the curve)."""
    try:
        with http_limits(retries=0, timeout=5):
            run = client.get_run(run_id)
            if run.info.status != status or journal.unsent(run_id):
                return False
            if missing_artifacts(client, run_id, checkpoints, done=done):
                return False
            return not done or CURVE_ARTIFACT in {f.path for f in client.list_artifacts(run_id, "plots")}
    except Exception as error:  # the tracker's start names the store if it is really away
        log.debug("could not read MLflow run %s: %s", run_id, one_line(error))
        return False
