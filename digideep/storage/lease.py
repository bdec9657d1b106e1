"""A session lock for object storage: a lease that a dead host loses by itself.

A local session is locked with a kernel lock (``flock``, see :mod:`digideep.storage.session_lock`),
which dies with its process. Object stores have no such lock and a host can die without cleaning
up, so a session under a URL is held by a *lease*: the object ``<session url>/.lease.json``::

    {"owner": "<uuid4 hex>", "host": "...", "pid": 123, "flow_run_id": "..." | null,
     "info": {...}, "ttl": 120.0, "created": <unix s>, "renewed": <unix s>, "expires": <unix s>,
     "process": {"boot_id": "...", "pid_namespace": "pid:[4026531836]", "pid": 123, "started": <ticks>}}

- **Create**: a conditional write that succeeds only if the object does not exist
  (S3 ``PutObject`` with ``If-None-Match: *``). Of any number of simultaneous starters one wins.
- **Renew**: a heartbeat thread rewrites the record every ``ttl / 4`` with ``If-Match: <etag>`` of
  the last write, so a renewal succeeds only while the record is still ours.
- **Take over**: a record whose ``expires`` passed (plus a clock-skew margin) belongs to a dead or
  cut-off host; a starter replaces it with ``If-Match`` on the expired record's etag, so of several
  starters racing for it exactly one wins. A live lease is never taken.
- **Lose**: a holder whose renewal is refused (another host took over after this one was cut off)
  or that could not renew for ``ttl`` seconds (store unreachable) sets :attr:`Lease.lost` and calls
  its ``on_lost`` callbacks; it never writes the record again. The owner of the lease must stop
  writing to the session (see :meth:`Lease.ensure_held`).
- **Release**: deletes the record with ``If-Match``, only if it is still ours; safe to call twice.
  A release retries through a store that fails transiently (at most 30 s), so a run that failed
  on a store outage still frees its session once the store is back.
- **A dead holder on this machine**: ``process`` says which process holds the lease: the kernel's
  boot id, the pid namespace, the pid and the process's start time (field 22 of
  ``/proc/<pid>/stat``, clock ticks since boot). A starter that finds all of them naming this
  machine's boot and namespace, and no such process alive (no pid, or a pid reused by a process
  that started at another time), has proof that the holder is dead (``kill -9``, a crash, a run
  whose store failed past its retries) and takes the lease over at once, with one log line,
  instead of waiting out its ttl. A holder on another machine (or in another container) cannot be
  checked: it is refused with the UTC time, and the seconds, from which a retry takes it over.

Time. Expiry compares the record's own ``expires`` (the holder's wall clock) with the starter's
wall clock, plus ``clock_skew`` seconds (default 10): hosts are assumed to agree within that margin
(NTP keeps them within milliseconds). The holder itself does not trust wall clocks: it counts its
validity on its monotonic clock from the moment it *sent* its last successful write, so it believes
itself lost no later than any other host may take over. A process frozen past its expiry (SIGSTOP,
a paused VM) learns it lost the lease at its next renewal; a writer therefore calls
:meth:`Lease.ensure_held` right before each commit. This fencing is advisory, as with every lease on
a store without multi-object transactions.

Other stores. The store sits behind :class:`LeaseStore` (read, create-if-absent, replace-if-token,
delete-if-token). GCS would implement it with generations: create with ``ifGenerationMatch=0``,
replace and delete with ``ifGenerationMatch=<generation>`` (the token), e.g. through
``google-cloud-storage`` or ``gcsfs``' ``_call`` with those query parameters. Azure Blob would use
``If-None-Match: *`` and ``If-Match: <etag>`` on Put Blob and Delete Blob (Azure's own blob leases
last at most 60 s or forever, so the record is still needed for the holder's identity).
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from digideep.errors import UsageError
from digideep.storage.held_lease import Lease
from digideep.storage.lease_holder import dead_here, describe_holder, this_process
from digideep.storage.lease_store import LeaseConflictError, LeaseMissingError, encode_record, store_for

__all__ = ["DEFAULT_CLOCK_SKEW", "DEFAULT_TTL", "LEASE_MARGIN", "acquire_session_lease"]

log = logging.getLogger(__name__)

DEFAULT_TTL = 120.0
"""Seconds a lease lives without renewal: how long a retry waits for a dead host's session."""
DEFAULT_CLOCK_SKEW = 10.0
"""Seconds by which hosts' clocks may disagree; added to a record's expiry before taking it over."""
LEASE_MARGIN = 15.0
"""Seconds the lease must still be held for when a checkpoint commits (and the least ttl / 2)."""
_ATTEMPTS = 3


