"""Sending the metrics journal to MLflow: each value once, from one background thread.

A ``log_batch`` costs more than the 2 % of a training iteration that tracking may take
(``bench/bench_tracking.py``; docs/measurements.md gives the figures). The training loop therefore
only appends to the journal (:mod:`digideep.tracking.journal`); a background thread sends what the
journal holds.

:class:`JournalUploader` sends the records after the sent offset in ``log_batch`` calls of whole
records (at most 1000 values a call; a record of more is split by MLflow's client) and records the
sent offset after each acknowledged call. When it cannot know what MLflow holds (the first send of
a process, which may follow a kill or a resume, and every send after a failed call, whose request
may have arrived), it first reads what the run holds from the first unsent step on, and from then
on leaves out every ``(key, step)`` already there, up to the highest step the run held: no value is
sent twice (the iterations replayed after a resume included) and a half-sent step is completed.

:class:`BackgroundSender` runs the uploader. Failures never reach the training loop: a failure (server
down, timeout) logs a warning and pauses sending for ``retry_after`` seconds, after which the next
flush tries again; nothing is lost meanwhile, since the journal keeps everything. A refusal for
good (an HTTP 4xx answer such as a deleted run) stops sending for the process with one warning;
``digideep runs sync SESSION`` sends the rest later. Warnings are logged for the first failure and
every 100th after it.

Artifacts are not journaled: a checkpoint or model whose upload failed (the server was down at the
moment) is logged as a warning and left out. :func:`missing_artifacts` compares the session's
checkpoints (and a finished session's final and best models) with the run's artifact list, and
:func:`send_artifacts` uploads what is missing; ``digideep runs sync`` does both before it ends a
run FINISHED.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import Metric

from digideep.storage.checkpoint import Checkpoint, Folder, find_checkpoints, read_runner_info
from digideep.tracking.failures import is_refusal, one_line
from digideep.tracking.journal import MetricsJournal
from digideep.tracking.model import MODEL_ARTIFACTS, log_policy_models
from digideep.tracking.naming import MAX_METRICS_PER_BATCH

__all__ = ["BackgroundSender", "JournalUploader", "MissingArtifact", "missing_artifacts", "send_artifacts"]

log = logging.getLogger(__name__)


class JournalUploader:
    """Sends a journal's unsent records to one MLflow run (see the module docstring).

    Args:
        client: the MLflow client.
        run_id: the run that receives the metrics.
        journal: the session's metrics journal.
    """

    def __init__(self, client: MlflowClient, run_id: str, journal: MetricsJournal) -> None:
        self.client = client
        self.run_id = run_id
        self.journal = journal
        self.verify = True  # read what MLflow holds before the next send
        self._present: set[tuple[str, int]] = set()  # (key, step) MLflow held at the last reading
        self._high = -1  # the highest step MLflow held then; later steps are not checked
        self.sent = 0  # values sent by this uploader
        self.skipped = 0  # values found in MLflow already

    def pending(self) -> int:
        """Records not yet acknowledged."""
        return self.journal.unsent(self.run_id)

    def send_pending(self) -> int:
        """Send every unsent record; return the values sent. Raises what the client raises."""
        start = self.journal.sent_offset(self.run_id)
        records = self.journal.records(start)
        if not records:
            return 0
        try:
            if self.verify:
                self._present, self._high = self._held(min(record["step"] for _, _, record in records))
                self.verify = False
            sent, batch, end = 0, [], start
            for _, record_end, record in records:
                step, timestamp = record["step"], record["ts"]
                metrics = [
                    Metric(key, value, timestamp, step)
                    for key, value in record["m"].items()
                    if step > self._high or (key, step) not in self._present
                ]
                self.skipped += len(record["m"]) - len(metrics)
                if batch and len(batch) + len(metrics) > MAX_METRICS_PER_BATCH:
                    self._send(batch, end)
                    sent, batch = sent + len(batch), []
                batch += metrics
                end = record_end
            self._send(batch, end)
            return sent + len(batch)
        except BaseException:
            self.verify = True  # the failed call may have arrived in part
            raise

    def _send(self, batch: list[Metric], end: int) -> None:
        if batch:
            self.client.log_batch(self.run_id, metrics=batch)
            self.sent += len(batch)
        self.journal.mark_sent(self.run_id, end)

    def _held(self, first: int) -> tuple[set[tuple[str, int]], int]:
        """The ``(key, step)`` pairs the run holds at steps from ``first`` on, and its highest step."""
        run = self.client.get_run(self.run_id)
        latest = getattr(run.data, "_metric_objs", None)  # the latest value (highest step) of each key
        if latest is None:
            latest = [m for key in run.data.metrics for m in self.client.get_metric_history(self.run_id, key)]
        high = max((int(m.step) for m in latest), default=-1)
        present = set()
        for key in sorted({m.key for m in latest if m.step >= first}):
            for metric in self.client.get_metric_history(self.run_id, key):
                if metric.step >= first:
                    present.add((key, int(metric.step)))
        return present, high


class BackgroundSender:
    """Calls ``send`` when asked, inline or from one daemon thread, and survives its failures.

    Args:
        send: sends everything pending; raises on failure.
        asynchronous: send from a daemon thread (True) or inside :meth:`flush` (False).
        retry_after: seconds without send attempts after a failure.
        description: what is being sent to, for warnings (the tracking URI and run id).
    """

    def __init__(
        self,
        send: Callable[[], object],
        *,
        asynchronous: bool = True,
        retry_after: float = 30.0,
        description: str = "MLflow",
    ) -> None:
        self._send = send
        self._retry_after = retry_after
        self._description = description
        self._cond = threading.Condition()
        self._requested = 0  # generation asked for
        self._done = 0  # generation of the last finished attempt
        self._ok = True  # whether that attempt succeeded
        self._closed = False
        self._paused_until = 0.0
        self.failures = 0
        self.refused = False
        self._thread: threading.Thread | None = None
        if asynchronous:
            self._thread = threading.Thread(target=self._run, name="digideep-mlflow-sender", daemon=True)
            self._thread.start()

    def flush(self) -> None:
        """Send now (synchronous) or have the thread send (asynchronous, returns at once)."""
        if self._thread is None:
            self._attempt()
            return
        with self._cond:
            self._requested += 1
            self._cond.notify_all()

    def drain(self, timeout: float = 30.0) -> bool:
        """Send and wait for the attempt (at most ``timeout`` seconds); return whether it succeeded."""
        if self._thread is None:
            return self._attempt()
        with self._cond:
            self._requested += 1
            wanted = self._requested
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: self._done >= wanted, timeout):
                return False
            return self._ok

    def close(self, timeout: float = 30.0) -> bool:
        """Make one last attempt (even right after a failure), stop the thread; return its success."""
        self._paused_until = 0.0
        if self._thread is None:
            return self._attempt()
        with self._cond:
            self._closed = True
            self._requested += 1
            wanted = self._requested
            self._cond.notify_all()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning(
                "%s did not answer within %.0f s while sending the last metrics", self._description, timeout
            )
            return False
        with self._cond:
            return self._done >= wanted and self._ok

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._requested > self._done or self._closed)
                generation, closing = self._requested, self._closed
            ok = self._attempt()
            with self._cond:
                self._done, self._ok = generation, ok
                self._cond.notify_all()
            if closing:
                return

    def _attempt(self) -> bool:
        if self.refused or time.monotonic() < self._paused_until:
            return False
        try:
            self._send()
        except Exception as error:  # any backend failure: warn and retry later, never raise
            self.failures += 1
            if is_refusal(error):
                self.refused = True
                log.warning(
                    "%s refused metrics (%s); sending stops, the journal keeps them for 'digideep runs sync'",
                    self._description,
                    one_line(error),
                )
                return False
            self._paused_until = time.monotonic() + self._retry_after
            if self.failures == 1 or self.failures % 100 == 0:
                log.warning(
                    "could not send metrics to %s; retrying in %.0f s (%s; failure %d)",
                    self._description,
                    self._retry_after,
                    one_line(error),
                    self.failures,
                )
            return False
        return True


# -- artifacts: what ``digideep runs sync`` sends besides the metrics ------------------------------

CHECKPOINT_FILES = ("runner.json", "states.pt")
"""The files of a checkpoint that a run logs under ``checkpoints/<name>/`` (as the Runner does)."""


@dataclass(frozen=True)
class MissingArtifact:
    """An artifact the session has and its MLflow run lacks.

    Attributes:
        artifact: where in the run it belongs: ``checkpoints/checkpoint-<N>`` or a model folder
            (``model``, ``best_model``).
        checkpoint: the session's checkpoint it comes from.
        files: for a checkpoint, the names of its files the run lacks; empty for a model.
    """

    artifact: str
    checkpoint: Checkpoint
    files: tuple[str, ...] = ()


def missing_artifacts(
    client: MlflowClient, run_id: str, checkpoints: Folder, *, done: bool
) -> list[MissingArtifact]:
    """What of the session's checkpoints (and, once ``done``, its final and best models) the run lacks.

    A run logs each checkpoint when it is committed and the models when training finishes; an
    MLflow outage meanwhile loses those uploads (they are logged, never raised). Checkpoints that
    retention deleted from the session are not asked for: they cannot be sent any more.
    """
    found = find_checkpoints(checkpoints)
    held = _held_artifacts(client, run_id, [c.location.name for c in found])
    missing = []
    for checkpoint in found:
        artifact = f"checkpoints/{checkpoint.location.name}"
        lacking = tuple(name for name in CHECKPOINT_FILES if f"{artifact}/{name}" not in held)
        if lacking:
            missing.append(MissingArtifact(artifact, checkpoint, lacking))
    if done and found:
        models = _logged_models(client, run_id)
        for which, checkpoint in _model_checkpoints(found).items():
            if MODEL_ARTIFACTS[which] not in models:
                missing.append(MissingArtifact(MODEL_ARTIFACTS[which], checkpoint))
    return missing


def send_artifacts(
    client: MlflowClient, run_id: str, missing: list[MissingArtifact], register_as: str | None = None
) -> None:
    """Upload ``missing`` to the run; checkpoints on object storage pass through a local scratch copy.

    Failures of a model's export or upload are logged (see ``log_policy_models``), a checkpoint's
    upload raises: the caller lists what is missing again to know what arrived.
    """
    for item in missing:
        with tempfile.TemporaryDirectory(prefix="digideep-sync-") as scratch:
            folder = _local_folder(item.checkpoint, Path(scratch))
            if item.files:
                for name in item.files:
                    client.log_artifact(run_id, str(folder / name), item.artifact)
            else:
                which = next(key for key, value in MODEL_ARTIFACTS.items() if value == item.artifact)
                log_policy_models(client, run_id, {which: folder}, register_as if which == "final" else None)
        log.info("sent %s of %s to MLflow run %s", item.artifact, item.checkpoint.path, run_id)


def _held_artifacts(client: MlflowClient, run_id: str, checkpoint_names: list[str]) -> set[str]:
    """The run's top-level artifacts and the files under ``checkpoints/<name>/`` of each name."""
    held = {entry.path for entry in client.list_artifacts(run_id)}
    if "checkpoints" in held:
        logged = {entry.path for entry in client.list_artifacts(run_id, "checkpoints")}
        for name in checkpoint_names:
            if f"checkpoints/{name}" in logged:
                held |= {entry.path for entry in client.list_artifacts(run_id, f"checkpoints/{name}")}
    return held


