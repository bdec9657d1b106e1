"""Open the MLflow tracker of a session: new run, or the session's own run again on resume.

The run id is kept in the session's ``session.json`` (``mlflow_run_id``), so a resumed session
(``digideep resume``, or a Prefect retry) reopens the same MLflow run and, since the tracker skips
steps already logged, no metric step appears twice. The embedded store lives beside the sessions
folder: ``data/sessions`` -> ``data/mlflow.db`` and ``data/mlartifacts``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from digideep.pipeline.session import Session
from digideep.tracking.mlflow_logger import MlflowTracker
from digideep.tracking.naming import experiment_name

__all__ = ["open_tracker"]


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
