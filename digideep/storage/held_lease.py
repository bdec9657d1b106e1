"""A held session lease: it renews itself, finds out when it is lost, and releases.

:func:`digideep.storage.lease.acquire_session_lease` hands out a :class:`Lease` (the protocol is
described there). The holder renews the record on a heartbeat thread with ``If-Match`` on its own
last write, counts its validity on its monotonic clock from the moment it sent that write, and once
a renewal is refused or it could not renew for ``ttl`` seconds, it is lost for good: it sets
:attr:`Lease.lost`, calls its ``on_lost`` callbacks (:func:`exit_process` for a training process)
and never writes the record again.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from digideep.storage.lease_holder import describe_holder
from digideep.storage.lease_store import (
    LeaseConflictError,
    LeaseMissingError,
    LeaseStore,
    Stored,
    encode_record,
)
from digideep.storage.retry import retrying

__all__ = ["LEASE_LOST_EXIT", "RELEASE_RETRY_SECONDS", "Lease", "LeaseLostError", "exit_process"]

log = logging.getLogger(__name__)

LEASE_LOST_EXIT = 75
"""Exit status of a process that stopped because it lost its session's lease (EX_TEMPFAIL)."""
RELEASE_RETRY_SECONDS = 30.0
"""At most this long a release retries deleting the record while the store fails transiently."""


class LeaseLostError(RuntimeError):
    """The session's lease was lost (taken over, or not renewable); the holder must not write."""


