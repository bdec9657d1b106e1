"""A Prefect server and process worker for the flow tests, and this process's client pointed at one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prefect.settings import PREFECT_API_URL, temporary_settings

from digideep_stack.local_stack import LocalStack
from tests.helpers import free_port


@contextmanager
def running_stack(home: Path, mlflow_uri: str, **extra_env: str) -> Iterator[LocalStack]:
    """``LocalStack`` on a free port with the deployments of prefect.yaml, its worker tracking to
    ``mlflow_uri``; stopped, with every process it started, on the way out."""
    local = LocalStack(
        port=free_port(),
        home=home,
        extra_env={
            "MLFLOW_TRACKING_URI": mlflow_uri,
            "PREFECT_WORKER_QUERY_SECONDS": "1",
            "PYTHONHASHSEED": "0",
            **extra_env,
        },
    )
    try:
        local.up()
        yield local
    finally:
        local.stop()


@contextmanager
def client_of(local: LocalStack) -> Iterator[LocalStack]:
    """This process's Prefect client pointed at ``local`` in the block; what flows run here left
    queued reaches it on the way out."""
    with temporary_settings({PREFECT_API_URL: local.api_url}):
        try:
            yield local
        finally:
            drain_prefect_clients()


@contextmanager
def local_stack(home: Path, mlflow_uri: str, **extra_env: str) -> Iterator[LocalStack]:
    """:func:`running_stack` with this process's client pointed at it (:func:`client_of`)."""
    with running_stack(home, mlflow_uri, **extra_env) as local, client_of(local):
        yield local


def drain_prefect_clients(timeout: float = 30.0) -> None:
    """Send what flows run in this process left queued (events, logs) while their server is still up.

    Otherwise Prefect's background workers keep them and, at interpreter exit, retry them against a
    server that is gone, holding pytest's exit for minutes.
    """
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (EventsWorker, APILogWorker):
        worker.drain_all(timeout=timeout)