def acquire_session_lease(
    url: str,
    info: dict[str, Any],
    ttl: float = DEFAULT_TTL,
    heartbeat: float | None = None,
    *,
    clock_skew: float = DEFAULT_CLOCK_SKEW,
) -> Lease:
    """Take the lease of the session at ``url``, or refuse in one line naming its holder.

    Args:
        url: the session's URL, e.g. ``s3://bucket/sessions/run-1``; the record is
            ``<url>/.lease.json``.
        info: what identifies the run: ``flow_run_id`` (the caller fills it from Prefect, which the
            library never imports; None outside Prefect) and anything else worth showing.
        ttl: seconds the lease lives without renewal; a dead host's session is free after that.
        heartbeat: seconds between renewals; ``ttl / 4`` by default.
        clock_skew: seconds hosts' clocks may disagree by; an expired record is taken over only
            ``clock_skew`` seconds after its ``expires``.

    Returns:
        The held Lease, renewing itself on a daemon thread.

    Raises:
        UsageError: the session is held by a live lease; the store or bucket is unreachable or
            refuses the credentials; the URL's scheme has no lease store; bad ``ttl``/``heartbeat``.
    """
    heartbeat = ttl / 4 if heartbeat is None else heartbeat
    if not (ttl > 0 and 0 < heartbeat < ttl and clock_skew >= 0):
        raise UsageError(
            f"a session lease needs ttl > 0, 0 < heartbeat < ttl and clock_skew >= 0 "
            f"(got ttl={ttl}, heartbeat={heartbeat}, clock_skew={clock_skew})"
        )
    store = store_for(url, timeout=max(0.5, min(5.0, heartbeat)))
    owner = uuid.uuid4().hex
    extra = {key: value for key, value in info.items() if key != "flow_run_id"}
    flow_run_id = info.get("flow_run_id")
    sent: tuple[float, Any] | None = None  # (sent_at, took_over) of the last write, whose answer may be lost
    for _ in range(_ATTEMPTS):
        found = _wait_out_own_flow_run(store, flow_run_id, ttl, clock_skew, owner)
        if found is not None and sent is not None and found.record.get("owner") == owner:
            # a write of ours landed, but its answer was lost (a reset connection) and the retry of
            # that write then met our own record: it is ours, valid from when it was sent
            return Lease(store, found.record, found.token, sent[0], heartbeat, sent[1])
        sent_at, now = time.monotonic(), time.time()
        record = {
            "owner": owner,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "flow_run_id": str(flow_run_id) if flow_run_id else None,
            "info": extra,
            "ttl": float(ttl),
            "created": now,
            "renewed": now,
            "expires": now + ttl,
            "process": this_process(),
        }
        sent = (sent_at, None if found is None else found.record)
        try:
            if found is None:
                token = store.create(encode_record(record))
                took_over = None
            else:
                dead = dead_here(found.record)
                if not dead and now <= float(found.record["expires"]) + clock_skew:
                    raise UsageError(_busy(url, found.record, now, clock_skew))
                token = store.replace(encode_record(record), found.token)
                took_over = found.record
                if dead:
                    log.warning(
                        "took over the session lease %s of %s: that process no longer runs on this machine",
                        store.url,
                        describe_holder(found.record),
                    )
                else:
                    log.warning(
                        "took over the expired session lease %s of %s",
                        store.url,
                        describe_holder(found.record),
                    )
        except (LeaseConflictError, LeaseMissingError):
            continue  # another starter moved first: look again
        return Lease(store, record, token, sent_at, heartbeat, took_over)
    found = store.read()
    if found is not None:
        raise UsageError(_busy(url, found.record, time.time(), clock_skew))
    raise UsageError(f"the lease {store.url} changed under every attempt to take it; try again")


def _wait_out_own_flow_run(store: Any, flow_run_id: Any, ttl: float, clock_skew: float, owner: str) -> Any:
    """Read the lease; when it is held for this very flow run, wait for it to expire first.

    A lease held under this process's own flow-run id belongs to an earlier attempt of the same
    run: Prefect retried it (the UI's Retry, or the crash watcher) because that attempt's host died.
    That attempt cannot renew any more, so rather than refusing the retry, wait out the lease
    (at most ``ttl + clock_skew`` past the moment it was last seen renewed). A record that keeps
    being renewed means the earlier attempt is alive after all: then it is refused as usual.
    """
    found = store.read()
    if found is None or not flow_run_id or found.record.get("flow_run_id") != str(flow_run_id):
        return found
    if found.record.get("owner") == owner:  # this very call's write landed: the caller adopts it
        return found
    if dead_here(found.record):  # taken over at once by the caller
        return found
    deadline = time.time() + ttl + 2 * clock_skew
    while found is not None and time.time() <= float(found.record["expires"]) + clock_skew < deadline:
        wait = float(found.record["expires"]) + clock_skew - time.time() + 0.1
        log.warning(
            "the session lease %s is held by an earlier attempt of this flow run (%s); waiting %.0f s for it "
            "to expire",
            store.url,
            describe_holder(found.record),
            wait,
        )
        time.sleep(max(0.1, wait))
        found = store.read()
    return found


def _busy(url: str, record: dict[str, Any], now: float, clock_skew: float) -> str:
    """The refusal: who holds the session and the moment from which a retry takes it over.

    That moment is the record's expiry plus the clock-skew margin (what :func:`acquire_session_lease`
    waits for), rounded up to a whole second, so a retry at the time stated succeeds unless the
    holder renews its lease meanwhile (a live run renews it every ttl / 4).
    """
    free_at = math.ceil(float(record["expires"]) + clock_skew)
    when = datetime.fromtimestamp(free_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    seconds = max(1, math.ceil(free_at - now))
    return (
        f"session '{url}' is in use by {describe_holder(record)}; a retry can take it over from {when} "
        f"(in {seconds} s) if that run stops renewing its lease; wait for it to finish or stop it"
    )