class Lease:
    """A held session lease; renewed by a daemon thread until :meth:`release` or until lost.

    Attributes:
        url: the record's URL (``<session url>/.lease.json``).
        owner: this holder's id (uuid4 hex), as written in the record.
        lost: set when the lease was lost; the holder must stop writing to the session.
        lost_reason: one line saying why, once lost.
        took_over: the expired record this lease replaced (None when the session was free).
    """

    def __init__(
        self,
        store: LeaseStore,
        record: dict[str, Any],
        token: str,
        sent_at: float,
        heartbeat: float,
        took_over: dict[str, Any] | None,
    ) -> None:
        self.url = store.url
        self.owner: str = record["owner"]
        self.ttl: float = record["ttl"]
        self.heartbeat = heartbeat
        self.record = record
        self.took_over = took_over
        self.lost = threading.Event()
        self.lost_reason: str | None = None
        self._store = store
        self._token = token
        self._valid_until = sent_at + self.ttl  # monotonic: no later than any other host takes over
        self._callbacks: list[Callable[[str], None]] = []
        self._lock = threading.Lock()  # held across a renewal's request
        self._lost_lock = threading.Lock()  # never held across a request: the watchdog takes it
        self._stop = threading.Event()
        self._released = False
        self._thread = threading.Thread(target=self._beat, name="digideep-lease", daemon=True)
        self._thread.start()
        self._watchdog = threading.Thread(target=self._watch, name="digideep-lease-expiry", daemon=True)
        self._watchdog.start()

    def on_lost(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(reason)`` once when the lease is lost (at once if it already is).

        It runs on the heartbeat thread: keep it short (set a flag, request a stop).
        """
        with self._lost_lock:
            if not self.lost.is_set():
                self._callbacks.append(callback)
                return
        callback(self.lost_reason or "lost")

    def remaining(self) -> float:
        """Seconds this holder can still count on the lease (0 once lost)."""
        return 0.0 if self.lost.is_set() else max(0.0, self._valid_until - time.monotonic())

    def ensure_held(self, margin: float = 0.0) -> None:
        """Raise :class:`LeaseLostError` unless the lease is held for at least ``margin`` more seconds.

        Call it right before writing to the session (e.g. before a checkpoint's commit record).
        """
        if self.lost.is_set():
            raise LeaseLostError(f"the lease {self.url} was lost: {self.lost_reason}")
        if self.remaining() <= margin:
            raise LeaseLostError(f"the lease {self.url} may expire within {margin:g} s; not writing")

    def renew(self) -> bool:
        """Renew now (the heartbeat does this every ``heartbeat`` seconds); return whether held."""
        with self._lock:
            if self._released or self.lost.is_set():
                return not self.lost.is_set()
            sent_at, now = time.monotonic(), time.time()
            record = {**self.record, "renewed": now, "expires": now + self.ttl}
            try:
                self._token = self._write_ours(record)
            except (LeaseConflictError, LeaseMissingError) as error:
                self._lose(self._taken_reason(error))
            except Exception as error:  # the store is unreachable or failing: retry until expiry
                if time.monotonic() >= self._valid_until:
                    self._lose(f"could not renew it for {self.ttl:g} s ({_one_line(error)})")
                else:
                    log.warning(
                        "renewing the session lease %s failed; retrying: %s", self.url, _one_line(error)
                    )
            else:
                self.record = record
                if not self.lost.is_set():  # the watchdog may have given it up while the write hung
                    self._valid_until = sent_at + self.ttl
        if self.lost.is_set():
            self._notify()
            return False
        return True

    def release(self) -> None:
        """Stop renewing and delete the record if it is still ours. Safe to call twice."""
        self._stop.set()
        for thread in (self._thread, self._watchdog):
            if thread is not threading.current_thread():
                thread.join()
        with self._lock:
            if self._released:
                return
            self._released = True
            if self.lost.is_set():
                return  # the record is someone else's now
            try:  # through a store that hiccups: a run that failed on an outage frees its session too
                retrying(self._delete_ours, "delete", self.url, RELEASE_RETRY_SECONDS)
            except Exception as error:  # it expires by itself after ttl (or is taken over: a dead holder)
                log.warning("could not delete the session lease %s: %s", self.url, _one_line(error))

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else "released" if self._released else "held"
        return f"Lease({self.url!r}, owner={self.owner}, {state})"

    # -- internals ----------------------------------------------------------------------------
    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat):
            if not self.renew():
                return

    def _watch(self) -> None:
        """Give the lease up the moment its validity ends, even while a renewal request hangs.

        The heartbeat only notices an expiry when a renewal returns, which a store that stopped
        answering delays by the request's timeouts: past the record's expiry plus the clock skew,
        when another host may already have taken the session over.
        """
        while not self.lost.is_set():
            left = self._valid_until - time.monotonic()
            if left <= 0:
                break
            if self._stop.wait(left):
                return
        if not self._released:
            self._lose(f"could not renew it within its {self.ttl:g} s (the store did not answer)")
            self._notify()

    def _write_ours(self, record: dict[str, Any]) -> str:
        try:
            return self._store.replace(encode_record(record), self._token)
        except LeaseConflictError:
            # a write of ours that timed out may have landed: adopt its token if the record is ours
            self._token = self._ours().token
            return self._store.replace(encode_record(record), self._token)

    def _delete_ours(self) -> None:
        try:
            self._store.delete(self._token)
        except LeaseMissingError:
            pass
        except LeaseConflictError:
            try:
                self._store.delete(self._ours().token)
            except (LeaseConflictError, LeaseMissingError):
                log.warning("the session lease %s is no longer ours; left in place", self.url)

    def _ours(self) -> Stored:
        found = self._store.read()
        if found is None:
            raise LeaseMissingError("deleted")
        if found.record.get("owner") != self.owner:
            raise LeaseConflictError(describe_holder(found.record))
        return found

    def _taken_reason(self, error: Exception) -> str:
        if isinstance(error, LeaseMissingError):
            return "its record was deleted by someone else"
        holder = str(error)
        return f"it was taken over by {holder}" if holder.startswith("host ") else "it was taken over"

    def _lose(self, reason: str) -> None:
        with self._lost_lock:
            if self.lost.is_set():  # the heartbeat and the watchdog may both find it lost
                return
            self.lost_reason = reason
            self.lost.set()
        log.error(
            "lost the session lease %s: %s; this run must stop writing to the session", self.url, reason
        )

    def _notify(self) -> None:
        with self._lost_lock:
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback(self.lost_reason or "lost")
            except Exception:
                log.exception("a lease-lost callback failed")


def exit_process(reason: str) -> None:
    """An ``on_lost`` callback: end this process at once with :data:`LEASE_LOST_EXIT`.

    A process cannot take back the requests it already sent: a write that passed
    :meth:`Lease.ensure_held` and then hung on a dead connection is retried, and lands, whenever
    the network comes back, possibly after another host took the session over. Only ending the
    process ends those retries, so a training process whose lease is lost stops where it is (what a
    fencing-less lease holder must do); its session resumes from its newest committed checkpoint.
    """
    print(f"digideep: error: lost the session lease ({reason}); stopping at once", file=sys.stderr)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(LEASE_LOST_EXIT)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__
