"""The artifacts of one MLflow run: files, the checkpoints the session keeps, the learning curve.

:class:`~digideep.tracking.mlflow_logger.MlflowTracker` opens the run and hands it a
:class:`RunArtifacts`; backend failures are logged here, never raised, as everywhere in tracking.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Collection, Sequence
from pathlib import Path

from mlflow import MlflowClient
from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

from digideep.tracking.failures import one_line
from digideep.tracking.naming import DEFAULT_CURVE_METRICS

__all__ = ["CHECKPOINT_ARTIFACTS", "RunArtifacts"]

log = logging.getLogger(__name__)

CHECKPOINT_ARTIFACTS = "checkpoints"
"""The run's artifact folder of checkpoints: ``checkpoints/checkpoint-<iteration>/``."""


class RunArtifacts:
    """The artifacts of one open MLflow run.

    Args:
        client: the client of the run's tracking store.
        run_id: the run.
        uri: the tracking URI (for messages and the artifact repository).
        session_path: the session folder, where the learning curve's PNG is written (a temporary
            folder when None).
    """

    def __init__(self, client: MlflowClient, run_id: str, uri: str, session_path: Path | None) -> None:
        self._client = client
        self.run_id = run_id
        self.uri = uri
        self.session_path = session_path
        self._can_delete = True  # off once the artifact store says it cannot delete

    def log(self, path: str | Path, artifact_path: str | None = None) -> None:
        """Copy a file or a folder's contents into the run's artifacts under ``artifact_path``.

        Raises:
            ValueError: ``path`` does not exist. Backend failures are logged, never raised.
        """
        path = Path(path)
        if not path.exists():
            raise ValueError(f"log_artifacts: '{path}' does not exist; pass a file or folder the run wrote")
        try:
            if path.is_dir():
                self._client.log_artifacts(self.run_id, str(path), artifact_path)
            else:
                self._client.log_artifact(self.run_id, str(path), artifact_path)
        except Exception as error:
            log.warning("could not log artifact %s to %s: %s", path, self.uri, one_line(error))

    def log_checkpoint(self, checkpoint_path: str | Path, kept: Collection[str] | None = None) -> None:
        """Log a checkpoint folder's files under ``checkpoints/<folder name>/``; keep what the session keeps.

        Args:
            checkpoint_path: the local checkpoint folder (or a local copy of one on object storage).
            kept: the names of the checkpoint folders the session keeps after its retention
                (``checkpoint-<iteration>``); the run's other ``checkpoints/`` artifacts are deleted,
                so MLflow holds the same checkpoints as the session. None keeps every one.
        """
        name = Path(checkpoint_path).name
        self.log(checkpoint_path, f"{CHECKPOINT_ARTIFACTS}/{name}")
        if kept is not None and self._can_delete:
            self._drop_checkpoints({*kept, name})

    def _drop_checkpoints(self, kept: set[str]) -> None:
        """Delete the run's ``checkpoints/<name>`` artifacts whose name is not in ``kept``.

        A store whose artifact repository cannot delete (MLflow raises NotImplementedError) keeps
        every checkpoint: one warning, and no more tries in this run.
        """
        try:
            logged = self._client.list_artifacts(self.run_id, CHECKPOINT_ARTIFACTS)
            dropped = [f.path for f in logged if f.is_dir and Path(f.path).name not in kept]
            if not dropped:
                return
            repository = get_artifact_repository(
                self._client.get_run(self.run_id).info.artifact_uri, tracking_uri=self.uri
            )
            for path in dropped:
                repository.delete_artifacts(path)
                log.debug("deleted the artifacts %s of run %s (the session removed it)", path, self.run_id)
        except NotImplementedError:
            self._can_delete = False
            log.warning(
                "the artifact store of MLflow run %s cannot delete; it keeps every checkpoint logged",
                self.run_id,
            )
        except Exception as error:  # tried again at the next checkpoint
            log.warning("could not delete old checkpoints of run %s: %s", self.run_id, one_line(error))

    def log_learning_curve(
        self, metrics: Sequence[str] = DEFAULT_CURVE_METRICS, filename: str = "learning_curve.png"
    ) -> Path | None:
        """Plot the run's histories of ``metrics`` (those it has) and log the PNG under ``plots/``.

        The PNG is written to the session folder (or a temporary folder without one) and uploaded
        with :meth:`log`. Kept against ``MlflowClient.log_figure``: that call saves the figure to
        a temporary file and uploads it the same way, but the PNG would then not stay in the session,
        where ``digideep runs sync`` and offline users find it.

        Returns:
            The PNG's local path, or None when the run has none of ``metrics``.
        """
        from digideep.tracking.runs import write_run_curves  # matplotlib only when needed

        folder = (
            self.session_path
            if self.session_path is not None
            else Path(tempfile.mkdtemp(prefix="digideep-curve-"))
        )
        try:
            png = write_run_curves(self._client, self.run_id, metrics, folder / filename)
        except Exception as error:
            log.warning("could not plot the learning curve of run %s: %s", self.run_id, one_line(error))
            return None
        if png is not None:
            self.log(png, "plots")
        return png
