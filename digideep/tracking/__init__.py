"""MLflow tracking of training runs, and reading them back.

* :mod:`digideep.tracking.mlflow_logger`: :class:`~digideep.tracking.mlflow_logger.MlflowTracker`,
  one MLflow run per session (params, tags, batched metrics, artifacts, status, resume);
* :mod:`digideep.tracking.runs`: the ``digideep runs`` table (runs with their differing params) and
  learning-curve comparisons (its command line is :mod:`digideep.cli.runs`);
* :mod:`digideep.tracking.naming`: MLflow key and value limits, the tracking URI, params flattening;
* :mod:`digideep.tracking.journal`: the session's metrics journal, the source of truth for MLflow;
* :mod:`digideep.tracking.sender`: sends the journal to MLflow (each step once) from a background thread;
* :mod:`digideep.tracking.tracker`: opens a session's tracker; ``sync_session`` (``digideep runs sync``);
* :mod:`digideep.tracking.plots`: learning-curve PNGs.

Nothing is imported here, so that ``import digideep`` does not pay for importing MLflow.
"""
