"""MLflow tracking of training runs, and reading them back.

* :mod:`digideep.tracking.mlflow_logger`: :class:`~digideep.tracking.mlflow_logger.MlflowTracker`,
  one MLflow run per session (params, tags, batched metrics, artifacts, status, resume);
* :mod:`digideep.tracking.runs`: ``digideep runs`` (list runs with their differing params, compare
  learning curves, start the UI);
* :mod:`digideep.tracking.naming`: MLflow key and value limits, the tracking URI, params flattening;
* :mod:`digideep.tracking.sender`: the background sender of metric batches;
* :mod:`digideep.tracking.plots`: learning-curve PNGs.

Nothing is imported here, so that ``import digideep`` does not pay for importing MLflow.
"""
