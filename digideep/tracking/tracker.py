"""Open the MLflow tracker of a session: new run, or the session's own run again on resume.

The run id is kept in the session's ``session.json`` (``mlflow_run_id``), so a resumed session
(``digideep resume``, or a Prefect retry) reopens the same MLflow run and, since the tracker skips
steps already logged, no metric step appears twice. The embedded store lives beside the sessions
folder: ``data/sessions`` -> ``data/mlflow.db`` and ``data/mlartifacts``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlflow import MlflowClient

from digideep.pipeline.session import Session
from digideep.tracking.mlflow_logger import MlflowTracker
from digideep.tracking.naming import experiment_name

__all__ = ["log_videos", "open_tracker"]

log = logging.getLogger(__name__)


def open_tracker(
    session: Session,
    params: Mapping[str, Any],
    cpanel: Mapping[str, Any],
    tags: Mapping[str, str] | None = None,
    **options: Any,
) -> MlflowTracker:
    """Start (or reopen) the session's MLflow run and record its id in the session.

    Args:
        session: the run's session.
        params: the resolved params tree (logged flattened).
        cpanel: the cpanel (logged under ``cpanel/``; its ``experiment`` key names the experiment).
        tags: extra tags; ``prefect.flow_run_id`` and ``prefect.deployment`` become tracker tags.
        **options: :class:`MlflowTracker` keyword arguments from ``params["tracking"]["args"]``.

    Raises:
        TrackingUnavailableError: the store cannot be reached and tracking is ``required``.
    """
    info = session.info()
    tags = dict(tags or {})
    module = info.get("params_module") or "digideep"
    tracker = MlflowTracker(
        experiment_name(module, cpanel),
        session.path,
        data_root=session.path.parent.parent,
        run_id=info.get("mlflow_run_id"),
        params_module=module,
        flow_run_id=tags.pop("prefect.flow_run_id", None) or None,
        deployment=tags.pop("prefect.deployment", None) or None,
        tags=tags,
        **options,
    )
    run_id = tracker.start(dict(params), dict(cpanel))
    if run_id:
        session.update_info(mlflow_run_id=run_id, mlflow_tracking_uri=tracker.uri)
    return tracker


def log_videos(session: Session, folder: Path) -> bool:
    """Attach the MP4s in ``folder`` to the session's MLflow run, under ``videos/<folder name>``.

    Uses the client directly, so the run's status is left alone (the run may still be training).
    Returns whether they were logged; a session without a run, or a store that fails, logs a
    warning instead of failing the caller.
    """
    info = session.info()
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
