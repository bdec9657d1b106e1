"""The Session: one run's folder and its lock (a lease on object storage).

A session lives at ``<root>/<name>/`` (root ``data/sessions`` by default)::

    cpanel.json        the cpanel after overrides
    params.json        the resolved params tree
    session.json       params module, creation time, digideep version, tracking ids, and the
                       folders of the run's own code (``import_paths``, :mod:`digideep.utility.user_code`)
    log.txt            a copy of the console log (:mod:`digideep.pipeline.run_logging`)
    checkpoints/       checkpoint-<iteration>/{runner.json, states.pt, commit.json}
    metrics.jsonl      the metrics journal (:mod:`digideep.tracking.journal`)
    memory/<name>.zarr the durable copies of the replay memories
    videos/            evaluation videos
    .lock              the kernel lock (``flock``) of the process using the session
    .lock.json         that process's pid and host, for the message that refuses a second one
    done.json          written when training finished

Only one process may use a session at a time: a second one is refused with a one-line message
naming the holder. The lock is a kernel lock on ``.lock`` that dies with its holder
(:mod:`digideep.storage.session_lock`).

**Sessions on object storage.** The root may be an fsspec URL (``--session-path s3://bucket/runs``,
``gs://...``; ``file://`` is a local path) with credentials and endpoint from the environment (see
:mod:`digideep.storage.location`). Everything of the session then lives under the URL and a retry on
another machine resumes from there alone: ``params.json``, ``cpanel.json``, ``session.json`` and
``done.json`` are written there directly (one PUT each), checkpoints are committed there by their
record (:mod:`digideep.storage.checkpoint`). Files that grow line by line are kept in a local
working folder, ``data/cache/<name>-<hash of the URL>/``, and uploaded by the run
(:mod:`digideep.storage.upload_cache`). Reopening a URL session to run it downloads the log and
the journal first, so the log goes on and the journal is rewound to the checkpoint as on disk. The
store is probed before anything is written: a missing bucket, refused credentials or an
unreachable endpoint fail in seconds with one line naming the URL.

The session carries its :class:`~digideep.storage.upload_cache.UploadCache` (``uploads``), which the
run's checkpointer uploads with at each checkpoint. Reopening a run reads what it needs in
two calls: :meth:`Session.saved_run` (the JSON files and whether training finished) and
:meth:`Session.checkpoints_to_resume` (the committed checkpoints, newest first, each read and checked;
:mod:`digideep.storage.saved_run`). The device, the params files, the log file and torch's threads are
the run's, not the folder's: ``open_run`` checks the device
(:class:`~digideep.pipeline.devices.DeviceChoice`, handed to the Runner), writes the params
(:func:`~digideep.pipeline.params.write_params`), attaches the
:class:`~digideep.pipeline.run_logging.RunLog` and sets the threads.

On a URL the lock is a lease (:mod:`digideep.storage.lease`, a record created with a conditional
write and renewed by a heartbeat), since no kernel lock spans machines. It lives 120 s without
renewal, or ``$DIGIDEEP_LEASE_TTL`` seconds (30 at the least): a dead host's session is free that
long (plus 10 s of allowed clock skew) after its last renewal. Shorter frees a dead host's sessions
sooner but stops a host cut off from the store sooner too; tests of host failures use 30.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from digideep.errors import UsageError
from digideep.storage.held_lease import exit_process
from digideep.storage.lease import acquire_session_lease
from digideep.storage.lease_store import LEASE_FILE
from digideep.storage.location import DEFAULT_ROOT, Location
from digideep.storage.saved_run import CheckpointRead, SavedRun, checkpoints_newest_first
from digideep.storage.session_lock import LOCK_FILES, FolderLock, lease_ttl
from digideep.storage.upload_cache import UploadCache, restore_working_files, working_folder

__all__ = [
    "Session",
    "check_session_exists",
    "check_session_name",
    "check_session_root",
    "default_session_name",
]

log = logging.getLogger(__name__)


def default_session_name(params_name: str) -> str:
    """``<YYYYmmdd-HHMMSS>-<params name>``, e.g. ``20261121-203000-pendulum_sac``."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{params_name.rsplit('.', 1)[-1]}"


def check_session_name(name: str) -> None:
    """Refuse a new session's name that is not one folder name (it would land outside the root).

    Raises:
        UsageError: the name is empty, ``.`` or ``..``, or holds a ``/`` or ``\\``.
    """
    if name in ("", ".", "..") or "/" in name or "\\" in name:
        raise UsageError(
            f"session name '{name}' must be one folder name, with no '/' and not '..'; "
            "choose the folder with --session-path and the name with --session-name, e.g. my-run"
        )


def check_session_exists(root: str | Path, name: str) -> None:
    """Refuse to reopen a session that is not there (a folder, or a prefix on object storage).

    Raises:
        UsageError: one line with the command that lists the sessions.
    """
    root_location = Location(root)
    location = root_location / name
    if not location.is_dir():
        listing = f"'ls {root}'" if location.is_local else f"'aws s3 ls {root_location.url}/'"
        raise UsageError(f"session '{location.url}' does not exist; list sessions with {listing}")


