"""Track one training session as one MLflow run: params, tags, metrics, artifacts, status.

Usage (the Runner's ``log`` and ``checkpoint`` stages; the library never imports Prefect)::

    tracker = MlflowTracker("mujoco_sac", session.path, params_module="params.mujoco_sac",
                            run_id=session.info().get("mlflow_run_id"))   # None: a new run
    run_id = tracker.start(params, cpanel)          # fails fast when the store is unreachable
    session.update_info(mlflow_run_id=run_id)
    with tracker:                                   # ends FINISHED, FAILED or KILLED
        for ...:
            tracker.log_metrics({"explore/train/episode_return": 12.5, ...}, step=frames)
            tracker.log_checkpoint(checkpoint_path, kept)  # at checkpoints; MLflow keeps `kept`
        tracker.log_learning_curve()

Where: ``MLFLOW_TRACKING_URI`` (a server such as ``http://127.0.0.1:5000``) or, by default, the
embedded store ``sqlite:///data/mlflow.db`` with artifacts under ``data/mlartifacts``.

Metrics go to the session's metrics journal first (:mod:`digideep.tracking.journal`, appended and
fsynced); a background thread sends what the journal holds with one ``log_batch`` per flush, at
most one per ``log_metrics`` call and at most one per ``min_flush_interval`` (1 s), see
:mod:`digideep.tracking.sender`. The loop pays for one small append. MLflow names are made valid
by :func:`~digideep.tracking.naming.mlflow_key`: ``/explore/train/episode_return`` is logged as
``explore/train/episode_return``.

**Nothing lost, nothing twice.** The journal is the source of truth; what MLflow acknowledged is
recorded as an offset into it. A server that is away for minutes costs nothing: training goes on,
the journal grows, and the values go up when the server answers again (or, if the run ends first,
with ``digideep runs sync SESSION``). A resumed session rewinds the journal to its checkpoint and
replays the iterations after it; before its first send the tracker reads what the run holds at the
steps it is about to send and leaves those ``(key, step)`` pairs out, so each step appears once and
a step cut in half by a kill is completed.

**Failures.** :meth:`MlflowTracker.start` checks the store with no HTTP retries and a
``connect_timeout``: an unreachable server raises :class:`TrackingUnavailableError` (one line naming the
URI) within seconds, or with ``required=False`` logs a warning and turns tracking off (every method
becomes a no-op). Later calls never raise for backend failures: they warn and retry; the journal keeps the
unsent metrics. For ``http(s)`` URIs the tracker sets ``MLFLOW_HTTP_REQUEST_MAX_RETRIES=2`` and
``MLFLOW_HTTP_REQUEST_TIMEOUT=20`` in the process environment unless they are set already, so that
one request never blocks for minutes (MLflow's defaults are 7 retries and 120 s).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Param, RunTag

from digideep.tracking.artifacts import RunArtifacts
from digideep.tracking.failures import TrackingUnavailableError, http_limits, one_line
from digideep.tracking.journal import JOURNAL_FILE, MetricsJournal
from digideep.tracking.model import log_policy_models
from digideep.tracking.naming import (
    DEFAULT_CURVE_METRICS,
    DEFAULT_DATA_ROOT,
    artifact_location_of,
    ensure_store,
    flatten_params,
    is_http_uri,
    open_experiment,
    tracking_uri_of,
)
from digideep.tracking.sender import BackgroundSender, JournalUploader
from digideep.tracking.tags import build_tags

__all__ = ["DEFAULT_CURVE_METRICS", "MlflowTracker", "TrackingUnavailableError", "status_for_exception"]

log = logging.getLogger(__name__)

STATUSES = ("FINISHED", "FAILED", "KILLED")
_RUN_HTTP_LIMITS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}


def status_for_exception(exc_type: type[BaseException] | None) -> str:
    """The run status for how training ended: FINISHED, KILLED (interrupt, exit) or FAILED."""
    if exc_type is None:
        return "FINISHED"
    if issubclass(exc_type, KeyboardInterrupt | SystemExit):
        return "KILLED"
    return "FAILED"


class MlflowTracker:
    """One MLflow run for one session. See the module docstring for the behaviour.

    Args:
        experiment: experiment name (one per parameter file unless the cpanel names another, see
            :func:`~digideep.tracking.naming.experiment_name`); created when missing.
        session_path: the session folder; tagged, and its ``params.json``/``cpanel.json`` are
            logged as artifacts under ``session/`` when a new run starts.
        tracking_uri: overrides ``MLFLOW_TRACKING_URI`` and the embedded default.
        data_root: folder of the embedded store (``<data_root>/mlflow.db``, ``<data_root>/mlartifacts``).
        run_id: the run to reopen on resume; None starts a new run.
        run_name: MLflow run name; the session folder's name by default.
        params_module: the parameter module, e.g. ``params.mujoco_sac`` (tag).
        flow_run_id: the Prefect flow-run id, when run by Prefect (tag).
        deployment: the Prefect deployment name, when there is one (tag).
        tags: more tags.
        git_commit: commit of the code; found with ``git rev-parse HEAD`` when None.
        required: raise when the store is unreachable at start (True) or warn and track nothing.
        enabled: False makes every method a no-op (tracking turned off by params).
        asynchronous: send metrics from a background thread (True) or inside ``log_metrics``.
        connect_timeout: seconds the start-up check waits for a server.
        min_flush_interval: least seconds between two sends (metrics wait in the buffer meanwhile);
            0 sends at every ``log_metrics`` call. 1 s keeps short iterations from paying for a send
            each.
        finish_timeout: seconds :meth:`finish` waits for the last metrics.
        journal: the metrics journal to send from (the Runner shares its own); by default
            ``<session_path>/metrics.jsonl``, or without a session a file in a temporary folder made
            when the run starts and removed by :meth:`finish` once MLflow holds all of it.
        retry_after: seconds without send attempts after a failed one.
    """

    def __init__(
        self,
        experiment: str,
        session_path: str | Path | None = None,
        *,
        tracking_uri: str | None = None,
        data_root: str | Path = DEFAULT_DATA_ROOT,
        run_id: str | None = None,
        run_name: str | None = None,
        params_module: str | None = None,
        flow_run_id: str | None = None,
        deployment: str | None = None,
        tags: Mapping[str, Any] | None = None,
        git_commit: str | None = None,
        required: bool = True,
        enabled: bool = True,
        asynchronous: bool = True,
        connect_timeout: int = 5,
        min_flush_interval: float = 1.0,
        finish_timeout: float = 30.0,
        journal: MetricsJournal | None = None,
        retry_after: float = 30.0,
    ) -> None:
        if not isinstance(experiment, str) or not experiment.strip():
            raise ValueError(f"MlflowTracker: experiment must be a non-empty name, got {experiment!r}")
        if connect_timeout < 1:
            raise ValueError(f"MlflowTracker: connect_timeout must be >= 1 second, got {connect_timeout}")
        self.experiment = experiment
        self.session_path = Path(session_path) if session_path is not None else None
        self.enabled = enabled
        self.uri = tracking_uri_of(tracking_uri, data_root) if enabled else (tracking_uri or "")
        self._artifact_location = artifact_location_of(self.uri)
        self.run_id: str | None = None
        self._resume_run_id = run_id
        self.run_name = run_name or (self.session_path.name if self.session_path else None)
        self.required = required
        self.asynchronous = asynchronous
        self.connect_timeout = connect_timeout
        self.min_flush_interval = min_flush_interval
        self.finish_timeout = finish_timeout
        self._tags = build_tags(params_module, self.session_path, flow_run_id, deployment, tags, git_commit)
        self.retry_after = retry_after
        if journal is None and self.session_path is not None:
            journal = MetricsJournal(self.session_path / JOURNAL_FILE)
        self.journal = journal  # None: a temporary one, made by start()
        self._scratch: Path | None = None  # the temporary journal's folder
        self._client: MlflowClient | None = None
        self._sender: BackgroundSender | None = None
        self._uploader: JournalUploader | None = None
        self._last_flush = -math.inf  # the first call sends at once
        self._artifacts: RunArtifacts | None = None

    @property
    def sent_values(self) -> int:
        """Metric values this tracker sent to MLflow (values MLflow held already are not counted)."""
        return self._uploader.sent if self._uploader is not None else 0

    @property
    def active(self) -> bool:
        """Whether a run is open and being tracked."""
        return self._sender is not None

    # -- start ---------------------------------------------------------------------------------
    def start(self, params: Mapping[str, Any], cpanel: Mapping[str, Any]) -> str | None:
        """Open the run (a new one, or ``run_id`` on resume) and log params, cpanel and tags.

        Args:
            params: the resolved params tree, logged flattened (``agents/sac/args/lr``).
            cpanel: the cpanel, logged under ``cpanel/``.

        Returns:
            The MLflow run id, or None when tracking is off.

        Raises:
            TrackingUnavailableError: the store is unreachable or refuses the run, and ``required``.
        """
        if not isinstance(params, Mapping) or not isinstance(cpanel, Mapping):
            raise TypeError(
                "MlflowTracker.start: params and cpanel must be dicts (the params tree and cpanel)"
            )
        if not self.enabled:
            return None
        if self._sender is not None:
            raise ValueError(
                f"MlflowTracker.start: run {self.run_id} is already started; call finish() first"
            )
        if is_http_uri(self.uri):
            for name, value in _RUN_HTTP_LIMITS.items():
                os.environ.setdefault(name, value)
        try:
            with http_limits(retries=0, timeout=self.connect_timeout):
                ensure_store(self.uri)  # a fresh embedded store is created whole, once
                self._client = MlflowClient(self.uri)
                if self._resume_run_id:
                    self._reopen(self._resume_run_id, params, cpanel)
                else:
                    self._create(params, cpanel)
        except Exception as error:  # any failure of the store: one line naming the URI
            message = (
                f"MLflow tracking at {self.uri} could not start the run ({one_line(error)}); check that the "
                "store is reachable, point MLFLOW_TRACKING_URI at one that is, or turn tracking off"
            )
            if self.run_id is not None and not self._resume_run_id:  # created, then failed
                with contextlib.suppress(Exception), http_limits(retries=0, timeout=self.connect_timeout):
                    self._client.set_terminated(self.run_id, "FAILED")
            self._client, self.run_id = None, None
            if self.required:
                raise TrackingUnavailableError(message) from None
            log.warning("%s; continuing with tracking off", message)
            self.enabled = False
            return None
        if self.journal is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="digideep-journal-"))
            self.journal = MetricsJournal(self._scratch / JOURNAL_FILE)
        self._uploader = JournalUploader(self._client, self.run_id, self.journal)
        self._artifacts = RunArtifacts(self._client, self.run_id, self.uri, self.session_path)
        self._sender = BackgroundSender(
            self._uploader.send_pending,
            asynchronous=self.asynchronous,
            retry_after=self.retry_after,
            description=f"MLflow at {self.uri} (run {self.run_id})",
        )
        log.info("MLflow run %s in experiment '%s' at %s", self.run_id, self.experiment, self.uri)
        return self.run_id

    def _create(self, params: Mapping[str, Any], cpanel: Mapping[str, Any]) -> None:
        client = self._client
        experiment_id = open_experiment(client, self.experiment, self._artifact_location)
        run = client.create_run(experiment_id, run_name=self.run_name, tags=self._tags)
        self.run_id = run.info.run_id
        self._log_params({**flatten_params(params), **flatten_params(cpanel, prefix="cpanel")}, existing={})
        for name in ("params.json", "cpanel.json"):
            if self.session_path is not None and (self.session_path / name).is_file():
                client.log_artifact(self.run_id, str(self.session_path / name), "session")

    def _reopen(self, run_id: str, params: Mapping[str, Any], cpanel: Mapping[str, Any]) -> None:
        client = self._client
        run = client.get_run(run_id)
        if run.info.lifecycle_stage != "active":
            raise ValueError(f"run {run_id} is deleted; restore it in MLflow or start a new session")
        self.run_id = run_id
        client.update_run(run_id, status="RUNNING")
        client.log_batch(run_id, tags=[RunTag(k, v) for k, v in self._tags.items()])  # the client splits
        flat = {**flatten_params(params), **flatten_params(cpanel, prefix="cpanel")}
        self._log_params(flat, existing=run.data.params)
        log.info("reopened MLflow run %s", run_id)

    def _log_params(self, flat: dict[str, str], existing: Mapping[str, str]) -> None:
        changed = sorted(k for k, v in flat.items() if k in existing and existing[k] != v)
        if changed:
            log.warning("params changed since the run started; MLflow keeps the first values of %s", changed)
        # MlflowClient.log_batch splits params and tags into MLflow's batches of 100 itself (mlflow 3.x)
        self._client.log_batch(
            self.run_id, params=[Param(k, v) for k, v in flat.items() if k not in existing]
        )

    def log_params(self, flat: Mapping[str, str]) -> None:
        """Log more params once the run is open (what was decided at run time, such as each agent's
        resolved update mode); names logged before keep their first values."""
        if self._sender is None or self._client is None or not flat:
            return
        self._log_params(dict(flat), existing=self._client.get_run(self.run_id).data.params)

    # -- during the run ------------------------------------------------------------------------
    def log_metrics(self, metrics: Mapping[str, float], step: int, *, flush: bool = True) -> None:
        """Append ``metrics`` at ``step`` (environment frames) to the journal and, with ``flush``, send.

        Call it once per iteration with everything of that iteration, or pass ``flush=False`` to
        all calls of an iteration but the last. Values that are not numbers are skipped with one
        warning per name. (The Runner appends to the shared journal itself and calls :meth:`flush`.)

        Args:
            metrics: ``{name: value}``; names are made valid MLflow keys.
            step: the environment frames so far.
            flush: send what the journal holds unless ``min_flush_interval`` has not passed.
        """
        if self._sender is None:
            return
        self.journal.append(step, metrics)
        if flush:
            self.flush(force=False)

    def flush(self, force: bool = True, wait: bool = False) -> bool:
        """Send buffered metrics now (``force``) or only if ``min_flush_interval`` has passed.

        Args:
            force: send even if the last send was less than ``min_flush_interval`` ago.
            wait: block until the values are sent (at most ``finish_timeout`` seconds), e.g.
                before reading the run back.

        Returns:
            True when MLflow holds everything the journal holds (without ``wait``: at the moment of
            the call, before the background thread sends); always True when tracking is off.
        """
        if self._sender is None:
            return True
        if wait:
            self._last_flush = time.monotonic()
            return self._sender.drain(self.finish_timeout) and self._uploader.pending() == 0
        now = time.monotonic()
        if force or now - self._last_flush >= self.min_flush_interval:
            self._last_flush = now
            self._sender.flush()
        return self._uploader.pending() == 0

    def log_artifacts(self, path: str | Path, artifact_path: str | None = None) -> None:
        """Copy a file or a folder's contents into the run's artifacts under ``artifact_path``
        (:meth:`~digideep.tracking.artifacts.RunArtifacts.log`: a missing ``path`` raises ValueError)."""
        if self._sender is not None:
            self._artifacts.log(path, artifact_path)

    def log_checkpoint(self, checkpoint_path: str | Path, kept: Collection[str] | None = None) -> None:
        """Log a checkpoint folder's files under ``checkpoints/<folder name>/``; keep what the session
        keeps (:meth:`~digideep.tracking.artifacts.RunArtifacts.log_checkpoint`)."""
        if self._sender is not None:
            self._artifacts.log_checkpoint(checkpoint_path, kept)

    def log_learning_curve(
        self, metrics: Sequence[str] = DEFAULT_CURVE_METRICS, filename: str = "learning_curve.png"
    ) -> Path | None:
        """Send every metric, then plot the run's histories of ``metrics`` and log the PNG under
        ``plots/`` (:meth:`~digideep.tracking.artifacts.RunArtifacts.log_learning_curve`); return its
        local path, or None when tracking is off or the run has none of ``metrics``."""
        if self._sender is None:
            return None
        self.flush(wait=True)
        return self._artifacts.log_learning_curve(metrics, filename)

    def log_models(self, checkpoints: Mapping[str, Any], register_as: str | None = None) -> dict[str, str]:
        """Log a finished run's policies (``{"final"|"best": checkpoint folder}``) as MLflow models.

        Registers the final one as ``register_as`` when given (``tracking.register_model``); does
        nothing when no run is tracked. See :func:`digideep.tracking.model.log_policy_models`.
        """
        if not self.active or not self.run_id:
            return {}
        return log_policy_models(MlflowClient(self.uri), self.run_id, dict(checkpoints), register_as)

    # -- end -----------------------------------------------------------------------------------
    def finish(self, status: str = "FINISHED") -> None:
        """Send the last metrics and end the run as FINISHED, FAILED or KILLED. Safe to call twice."""
        if status not in STATUSES:
            raise ValueError(f"MlflowTracker.finish: status must be one of {STATUSES}, got {status!r}")
        if self._sender is None:
            return
        sender, self._sender = self._sender, None
        sender.close(self.finish_timeout)
        unsent = self._uploader.pending()
        if unsent:
            log.warning(
                "%d metric records of run %s are not in MLflow at %s yet; the journal %s keeps them: "
                "send them with 'digideep runs sync %s'",
                unsent,
                self.run_id,
                self.uri,
                self.journal.path,
                self.session_path or self.journal.path.parent,
            )
        try:
            self._client.set_terminated(self.run_id, status)
        except Exception as error:
            log.warning(
                "could not mark MLflow run %s %s at %s: %s", self.run_id, status, self.uri, one_line(error)
            )
        log.info("MLflow run %s ended %s", self.run_id, status)
        if self._scratch is not None and not unsent:  # MLflow holds it all: the temporary journal goes
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch, self.journal = None, None

    def __enter__(self) -> MlflowTracker:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self.finish(status_for_exception(exc_type))

    # -- checkpoint ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The run id and experiment (strings)."""
        return {"run_id": self.run_id or "", "experiment": self.experiment}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Make a tracker that has not started reopen ``state["run_id"]`` at :meth:`start`."""
        if self._sender is not None:
            raise ValueError("MlflowTracker.load_state_dict: call it before start()")
        self._resume_run_id = state.get("run_id") or None

    def __repr__(self) -> str:
        return f"MlflowTracker(experiment={self.experiment!r}, uri={self.uri!r}, run_id={self.run_id!r})"
