"""Where a session lease lives: conditional operations on one small record in an object store.

:class:`LeaseStore` is the whole contract a lease needs: read the record with a token (an etag, a
generation), create it only if absent, replace or delete it only if the token still matches.
:class:`S3LeaseStore` implements it for S3 and S3-compatible stores (MinIO, moto) with
``If-None-Match: *`` and ``If-Match: <etag>``. See :mod:`digideep.storage.lease` for GCS and Azure.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlparse

from digideep.errors import UsageError
from digideep.storage.retry import BOTOCORE_RETRIES, StoreUnavailableError, retrying

__all__ = [
    "LEASE_FILE",
    "LeaseConflictError",
    "LeaseMissingError",
    "LeaseStore",
    "S3LeaseStore",
    "Stored",
    "encode_record",
    "store_for",
]

LEASE_FILE = ".lease.json"


class LeaseConflictError(Exception):
    """A conditional write failed: the record exists (create) or changed (replace, delete)."""


class LeaseMissingError(Exception):
    """The record does not exist."""


@dataclass(frozen=True)
class Stored:
    """A record as read from the store, with the token that conditional writes must match."""

    record: dict[str, Any]
    token: str


class LeaseStore(Protocol):
    """Conditional operations on one lease record; raise ``LeaseConflictError`` or ``LeaseMissingError`` on failure."""

    url: str

    def read(self) -> Stored | None: ...

    def create(self, body: bytes) -> str: ...

    def replace(self, body: bytes, token: str) -> str: ...

    def delete(self, token: str) -> None: ...


class S3LeaseStore:
    """The record on S3 (or an S3-compatible store), through boto3.

    Credentials, region and endpoint come from the environment as boto3 reads them
    (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ...). Requests time out
    within ``timeout`` seconds so that a heartbeat never hangs past its lease. A request that fails
    transiently is retried for up to ``timeout`` seconds more by
    :func:`~digideep.storage.retry.retrying`, as every request of a session is; botocore's own
    retries are off (:data:`~digideep.storage.retry.BOTOCORE_RETRIES`): their jitter drew from
    Python's global ``random``, on the heartbeat's thread, at moments that depend on the network.
    """

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        parsed = urlparse(url)
        self.url = f"{url.rstrip('/')}/{LEASE_FILE}"
        self.bucket = parsed.netloc
        self.key = f"{parsed.path.strip('/')}/{LEASE_FILE}".lstrip("/")
        self.timeout = timeout
        self.client = _s3_client(timeout)

    def read(self) -> Stored | None:
        try:
            answer = self._call("read", self.client.get_object, Bucket=self.bucket, Key=self.key)
        except LeaseMissingError:
            return None
        body = answer["Body"].read()
        try:
            record = json.loads(body)
            record["expires"] = float(record["expires"])
            record["owner"] = str(record["owner"])
        except (ValueError, KeyError, TypeError):
            raise UsageError(
                f"the lease record {self.url} is unreadable; if no run uses this session, delete it"
            ) from None
        return Stored(record, answer["ETag"])

    def create(self, body: bytes) -> str:
        return self._put(body, IfNoneMatch="*")

    def replace(self, body: bytes, token: str) -> str:
        return self._put(body, IfMatch=token)

    def delete(self, token: str) -> None:
        self._call("delete", self.client.delete_object, Bucket=self.bucket, Key=self.key, IfMatch=token)

    def _put(self, body: bytes, **condition: str) -> str:
        answer = self._call(
            "write",
            self.client.put_object,
            Bucket=self.bucket,
            Key=self.key,
            Body=body,
            ContentType="application/json",
            **condition,
        )
        return answer["ETag"]

    def _call(self, what: str, method: Callable[..., dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        try:
            return retrying(lambda: method(**kwargs), what, self.url, seconds=self.timeout)
        except ClientError as error:
            code = str(error.response.get("Error", {}).get("Code", ""))
            status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status in (409, 412) or code in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise LeaseConflictError(code) from None  # 409: a concurrent conditional write; try again
            if code in ("NoSuchKey", "404") or (status == 404 and code != "NoSuchBucket"):
                raise LeaseMissingError(code) from None
            if code == "NoSuchBucket":
                raise UsageError(
                    f"the bucket of {self.url} does not exist; create it or fix the URL"
                ) from None
            if status == 403 or code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                raise UsageError(
                    f"access to {self.url} was denied ({code}); check the AWS_* credentials"
                ) from None
            raise
        except NoCredentialsError:
            raise UsageError(
                f"no credentials for {self.url}; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
            ) from None
        except (BotoCoreError, StoreUnavailableError) as error:
            cause = error.__context__ if isinstance(error, StoreUnavailableError) else error
            raise UsageError(
                f"cannot reach the object store of {self.url} ({type(cause or error).__name__}); "
                "check AWS_ENDPOINT_URL and the network"
            ) from None


_CLIENTS: dict[tuple[Any, ...], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _s3_client(timeout: float) -> Any:
    """One boto3 S3 client per process, timeout and AWS_* environment: making one is slow
    (docs/measurements.md).

    Keyed by pid so that a forked process makes its own (a client is not fork-safe).
    """
    key = (os.getpid(), timeout, tuple(sorted(v for v in os.environ.items() if v[0].startswith("AWS_"))))
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            import boto3
            from botocore.config import Config

            config = Config(
                connect_timeout=timeout,
                read_timeout=timeout,
                retries=dict(BOTOCORE_RETRIES),  # retried by storage.retry, on a generator of its own
            )
            _CLIENTS[key] = boto3.session.Session().client("s3", config=config)
        return _CLIENTS[key]


def store_for(url: str, timeout: float = 5.0) -> LeaseStore:
    """The lease store of a session URL; one line naming the scheme when it has none yet."""
    scheme = urlparse(url).scheme
    if scheme in ("s3", "s3a"):
        return S3LeaseStore(url, timeout)
    raise UsageError(
        f"session leases on {scheme}:// URLs are not supported yet ({url}); use s3:// or a local path"
    )


def encode_record(record: dict[str, Any]) -> bytes:
    """A lease record as it is stored: JSON with sorted keys."""
    return json.dumps(record, sort_keys=True).encode()