def check_session_root(root: str | Path) -> None:
    """Refuse a local folder of sessions that is a file, lies below one, or cannot be written.

    Runs before anything is written; a URL root is probed by :meth:`Location.check` instead.

    Raises:
        UsageError: one line naming the path and what is wrong with it.
    """
    location = Location(root)
    if location.local is None:
        return
    existing = location.local
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent  # the nearest folder that exists: the sessions are made below it
    if existing.exists() and not existing.is_dir():
        where = "is" if existing == location.local else f"lies below '{existing}', which is"
        raise UsageError(
            f"--session-path '{root}' {where} a file, not a folder; pass a folder to hold the sessions"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(
            f"--session-path '{root}' cannot be written (no write permission on '{existing}'); "
            "pass a folder you can write to"
        )


class Session:
    """A run folder with its lock (on object storage, its lease).

    Args:
        root: folder that holds sessions: a local path or an fsspec URL (``s3://bucket/prefix``).
        name: the session's name; generated from the time and ``params_name`` when None.
        params_name: the parameter module's name, used for generated names.
        resume: open an existing session instead of creating a new one.
        lock: take the session's lock (a URL session's: its lease, and download its log and
            journal to go on with them). ``False`` opens an existing session for reading (playing
            a checkpoint while training goes on).

    Raises:
        UsageError: the session exists (and ``resume`` is False), does not exist (and ``resume`` is
            True), is locked by a live process, or the store behind a URL root cannot be used (no
            bucket, refused credentials, no answer).
    """

    def __init__(
        self,
        root: str | Path = DEFAULT_ROOT,
        name: str | None = None,
        params_name: str = "session",
        *,
        resume: bool = False,
        lock: bool = True,
    ) -> None:
        self.name = name or default_session_name(params_name)
        if not resume:
            check_session_name(self.name)
            check_session_root(root)
        root_location = Location(root)
        root_location.check()  # a URL's store answers, before anything is written
        self.location = root_location / self.name
        self.url = self.location.url
        self.remote = not self.location.is_local
        self.path = (
            self.location.local if self.location.local is not None else working_folder(self.url, self.name)
        )
        self.uploads = UploadCache(self.location, self.path)
        if resume:
            check_session_exists(root, self.name)
        elif self.location.is_dir() if self.remote else self.path.exists():
            raise UsageError(
                f"session '{self.url}' already exists; resume it or choose another --session-name"
            )
        self._lock = FolderLock(self.path)
        self._lease: Any = None
        self._locked = lock
        self._new_parents = [folder for folder in self.path.parents if not folder.exists()]  # for discard
        if self.remote:
            self._open_remote(resume, lock)
        else:
            self._open_local(resume, lock)
        how = ("resumed" if lock else "opened to read") if resume else "new"
        log.info("session %s (%s)", self.url, how)

    def _open_local(self, resume: bool, lock: bool) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=resume)
        except FileExistsError:  # another starter created it since the check above
            raise UsageError(
                f"session '{self.path}' already exists; resume it or choose another --session-name"
            ) from None
        except OSError as error:  # the root became unwritable since the check above, or a read-only disk
            raise UsageError(
                f"cannot create session '{self.path}' ({error.strerror}); pass a --session-path you can write to"
            ) from None
        if lock:
            try:
                self._lock.acquire(self.path)
            except BaseException:
                if not resume:
                    _remove_empty_tree(self.path)
                raise
        for folder in (self.path / "checkpoints", self.videos_path, self.path / "memory"):
            folder.mkdir(exist_ok=True)

    def _open_remote(self, resume: bool, lock: bool) -> None:
        """Take the lease, then set up the local working folder from what the URL holds."""
        if lock:
            self._acquire_lease()
        try:
            if not resume and self.path.exists():  # a session of this URL that was deleted from the store
                shutil.rmtree(self.path)
            for folder in (self.path, self.videos_path, self.path / "memory"):
                folder.mkdir(parents=True, exist_ok=True)
            if lock and resume:  # the log goes on; the journal is rewound to the checkpoint later
                restore_working_files(self.location, self.path)
        except BaseException:
            self._release_lease()
            raise

    # -- paths ---------------------------------------------------------------------------------
    # ``path`` is the session folder, or for a URL session its local working folder.
    @property
    def checkpoints_location(self) -> Location:
        """The ``checkpoints/`` folder, on disk or under the URL."""
        return self.location / "checkpoints"

    @property
    def videos_path(self) -> Path:
        """Local folder of the videos (uploaded to a URL session when it closes)."""
        return self.path / "videos"

    @property
    def log_path(self) -> Path:
        return self.path / "log.txt"

    def memory_location(self, name: str) -> Location:
        """Where the Zarr group of memory ``name`` lives: ``<session>/memory/<name>.zarr``, on disk or
        under the session's URL."""
        return self.location / "memory" / f"{name}.zarr"

    # -- metadata ------------------------------------------------------------------------------
    def read_json(self, filename: str) -> dict[str, Any]:
        """Read one of the session's JSON files (``params.json``, ``cpanel.json``, ``session.json``)."""
        path = self.location / filename
        try:
            return path.read_json()
        except FileNotFoundError:
            raise UsageError(f"session file '{path}' is missing; the session is incomplete") from None
        except json.JSONDecodeError as error:
            raise UsageError(
                f"session file '{path}' is not valid JSON ({error.msg}); the file is damaged"
            ) from None

    def info(self) -> dict[str, Any]:
        """The contents of ``session.json`` (empty before :func:`~digideep.pipeline.params.write_params`)."""
        try:
            return (self.location / "session.json").read_json()
        except FileNotFoundError:
            return {}

    def update_info(self, **fields: Any) -> dict[str, Any]:
        """Merge ``fields`` into ``session.json`` (e.g. the MLflow run id, the Prefect flow-run id);
        return what it holds now."""
        info = {**self.info(), **fields}
        (self.location / "session.json").write_json(info)
        return info

    def saved_run(self) -> SavedRun:
        """What reopening the run needs, read at once: params, cpanel, ``session.json``, finished or not.

        Raises:
            UsageError: ``params.json`` or ``cpanel.json`` is missing or not valid JSON (one line).
        """
        params = self.read_json("params.json")
        cpanel = self.read_json("cpanel.json")
        return SavedRun(params, cpanel, self.info(), self.is_done)

    def checkpoints_to_resume(self) -> Iterator[CheckpointRead]:
        """The committed checkpoints, newest first, each read and checked when asked for
        (:func:`~digideep.storage.saved_run.checkpoints_newest_first`)."""
        return checkpoints_newest_first(self.checkpoints_location)

    def clear_memories(self) -> None:
        """Delete the durable copies of the replay memories (``memory/``), leaving the folder empty:
        a run that starts over from no checkpoint writes them again."""
        memories = self.location / "memory"
        memories.delete()
        memories.mkdir()

    @property
    def is_done(self) -> bool:
        return (self.location / "done.json").exists()

    def mark_done(self, **summary: Any) -> None:
        """Record that training finished; a later resume says so instead of training again."""
        (self.location / "done.json").write_json(
            {"finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **summary}
        )

    # -- lock and lease --------------------------------------------------------------------
    def _acquire_lease(self) -> None:
        """Hold the session's lease on object storage (a lock that expires with a dead host)."""
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "flow_run_id": os.environ.get("PREFECT__FLOW_RUN_ID"),  # set by Prefect for its flow runs
        }
        self._lease = acquire_session_lease(self.url, info, ttl=lease_ttl())
        self._lease.on_lost(exit_process)  # its hung writes may land after a takeover: stop them all

    def ensure_held(self, margin: float = 0.0) -> None:
        """Raise unless this process may still write the session for ``margin`` more seconds.

        A local session's kernel lock cannot be lost. A URL session's lease can: a host cut off
        from the store past the lease's expiry, or whose lease another host took over, must stop
        without writing, since the session now belongs to the host that took it.

        Raises:
            LeaseLostError: the lease was lost or would expire within ``margin`` seconds.
        """
        if self._lease is not None:
            self._lease.ensure_held(margin)

    def _release_lease(self) -> None:
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def close(self) -> None:
        """Release the lock (a URL session's lease). Safe to call twice.

        The run uploads what a URL session keeps locally before (:mod:`digideep.storage.upload_cache`).
        """
        if self.remote:
            self._release_lease()
            self._locked = False
        if self._locked:
            self._lock.release()
            self._locked = False

    def discard(self) -> None:
        """Close a new session that failed to start and delete it: its name is free again.

        For a start that failed before any training (a tracking server that does not answer, an
        agent that cannot be built): nothing of it stays, neither the folder (nor the empty folders
        made for it, such as ``data/sessions``) nor, for a URL session, its files, working folder or
        lease. Never call it on a session with checkpoints; close its
        :class:`~digideep.pipeline.run_logging.RunLog` first.
        """
        if self.remote:  # the files first, then the lease (``.lease.json``), so no one opens it meanwhile
            for child in self.location.children():
                if child.name != LEASE_FILE:
                    child.delete()
            self.close()
        else:
            for child in self.path.iterdir():  # held locked until only the lock files are left
                if child.name not in LOCK_FILES:
                    Location(child).delete()
            self.close()
        shutil.rmtree(self.path, ignore_errors=True)
        for folder in self._new_parents:  # the folders made for it (data/sessions), unless used since
            try:
                folder.rmdir()
            except OSError:
                break

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Session({self.url!r})"


def _remove_empty_tree(path: Path) -> None:
    """Remove ``path`` if it holds nothing but empty folders (a session that never started)."""
    for child in sorted(path.rglob("*"), reverse=True):
        if child.is_dir():
            child.rmdir()
        else:
            return
    path.rmdir()
