"""How tracking fails: fast and in one line at start, quietly (with warnings) during a run.

MLflow reads ``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` (default 7, with exponential backoff) and
``MLFLOW_HTTP_REQUEST_TIMEOUT`` (default 120 s) at every request, so an unreachable server blocks a
call for minutes unless they are lowered; :func:`http_limits` lowers them for a block of calls.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from mlflow.exceptions import MlflowException

from digideep.errors import UsageError

__all__ = ["TrackingUnavailableError", "http_limits", "is_refusal", "one_line"]


class TrackingUnavailableError(UsageError):
    """The tracking store could not be reached or used when the run started."""


@contextlib.contextmanager
def http_limits(retries: int, timeout: int) -> Iterator[None]:
    """Bound MLflow's HTTP retries and per-request timeout (seconds) inside the block."""
    names = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(retries), "MLFLOW_HTTP_REQUEST_TIMEOUT": str(timeout)}
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update(names)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def is_refusal(error: BaseException) -> bool:
    """Whether the store refused a request for good (HTTP 4xx but 429: bad value, deleted run)."""
    if not isinstance(error, MlflowException):
        return False
    status = error.get_http_status_code()
    return 400 <= status < 500 and status != 429


def one_line(error: BaseException) -> str:
    """``"<ExceptionType>: <first line of the message>"``, at most 300 characters."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:300]
