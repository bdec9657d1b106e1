"""A Prefect server for one command: what ``digideep train`` runs its flow against when none is set.

Without ``PREFECT_API_URL`` Prefect would start a temporary server of its own, as a child in the
command's process group: a terminal's Ctrl-C (SIGINT to the whole group) then stops that server
while the flow still checkpoints and reports to it, and the command hung for minutes on its
retries before failing with an ``httpx.ConnectError`` traceback. :func:`prefect_api` starts the same
kind of server (``prefect server start``, no UI, no scheduler) in a session of its own instead, so
only digideep gets the Ctrl-C; it stops the server itself once the flow has returned and Prefect's
queued events and logs have reached it.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prefect.events.worker import EventsWorker
from prefect.logging.handlers import APILogWorker
from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

from digideep.errors import UsageError
from digideep.pipeline.signals import raise_if_stopped
from digideep.utility.processes import free_port, stop_tree, terminated_with_parent, wait_for_http
from digideep_stack.local_stack import executable

__all__ = ["prefect_api"]

log = logging.getLogger(__name__)

START_TIMEOUT = 120.0
"""Seconds the temporary server may take to answer (its database migrations included)."""

DRAIN_TIMEOUT = 30.0
"""Seconds left to Prefect's background clients to send what they hold before the server stops."""


@contextmanager
def prefect_api() -> Iterator[str]:
    """The Prefect API to run flows against: the configured one, else a temporary server's.

    The temporary server uses the same database as Prefect's own (``PREFECT_HOME``), so its flow
    runs can be seen later under ``prefect server start``. Its output goes to a scratch log, named
    in the error when it fails to start and deleted afterwards.

    A stop signal recorded while the temporary server starts (seconds, its database migrations
    included) ends the wait there and stops the server (:func:`~digideep.pipeline.signals.raise_if_stopped`).

    Raises:
        UsageError: the temporary server exited while starting or did not answer in time.
        StoppedBeforeStartError: a stop signal came while it started.
    """
    configured = get_current_settings().api.url
    if configured:
        yield configured
        return
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    with tempfile.TemporaryDirectory(prefix="digideep-prefect-") as scratch:
        server_log = Path(scratch) / "server.log"
        with open(server_log, "wb") as output:
            server = subprocess.Popen(
                [executable("prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port),
                 "--no-ui", "--no-scheduler", "--no-late-runs", "--analytics-off"],
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a terminal's Ctrl-C reaches digideep only: the flow keeps its API
                preexec_fn=terminated_with_parent(),  # and a kill -9 of digideep does not leave it running
            )  # fmt: skip
        try:
            try:
                wait_for_http(
                    f"{api}/health",
                    server,
                    "the temporary Prefect server",
                    START_TIMEOUT,
                    check=raise_if_stopped,
                )
            except RuntimeError as error:
                tail = server_log.read_text(errors="replace").strip().splitlines()[-1:]
                raise UsageError(
                    f"{error} ({' '.join(tail) or 'no output'}); set PREFECT_API_URL to a running server"
                ) from None
            log.info("a temporary Prefect server on %s, stopped when the run ends", api)
            with temporary_settings({PREFECT_API_URL: api}):
                try:
                    yield api
                finally:
                    for worker in (EventsWorker, APILogWorker):  # what the flow run left queued
                        worker.drain_all(timeout=DRAIN_TIMEOUT)
        finally:
            stop_tree(server, grace=10.0, first=signal.SIGTERM)  # uvicorn's clean shutdown
