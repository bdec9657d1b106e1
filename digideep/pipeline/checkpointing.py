"""The checkpoint stage: a run's state written into its session, committed, and pruned by retention.

A checkpoint is ``checkpoints/checkpoint-<iteration>/`` with ``runner.json`` (:func:`runner_info`:
what rebuilds the Runner) and ``states.pt`` (:meth:`digideep.pipeline.run_state.RunState.state_dict`),
committed by its record ``commit.json`` (see :mod:`digideep.storage.checkpoint`).
:class:`Checkpointer` writes them for the Runner's ``checkpoint`` stage;
:mod:`digideep.pipeline.resuming` reads them back.
"""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path
from typing import Any

from digideep.memory import DurableMemory
from digideep.pipeline.counters import Counters
from digideep.pipeline.run_state import RunState
from digideep.storage.checkpoint import apply_retention, find_checkpoints, write_checkpoint
from digideep.storage.lease import LEASE_MARGIN
from digideep.storage.location import Location
from digideep.storage.session import Session
from digideep.tracking.journal import CHECKPOINT_METRIC, JOURNAL_FILE
from digideep.utility.user_code import IMPORT_PATHS

__all__ = ["Checkpointer", "runner_info", "trained_checkpoints"]

log = logging.getLogger(__name__)


def runner_info(
    session: Session,
    params: dict[str, Any],
    counters: Counters,
    classes: dict[str, dict[str, str]],
    resolved: dict[str, str],
) -> dict[str, Any]:
    """What ``runner.json`` holds besides the versions: the params tree, the params module, the
    counters, the class paths of the agents and memories, the folders of the run's own code and the
    resolved settings (``{"agents/<name>/resolved/update_mode": "eager", ...}``)."""
    info = session.info()
    return {
        "params": params,
        "params_module": info.get("params_module"),
        "counters": counters.state_dict(),
        "classes": classes,
        IMPORT_PATHS: info.get(IMPORT_PATHS, {}),
        "resolved": resolved,
    }


def trained_checkpoints(folder: Location, counters: Counters) -> dict[str, Location]:
    """What training produced: ``{"final": newest checkpoint, "best": best-testing one}`` of the
    checkpoints in ``folder``.

    The caller logs them as models once training returned ``"finished"`` (the tracker's
    ``log_models``, see :func:`digideep.pipeline.training.run_training`); a checkpoint that
    retention removed is left out.
    """
    found = {c.iteration: c.location for c in find_checkpoints(folder)}
    wanted = {"final": counters.last_checkpoint, "best": counters.best_checkpoint}
    return {which: found[iteration] for which, iteration in wanted.items() if iteration in found}


class Checkpointer:
    """Writes the checkpoints of one run into its session.

    Args:
        session: the run's session: its ``checkpoints/`` folder, its lease, which must outlive
            each commit, and its uploads of a URL session's journal and log before each commit.
        state: the run's state; its journal records each checkpoint's duration.
        durable: the run's memories kept in the session: flushed before each checkpoint is written,
            told once it is committed.
        keep: how many checkpoints retention keeps (0: every one); the memories' logs keep the rows
            those need.
    """

    def __init__(
        self,
        session: Session,
        state: RunState,
        *,
        durable: dict[str, DurableMemory],
        keep: int,
    ) -> None:
        self.session = session
        self.state = state
        self.durable = durable
        self.keep = keep

    def save(self, info: dict[str, Any], tracker: Any, started: float) -> str:
        """Flush the memories, write the two checkpoint files, commit, apply retention; return the folder.

        The files are written under ``checkpoints/checkpoint-<iteration>/`` and the checkpoint
        commits when its record ``commit.json`` is written, last (see
        :mod:`digideep.storage.checkpoint`). Between the two, the checkpoint's own duration is
        appended to the metrics journal as ``time/checkpoint`` at the checkpoint's step, so a
        committed checkpoint always has it: the journal state saved in ``states.pt`` covers the
        records before it, and resuming keeps this one record too (see
        :meth:`~digideep.tracking.journal.MetricsJournal.rewind`). A session on object storage then
        uploads its journal and log, still before the commit, so the journal there always covers
        the newest committed checkpoint. MLflow is not waited for: the journal holds the metrics
        whether the server answers or not.

        Args:
            info: the checkpoint's ``runner.json`` contents (:func:`runner_info`), its counters
                already marked (:meth:`~digideep.pipeline.counters.Counters.record_checkpoint`).
            tracker: the run's tracker (``flush``, ``log_checkpoint``), or None.
            started: ``time.perf_counter()`` when the checkpoint stage began.
        """
        counters, journal = self.state.counters, self.state.journal
        iteration = counters.iteration
        for memory in self.durable.values():
            memory.flush()
        folder = self.session.checkpoints_location
        pending = write_checkpoint(folder, iteration, info, self.state.state_dict())
        if journal is not None:
            elapsed = time.perf_counter() - started
            journal.append(counters.frames, {CHECKPOINT_METRIC: elapsed}, checkpoint=iteration)
        # The lease must outlive the upload and the commit: a host whose session was taken over
        # (it was cut off past the lease's expiry) must not commit over the new holder's checkpoints.
        self.session.ensure_held(margin=LEASE_MARGIN)
        self.session.uploads.upload(JOURNAL_FILE, "log.txt")  # URL sessions: before the commit
        saved = pending.commit()
        for memory in self.durable.values():  # committed: the logs keep what kept checkpoints need
            memory.checkpoint_committed(keep=self.keep)
        for deleted in apply_retention(folder, self.keep, counters.best_checkpoint):
            log.debug("retention removed %s", deleted)
        if tracker is not None:
            tracker.flush(force=True)
            # MLflow keeps what the session keeps (None: retention is off, every checkpoint stays)
            kept = [c.location.name for c in find_checkpoints(folder)] if self.keep > 0 else None
            if isinstance(saved.path, Path):
                tracker.log_checkpoint(saved.path, kept)
            else:  # MLflow uploads local files: a scratch copy of this checkpoint's
                with tempfile.TemporaryDirectory(prefix="digideep-checkpoint-") as scratch:
                    tracker.log_checkpoint(pending.write_copy(Path(scratch)), kept)
        log.info("checkpoint %s", saved.path)
        return str(saved.path)
