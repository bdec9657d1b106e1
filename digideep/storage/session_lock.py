"""The lock of a local session folder, and how long a URL session's lease lives.

Only one process may use a session at a time: a second one is refused with a one-line message
naming the holder. The lock is a kernel lock on ``.lock`` (:class:`filelock.FileLock`), so it dies
with its holder: a crashed run leaves no stale lock to clean up, and no starter ever removes
another's lock file (removing and retaking by hand let two starters hold the lock at once).
Processes forked after the lock was taken (the environment workers) share it until they exit.
A session on object storage holds a lease instead (:mod:`digideep.storage.lease`), whose time to
live is :func:`lease_ttl`.
"""

from __future__ import annotations

import json
import math
import os
import socket
from pathlib import Path
from typing import Any

import psutil
from filelock import FileLock, Timeout

from digideep.errors import UsageError
from digideep.storage.files import atomic_write_json
from digideep.storage.lease import DEFAULT_TTL, LEASE_MARGIN

__all__ = ["LEASE_TTL_VARIABLE", "LOCK_FILES", "FolderLock", "lease_ttl"]

LOCK_FILES = (".lock", ".lock.json")
"""The kernel lock's file and its holder's pid and host (for the message that refuses a second one)."""
LEASE_TTL_VARIABLE = "DIGIDEEP_LEASE_TTL"
"""Seconds a URL session's lease lives without renewal (120 when unset)."""


class FolderLock:
    """The kernel lock on ``<folder>/.lock``, with its holder's pid and host in ``.lock.json``.

    Args:
        folder: the session folder (it must exist before :meth:`acquire`).
    """

    def __init__(self, folder: Path) -> None:
        # thread_local=False: the Session owns the lock whichever thread (a Prefect task) closes it
        self._lock = FileLock(folder / LOCK_FILES[0], timeout=0, thread_local=False)
        self._owner_path = folder / LOCK_FILES[1]

    def acquire(self, shown: Path | str) -> None:
        """Take the lock now or refuse.

        Raises:
            UsageError: another live process holds it (named when known); ``shown`` names the session.
        """
        try:
            self._lock.acquire()
        except Timeout:
            raise UsageError(
                f"session '{shown}' is in use by {self._holder_words()}; wait for it to finish or stop it"
            ) from None
        atomic_write_json(self._owner_path, {"pid": os.getpid(), "host": socket.gethostname()})

    def release(self) -> None:
        """Remove the holder's record (still ours: the kernel lock is held until after), then unlock."""
        self._owner_path.unlink(missing_ok=True)
        self._lock.release()

    def holder(self) -> str | None:
        """Who holds the lock now (``process <pid> on <host>``, or ``another process``), None when
        nobody does: the lock is taken and let go at once to tell, the holder's record left alone."""
        try:
            self._lock.acquire()
        except Timeout:
            return self._holder_words()
        self._lock.release()
        return None

    def _holder_words(self) -> str:
        """The holder as its record names it, for a message: ``process <pid> on <host>``."""
        owner = _read_owner(self._owner_path)
        return f"process {owner['pid']} on {owner['host']}" if owner else "another process"


def lease_ttl() -> float:
    """The lease's time to live: ``$DIGIDEEP_LEASE_TTL`` seconds, or 120.

    At least twice the margin a checkpoint needs the lease held for (``lease.LEASE_MARGIN``, 15 s):
    the lease is renewed every ttl / 4, so the margin is there between renewals with room to spare.

    Raises:
        UsageError: the variable is set but not a number of seconds of at least that.
    """
    value = os.environ.get(LEASE_TTL_VARIABLE, "").strip()
    if not value:
        return DEFAULT_TTL
    try:
        ttl = float(value)
    except ValueError:
        ttl = float("nan")
    if not (ttl >= 2 * LEASE_MARGIN and math.isfinite(ttl)):  # refuses nan and inf too
        raise UsageError(
            f"{LEASE_TTL_VARIABLE}={value!r} is not a number of seconds >= {2 * LEASE_MARGIN:g} (a checkpoint "
            f"needs the lease held {LEASE_MARGIN:g} s more); unset it (120) or set e.g. 30"
        )
    return ttl


def _read_owner(path: Path) -> dict[str, Any] | None:
    """The pid and host of the lock's holder, or None when unknown or left by a process now gone."""
    try:
        owner = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None  # the holder has not written it yet
    pid = owner.get("pid") if isinstance(owner, dict) else None
    if not isinstance(pid, int) or (owner.get("host") == socket.gethostname() and not psutil.pid_exists(pid)):
        return None  # left by a crashed holder; the new one has not written its own yet
    return owner
