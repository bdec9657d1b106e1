"""The metrics journal: every metric of a session, on local disk first, MLflow second.

A session's metrics go to ``<session>/metrics.jsonl`` before they go anywhere else: one JSON line
per record, appended and fsynced::

    {"step": 2000, "ts": 1764102000123, "m": {"charts/iteration": 8.0, "time/explore": 1.25, ...}}
    {"step": 2000, "ts": 1764102000456, "m": {"time/checkpoint": 0.31}, "checkpoint": 8}

``step`` is the environment frames, ``ts`` the wall-clock time in milliseconds, ``m`` the values
under their MLflow keys (:func:`~digideep.tracking.naming.mlflow_key`). The log stage appends one
record per step; a checkpoint appends a second record at the same step holding only
``time/checkpoint`` (its own duration, tagged with the checkpoint's iteration). A metric key
appears at most once per step.

**The journal is the source of truth.** MLflow receives what the journal holds
(:class:`~digideep.tracking.sender.JournalUploader`), and the byte offset up to which MLflow has
acknowledged is kept in ``metrics.sent.json`` with the run id it was sent to. A checkpoint records
the journal's length (``state_dict``); resuming from it rewinds the journal to that length, plus the
checkpoint's own ``time/checkpoint`` record, since the iterations after it are replayed and append
their records again (the same values, the timing ones aside). A record cut short by a kill (no
final newline, or not JSON) is dropped when the journal is opened.

**On object storage** (a session under ``s3://...``) an append-only file cannot be appended to in
place, so the journal stays a local working copy (in the session's working folder) and the session
uploads it whole with every checkpoint, after the checkpoint's ``time/checkpoint`` record and before
its commit, and when it closes (:meth:`digideep.storage.session.Session.upload`). The copy in the
bucket therefore always covers the newest committed checkpoint; a resume on another machine
downloads it and rewinds it to the checkpoint like a local journal. ``metrics.sent.json`` stays
local: a process that starts without it reads what the MLflow run holds before its first send (see
:mod:`digideep.tracking.sender`), so the replayed steps are not sent twice.

This module is plain file handling: it imports neither MLflow nor torch.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from digideep.storage.files import atomic_write_json
from digideep.tracking.naming import mlflow_key

__all__ = ["CHECKPOINT_METRIC", "JOURNAL_FILE", "SENT_FILE", "MetricsJournal", "Record", "complete_size"]

log = logging.getLogger(__name__)

JOURNAL_FILE = "metrics.jsonl"
SENT_FILE = "metrics.sent.json"
CHECKPOINT_METRIC = "time/checkpoint"

Record = tuple[int, int, dict[str, Any]]
"""``(start offset, end offset, record)`` of one journal line."""


class MetricsJournal:
    """The append-only metrics file of one session (see the module docstring).

    Args:
        path: the journal file, usually ``<session>/metrics.jsonl``; created at the first append.
            ``metrics.sent.json`` lives beside it.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.sent_path = self.path.with_name(SENT_FILE)
        self._lock = threading.Lock()
        self._size: int | None = None  # bytes of complete records, known after the first open
        self._bad_values: set[str] = set()

    # -- writing -----------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Bytes of complete records (a torn last line is cut off the first time this is read)."""
        with self._lock:
            return self._open()

    def append(
        self,
        step: int,
        metrics: Mapping[str, Any],
        *,
        timestamp: int | None = None,
        checkpoint: int | None = None,
    ) -> dict[str, Any] | None:
        """Append one record and fsync it; names become MLflow keys, values floats.

        Values that are not numbers are skipped with one warning per name. Nothing is written when
        no value is left.

        Args:
            step: environment frames.
            metrics: ``{name: value}``.
            timestamp: milliseconds since the epoch (now by default).
            checkpoint: the iteration of the checkpoint this record belongs to (its duration).

        Returns:
            The record written, or None.
        """
        values: dict[str, float] = {}
        for name, value in metrics.items():
            try:
                values[mlflow_key(name)] = float(value)
            except (TypeError, ValueError):
                if name not in self._bad_values:
                    self._bad_values.add(name)
                    log.warning("metric '%s' has a value that is not a number (%r); skipped", name, value)
        if not values:
            return None
        record: dict[str, Any] = {
            "step": int(step),
            "ts": int(time.time() * 1000) if timestamp is None else int(timestamp),
            "m": values,
        }
        if checkpoint is not None:
            record["checkpoint"] = int(checkpoint)
        line = (json.dumps(record, allow_nan=True) + "\n").encode()
        with self._lock:
            self._open()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)  # one write: a kill leaves the whole line or a torn tail
                os.fsync(fd)
            finally:
                os.close(fd)
            self._size += len(line)
        return record

    # -- reading -----------------------------------------------------------------------------
    def records(self, start: int = 0, end: int | None = None) -> list[Record]:
        """The complete records from byte ``start`` to ``end`` (the current size by default)."""
        with self._lock:
            end = self._open() if end is None else end
        if end <= start:
            return []
        with open(self.path, "rb") as file:
            file.seek(start)
            data = file.read(end - start)
        found, offset = [], start
        for line in data.splitlines(keepends=True):
            found.append((offset, offset + len(line), json.loads(line)))
            offset += len(line)
        return found

    # -- resume ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, int]:
        """``{"offset": bytes}``: what a checkpoint covers."""
        return {"offset": self.size}

    def rewind(self, offset: int, checkpoint: int | None = None) -> int:
        """Drop the records after ``offset`` (resuming from a checkpoint); return the new size.

        The record right after ``offset`` is kept when it is the ``time/checkpoint`` record of the
        checkpoint ``checkpoint`` (it was written after the checkpoint's state, before its commit).
        The sent offset is lowered to the new size if it was beyond it.
        """
        with self._lock:
            size = self._open()
        if offset > size:
            raise ValueError(
                f"metrics journal {self.path} holds {size} bytes but the checkpoint covers {offset}; "
                "the journal was truncated or replaced: restore it or start a new session"
            )
        keep = offset
        if checkpoint is not None:
            following = self.records(offset, size)[:1]
            if following and following[0][2].get("checkpoint") == checkpoint:
                keep = following[0][1]
        self._truncate(keep)
        sent = self._read_sent()
        if sent and sent["offset"] > keep:
            self._write_sent(sent["run_id"], keep)
        return keep

    def _truncate(self, offset: int) -> None:
        with self._lock:
            if self.path.exists():
                with open(self.path, "r+b") as file:
                    file.truncate(offset)
                    os.fsync(file.fileno())
            self._size = offset

    # -- what MLflow has -------------------------------------------------------------------------
    def sent_offset(self, run_id: str) -> int:
        """Bytes of the journal that the MLflow run ``run_id`` acknowledged (0 for another run)."""
        sent = self._read_sent()
        return sent["offset"] if sent and sent.get("run_id") == run_id else 0

    def mark_sent(self, run_id: str, offset: int) -> None:
        """Record that MLflow run ``run_id`` acknowledged the journal up to byte ``offset``."""
        self._write_sent(run_id, offset)

    def unsent(self, run_id: str | None) -> int:
        """Records not yet acknowledged by ``run_id`` (all of them for None)."""
        start = self.sent_offset(run_id) if run_id else 0
        return len(self.records(start))

    def _read_sent(self) -> dict[str, Any] | None:
        try:
            sent = json.loads(self.sent_path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return sent if isinstance(sent, dict) and isinstance(sent.get("offset"), int) else None

    def _write_sent(self, run_id: str, offset: int) -> None:
        atomic_write_json(self.sent_path, {"run_id": run_id, "offset": int(offset)})

    # -- opening -----------------------------------------------------------------------------
    def _open(self) -> int:
        """The size of the complete records; cuts a torn tail the first time (lock held)."""
        if self._size is not None:
            return self._size
        good, length = _complete(self.path)
        if good < length:
            log.warning(
                "metrics journal %s ends with %d bytes of an unfinished record (a kill while writing); "
                "dropped",
                self.path,
                length - good,
            )
            with open(self.path, "r+b") as file:
                file.truncate(good)
                os.fsync(file.fileno())
        self._size = good
        return good

    def __repr__(self) -> str:
        return f"MetricsJournal({str(self.path)!r})"


def complete_size(path: str | Path) -> int:
    """Bytes of the complete records of the journal at ``path`` (0 if there is none), reading only:
    a torn tail is left where it is (a resume checks a checkpoint against it before it changes anything)."""
    return _complete(Path(path))[0]


def _complete(path: Path) -> tuple[int, int]:
    """``(bytes of the complete records, bytes of the file)`` of the journal at ``path``."""
    if not path.exists():
        return 0, 0
    data = path.read_bytes()
    good = 0
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n") or not _parses(line):
            break
        good += len(line)
    return good, len(data)


def _parses(line: bytes) -> bool:
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return (
        isinstance(record, dict) and isinstance(record.get("step"), int) and isinstance(record.get("m"), dict)
    )