def _logged_models(client: MlflowClient, run_id: str) -> set[str]:
    """Names of the READY MLflow logged models that ``run_id`` produced."""
    from mlflow.entities import LoggedModelStatus

    experiment = client.get_run(run_id).info.experiment_id
    found = client.search_logged_models(
        experiment_ids=[experiment], filter_string=f"source_run_id = '{run_id}'"
    )
    return {model.name for model in found if model.status == LoggedModelStatus.READY}


def _model_checkpoints(found: list[Checkpoint]) -> dict[str, Checkpoint]:
    """The checkpoints a finished run's models come from: the newest (final) and the best one."""
    by_iteration = {checkpoint.iteration: checkpoint for checkpoint in found}
    best = read_runner_info(found[-1].location)["counters"]["best_checkpoint"]
    chosen = {"final": found[-1]}
    if best in by_iteration:
        chosen["best"] = by_iteration[best]
    return chosen


def _local_folder(checkpoint: Checkpoint, scratch: Path) -> Path:
    """The checkpoint's folder on local disk: itself, or a copy of its files under ``scratch``."""
    if checkpoint.location.local is not None:
        return checkpoint.location.local
    copy = scratch / checkpoint.location.name
    copy.mkdir()
    for name in checkpoint.location.files():
        (copy / name).write_bytes((checkpoint.location / name).read_bytes())
    return copy
