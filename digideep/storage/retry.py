"""How a session's reads and writes live through an object store that hiccups.

Object stores fail for a moment all the time: a restart or a network blip refuses or resets
connections for seconds, a busy bucket answers ``503 SlowDown``, a node answers ``500``. The
storage clients retry a few times within a few seconds (botocore five attempts, s3fs five more on
throttling); a 20 s outage outlasts both. Every request of a session on object storage goes through
:func:`retrying` (the :class:`~digideep.storage.location.Location` of its files) or
:func:`retrying_async` (the Zarr store of its memory), which retries such *transient* errors with
exponential backoff and jitter for up to ``$DIGIDEEP_STORE_RETRY_SECONDS`` seconds (default 120)
in all, then fails the run in one line (:class:`StoreUnavailableError`). Every request retried is
a whole GET, PUT, LIST or DELETE, so a retry never leaves half an object.

*Permanent* errors fail at once, in one line naming the URL: access refused (403, a wrong key) and
a bucket that does not exist. A missing object is not an error of the store: ``FileNotFoundError``
passes through unchanged, callers rely on it.

The jitter draws from a generator of this module's own (``random.Random()`` seeded by the OS),
never from Python's global ``random`` or numpy's: those streams are checkpointed, and a draw whose
moment depends on the network would make a resumed run differ from an uninterrupted one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

from digideep.errors import UsageError

__all__ = [
    "BOTOCORE_RETRIES",
    "RETRY_SECONDS_VARIABLE",
    "StoreUnavailableError",
    "is_transient",
    "permanent_error",
    "retry_seconds",
    "retrying",
    "retrying_async",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_SECONDS_VARIABLE = "DIGIDEEP_STORE_RETRY_SECONDS"
DEFAULT_RETRY_SECONDS = 120.0
"""How long a request is retried in all before the run fails (a store restart takes seconds)."""
FIRST_DELAY = 0.5
"""Seconds before the first retry; each later one waits twice as long, up to :data:`MAX_DELAY`."""
MAX_DELAY = 10.0
_THROTTLING = {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests"}
_SERVER_SIDE = {"InternalError", "ServiceUnavailable", "RequestTimeout", "RequestTimeTooSkewed"}
_DENIED = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled"}
_jitter = random.Random()  # its own stream: the global ones are checkpointed
BOTOCORE_RETRIES = {"total_max_attempts": 1, "mode": "standard"}
"""botocore's own retries, off: what every S3 client of digideep is configured with (``retries`` of
botocore's ``Config``: the session's filesystems, the lease store), so that only :func:`retrying`
retries. botocore's retries would add their few seconds, and their jitter draws from Python's global
``random``, a stream that checkpoints hold: an outage would make a resumed run differ."""


class StoreUnavailableError(UsageError):
    """The object store kept failing for the whole retry time; the run stops at its last checkpoint."""


def retry_seconds() -> float:
    """``$DIGIDEEP_STORE_RETRY_SECONDS`` (seconds a request is retried in all; 0: not retried), or 120."""
    text = os.environ.get(RETRY_SECONDS_VARIABLE)
    if not text:
        return DEFAULT_RETRY_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise UsageError(f"{RETRY_SECONDS_VARIABLE} must be a number of seconds >= 0, got '{text}'")
    return seconds


def retrying(call: Callable[[], T], what: str, url: str, seconds: float | None = None) -> T:
    """``call()``, retried on transient errors of the store for up to :func:`retry_seconds` seconds.

    Args:
        call: one whole request (or a few, each safe to repeat).
        what: what it does, for the messages (``"read"``, ``"write"``, ``"list"``).
        url: what it reads or writes (never carries a credential).
        seconds: retry for this long instead of :func:`retry_seconds`.

    Raises:
        StoreUnavailableError: the store failed transiently for the whole retry time.
        UsageError: a permanent error (access refused, no such bucket), at once.
    """
    backoff = _Backoff(what, url, seconds)
    while True:
        try:
            return call()
        except Exception as error:
            delay = backoff.next_delay(error)
        time.sleep(delay)


async def retrying_async(call: Callable[[], Awaitable[T]], what: str, url: str) -> T:
    """:func:`retrying` for a coroutine: ``await call()``, retried the same way (a fresh coroutine each)."""
    backoff = _Backoff(what, url)
    while True:
        try:
            return await call()
        except Exception as error:
            delay = backoff.next_delay(error)
        await asyncio.sleep(delay)


class _Backoff:
    """One request's retries: the delays, the deadline, the one warning, the final error."""

    def __init__(self, what: str, url: str, seconds: float | None = None) -> None:
        self.what, self.url = what, url
        self.budget = retry_seconds() if seconds is None else seconds
        self.deadline = time.monotonic() + self.budget
        self.attempts = 0

    def next_delay(self, error: Exception) -> float:
        """Seconds to wait before the next attempt; raises what the caller must see instead."""
        refused = permanent_error(error, self.url)
        if refused is not None:
            raise refused from None
        if not is_transient(error):
            raise error
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise StoreUnavailableError(
                f"the object store failed to {self.what} '{self.url}' for {self.budget:g} s "
                f"({_describe(error)}); the session keeps its last checkpoint: resume it once the store "
                f"answers (${RETRY_SECONDS_VARIABLE} sets how long to retry)"
            ) from None
        if self.attempts == 0:
            log.warning(
                "the object store failed to %s %s (%s); retrying for up to %g s",
                self.what,
                self.url,
                _describe(error),
                self.budget,
            )
        delay = min(MAX_DELAY, FIRST_DELAY * 2**self.attempts)
        self.attempts += 1
        return min(left, delay / 2 + _jitter.uniform(0, delay / 2))


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is a store's momentary failure, worth retrying.

    Transient: a connection refused, reset or timed out; a 5xx answer; throttling (``SlowDown``,
    429). Everything else (a 4xx answer, a missing object, a bug) is not.
    """
    for cause in _chain(error):
        if isinstance(cause, ConnectionError | TimeoutError):  # refused, reset, aborted, timed out
            return True
        code, status = _answer(cause)
        if (
            code in _THROTTLING
            or code in _SERVER_SIDE
            or (status is not None and (status >= 500 or status == 429))
        ):
            return True
        if isinstance(cause, _transport_errors()):
            return True
    return False


def permanent_error(error: BaseException, url: str) -> UsageError | None:
    """One line for an error that no retry can fix (access refused, no bucket), else None."""
    bucket = url.split("://", 1)[-1].split("/", 1)[0]
    causes = list(_chain(error))
    answers = [_answer(cause) for cause in causes]
    codes = {code for code, _ in answers if code}
    if "NoSuchBucket" in codes:
        return UsageError(f"'{url}': bucket '{bucket}' does not exist; create it or fix the session path")
    denied = codes & _DENIED or {code for code, status in answers if status == 403 and code}
    if denied or any(isinstance(cause, PermissionError) for cause in causes):
        return UsageError(
            f"'{url}': the store refused access ({min(denied) if denied else 'access denied'}); check the "
            "credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or the profile) and the bucket's permissions"
        )
    return None


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error``, then what caused it (``__cause__``, else ``__context__``), without cycles."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _answer(error: BaseException) -> tuple[str | None, int | None]:
    """The error code and HTTP status of a store's answer (botocore's ``ClientError``), or Nones."""
    response: Any = getattr(error, "response", None)
    if not isinstance(response, dict):
        return None, None
    code = response.get("Error", {}).get("Code")
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return (str(code) if code else None), (int(status) if status else None)


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The storage clients' own types for a connection that failed (those installed)."""
    found: list[type[BaseException]] = []
    try:
        from botocore import exceptions as boto

        found += [boto.ConnectionError, boto.HTTPClientError, boto.IncompleteReadError]
        found += [getattr(boto, "ResponseStreamingError", boto.HTTPClientError)]
    except ImportError:
        pass
    try:
        import aiohttp

        found += [aiohttp.ClientConnectionError, aiohttp.ClientPayloadError]
    except ImportError:
        pass
    return tuple(found)


def _describe(error: BaseException) -> str:
    for cause in _chain(error):
        code, status = _answer(cause)
        if code or status:
            return f"{status or ''} {code or ''}".strip()
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
