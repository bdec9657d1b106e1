"""Where a session lives: a local folder or a prefix in an object store, addressed the same way.

A :class:`Location` is a path-like handle on a folder or file given as a local path
(``data/sessions``, ``file:///mnt/runs``) or an fsspec URL (``s3://bucket/prefix``, ``gs://...``,
``az://...``). It offers what a session needs and nothing more: read and write whole files, list a
folder, delete, test for existence, and open a memory's Zarr group here (:meth:`Location.zarr_store`,
:meth:`Location.open_group`; the object-store side in :mod:`digideep.storage.objects`). Writes are
atomic for readers on both kinds:

- local disk: a temporary sibling, fsynced and renamed into place (as :mod:`digideep.storage.files`);
- object store: one PUT, which an object store applies whole or not at all.

Object stores have no rename, so nothing here renames on them; callers that commit several files
(checkpoints) write a small record last (see :mod:`digideep.storage.checkpoint`). Every request
to an object store is retried through the store's transient failures (a restart, throttling) for a
bounded time, and a permanent one (access refused, no bucket) fails at once in one line: see
:mod:`digideep.storage.retry`.

Credentials and endpoints come from the environment, as the storage's own client reads them: for
S3, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL`` (MinIO, moto, ...) and
profiles; s3fs needs the ``s3`` extra (``pip install 'digideep[s3]'``). Directory listings are never
cached, so a second process (a retry on another machine) sees what the first wrote.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from digideep.errors import UsageError
from digideep.storage.files import atomic_write_bytes, fsync_dir
from digideep.storage.retry import BOTOCORE_RETRIES, retrying

if TYPE_CHECKING:
    import zarr

__all__ = ["DEFAULT_ROOT", "Location", "client_options", "environment_options", "is_url", "location_of"]

_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
_EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure", "abfs": "azure"}
_PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs"}
T = TypeVar("T")
PROBE_SECONDS = 8.0
"""How long :meth:`Location.check` waits for the store to answer before giving up."""
DEFAULT_ROOT = Path("data") / "sessions"
"""Where sessions are made when no ``--session-path`` is given (relative to the working folder)."""


def is_url(text: str | Path) -> bool:
    """Whether ``text`` is a URL (``scheme://...``) rather than a local path; ``file://`` counts as local."""
    match = _URL.match(str(text))
    return bool(match) and match.group(1).lower() != "file"


def location_of(value: str | Path | Location) -> Location:
    """``value`` as a :class:`Location` (returned as is when it is one)."""
    return value if isinstance(value, Location) else Location(value)


class Location:
    """A folder or file on local disk or in an object store (see the module docstring).

    Args:
        url: a local path, a ``file://`` URL or an fsspec URL such as ``s3://bucket/prefix``.

    Raises:
        UsageError: the URL's scheme needs a package that is not installed, or is unknown to fsspec.
    """

    def __init__(self, url: str | Path, *, _fs: Any = None) -> None:
        text = str(url)
        self.local: Path | None = None
        if not is_url(text):
            self.local = Path(text[len("file://") :] if text.lower().startswith("file://") else text)
            self.fs: Any = None
            self.protocol = "file"
            self._key = str(self.local)
            return
        self.protocol = _URL.match(text).group(1).lower()
        if _fs is not None:
            self.fs, self._key = _fs, text.split("://", 1)[1].rstrip("/")
            return
        try:
            from fsspec.core import url_to_fs

            self.fs, key = url_to_fs(text, use_listings_cache=False, **client_options(self.protocol))
        except ImportError as error:
            package = _PACKAGES.get(self.protocol, error.name or "its fsspec backend")
            extra = _EXTRAS.get(self.protocol)
            how = f"pip install 'digideep[{extra}]'" if extra else f"pip install {package}"
            raise UsageError(
                f"session path '{text}' needs {package}, which is not installed: {how}"
            ) from None
        except ValueError as error:  # fsspec: "Protocol not known"
            raise UsageError(f"session path '{text}': {error}; use a local path or an fsspec URL") from None
        self._key = key.rstrip("/")

    # -- naming --------------------------------------------------------------------------------
    @property
    def is_local(self) -> bool:
        return self.local is not None

    @property
    def url(self) -> str:
        """The local path as text, or the full URL (``s3://bucket/prefix/name``)."""
        return str(self.local) if self.local is not None else f"{self.protocol}://{self._key}"

    @property
    def name(self) -> str:
        return self.local.name if self.local is not None else self._key.rsplit("/", 1)[-1]

    @property
    def stem(self) -> str:
        """The last part of the name without its suffix (``train`` for ``.../train.zarr``)."""
        return Path(self.name).stem

    @property
    def path(self) -> Path | str:
        """The local :class:`~pathlib.Path`, or the URL for an object store (what messages name)."""
        return self.local if self.local is not None else self.url

    def __truediv__(self, name: str) -> Location:
        if self.local is not None:
            return Location(self.local / name)
        return Location(f"{self.protocol}://{self._key}/{name.strip('/')}", _fs=self.fs)

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"Location({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Location) and self.url == other.url

    def __hash__(self) -> int:
        return hash(self.url)

    # -- reading -------------------------------------------------------------------------------
    def exists(self) -> bool:
        """Whether a file is here (or, locally, a folder)."""
        if self.local is not None:
            return self.local.exists()
        return bool(self._retrying("read", self.fs.exists, self._key))

    def is_dir(self) -> bool:
        """Whether this is a folder; on an object store, whether any key lies under this prefix."""
        if self.local is not None:
            return self.local.is_dir()
        try:
            listed = self._retrying("list", self.fs.ls, self._key, detail=False)
            return bool(listed) and not self._retrying("read", self.fs.isfile, self._key)
        except FileNotFoundError:
            return False

    def read_bytes(self) -> bytes:
        """The whole file. Raises FileNotFoundError when it is absent."""
        if self.local is not None:
            return self.local.read_bytes()
        return self._retrying("read", self.fs.cat_file, self._key)

    def read_text(self) -> str:
        return self.read_bytes().decode("utf-8")

    def read_json(self) -> Any:
        """The file parsed as JSON (FileNotFoundError and json.JSONDecodeError pass through)."""
        return json.loads(self.read_bytes())

    def size(self) -> int:
        if self.local is not None:
            return self.local.stat().st_size
        return int(self._retrying("read", self.fs.size, self._key))

    def children(self) -> list[Location]:
        """What this folder holds directly (files and folders); empty when it does not exist."""
        if self.local is not None:
            return sorted((Location(p) for p in self.local.iterdir()), key=str) if self.local.is_dir() else []
        try:
            found = self._retrying("list", self.fs.ls, self._key, detail=False)
        except FileNotFoundError:
            return []
        prefix = self._key + "/"
        names = {
            entry.rstrip("/")[len(prefix) :].split("/", 1)[0] for entry in found if entry.startswith(prefix)
        }
        return [self / name for name in sorted(n for n in names if n)]

    def files(self) -> set[str]:
        """Every file below this folder, as paths relative to it (``"checkpoint-4/states.pt"``)."""
        if self.local is not None:
            if not self.local.is_dir():
                return set()
            return {p.relative_to(self.local).as_posix() for p in self.local.rglob("*") if p.is_file()}
        prefix = self._key + "/"
        try:
            found = self._retrying("list", self.fs.find, self._key)
            return {key[len(prefix) :] for key in found if key.startswith(prefix)}
        except FileNotFoundError:
            return set()

    # -- writing -------------------------------------------------------------------------------
    def write_bytes(self, data: bytes) -> None:
        """Write the whole file atomically: readers see the old contents or the new, never a part."""
        if self.local is not None:
            self.local.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(self.local, data)
        else:
            self._retrying("write", self.fs.pipe_file, self._key, data)

    def write_text(self, text: str) -> None:
        self.write_bytes(text.encode("utf-8"))

    def write_json(self, value: Any) -> None:
        """:meth:`write_bytes` of ``value`` as indented JSON (as ``atomic_write_json`` writes it)."""
        self.write_text(json.dumps(value, indent=2, sort_keys=False, default=str) + "\n")

    def put_file(self, source: Path) -> None:
        """Copy the local file ``source`` here (one PUT on an object store; atomic locally)."""
        if self.local is not None:
            self.local.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(self.local, Path(source).read_bytes())
        else:
            self._retrying("write", self.fs.put_file, str(source), self._key)

    def mkdir(self) -> None:
        """Create the local folder (and its parents); object stores have no folders: nothing to do."""
        if self.local is not None:
            self.local.mkdir(parents=True, exist_ok=True)

    def delete(self) -> None:
        """Remove this file or folder with everything below it; absent is fine."""
        if self.local is not None:
            if self.local.is_dir():
                shutil.rmtree(self.local, ignore_errors=True)
            else:
                self.local.unlink(missing_ok=True)
            return
        with contextlib.suppress(FileNotFoundError):
            self._retrying("delete", self.fs.rm, self._key, recursive=True)

    def sync(self) -> None:
        """Make the entries of this local folder durable (fsync); object stores are durable on PUT."""
        if self.local is not None and self.local.is_dir():
            fsync_dir(self.local)

    def _retrying(self, what: str, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``method(*args, **kwargs)`` of the store, retried through its hiccups (see
        :mod:`digideep.storage.retry`: transient errors for a bounded time, permanent ones
        at once in one line)."""
        return retrying(lambda: method(*args, **kwargs), what, self.url)

    # -- a memory's Zarr group here ---------------------------------------------------------------
    def zarr_store(self, read_only: bool = False) -> Any:
        """A zarr store of this place: the path as text for a local folder (zarr opens it as a
        ``LocalStore``), else zarr's ``FsspecStore`` on an asynchronous filesystem, every request
        retried (:class:`~digideep.storage.objects.RetryingStore`)."""
        if self.local is not None:
            return str(self.local)
        from zarr.storage import FsspecStore

        from digideep.storage.objects import RetryingStore

        return RetryingStore(
            FsspecStore.from_url(
                self.url,
                storage_options={"asynchronous": True, **client_options(self.protocol)},
                read_only=read_only,
            )
        )

    def open_group(self, mode: str) -> zarr.Group:
        """The Zarr group here (``mode`` as in :func:`zarr.open_group`)."""
        import zarr

        return zarr.open_group(store=self.zarr_store(read_only=mode == "r"), mode=mode)

    def is_empty(self) -> bool:
        """True if nothing is stored here (no file or object under the prefix)."""
        if self.local is not None:
            return not self.local.exists() or not any(self.local.iterdir())
        from zarr.core.sync import sync

        return bool(sync(self.zarr_store(read_only=True).is_empty("")))

    def zarr_exists(self) -> bool:
        """True if a Zarr group's metadata ``zarr.json`` is here (or, locally, the folder exists);
        unlike :meth:`exists`, a prefix that holds other objects only does not count."""
        if self.local is not None:
            return self.local.exists()
        from zarr.core.sync import sync

        return bool(sync(self.zarr_store(read_only=True).exists("zarr.json")))

    # -- checks --------------------------------------------------------------------------------
    def check(self, timeout: float = PROBE_SECONDS) -> None:
        """Check that the store behind this URL answers and its bucket exists; local paths pass.

        One request (the bucket's metadata), within ``timeout`` seconds, before anything is written.

        Raises:
            UsageError: one line naming the URL (never a credential): no such bucket, access
                refused, or no answer from the endpoint.
        """
        if self.local is not None:
            return
        bucket = self._key.split("/", 1)[0]
        outcome: dict[str, BaseException | None] = {}

        def probe() -> None:
            try:
                _probe_filesystem(self).info(bucket)
                outcome["error"] = None
            except BaseException as error:  # reported in the caller's thread
                outcome["error"] = error

        thread = threading.Thread(target=probe, name="digideep-location-check", daemon=True)
        thread.start()
        thread.join(timeout)
        endpoint = os.environ.get("AWS_ENDPOINT_URL") if self.protocol in ("s3", "s3a") else None
        where = f" at {endpoint}" if endpoint else ""
        if "error" not in outcome:
            raise UsageError(
                f"session path '{self.url}': the store{where} did not answer within {timeout:.0f} s; "
                "check the endpoint and the network"
            )
        error = outcome["error"]
        if error is None:
            return
        if isinstance(error, FileNotFoundError):
            raise UsageError(
                f"session path '{self.url}': bucket '{bucket}' does not exist{where}; create it first"
            )
        if isinstance(error, PermissionError):
            raise UsageError(
                f"session path '{self.url}': access refused{where}; check the credentials "
                "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or the profile) and the bucket's permissions"
            )
        kind = type(error).__name__
        if "credential" in kind.lower():
            raise UsageError(
                f"session path '{self.url}': no credentials found ({kind}); set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY or a profile"
            )
        raise UsageError(
            f"session path '{self.url}': the store{where} cannot be reached ({kind}); check the endpoint"
        )


_S3_VARIABLES = {
    "endpoint_url": "AWS_ENDPOINT_URL",
    "key": "AWS_ACCESS_KEY_ID",
    "secret": "AWS_SECRET_ACCESS_KEY",
    "token": "AWS_SESSION_TOKEN",
}


def environment_options(protocol: str) -> dict[str, str]:
    """The S3 endpoint and credentials the environment sets, passed to s3fs explicitly.

    s3fs reads the same variables itself; passing them makes them part of fsspec's cache key for
    filesystem instances, so a process whose environment points at another store later (a worker
    running flows for several stacks, a test suite) gets a filesystem for that store, never the
    cached one of the first. Unset variables are left to s3fs (profiles, instance roles).
    """
    if protocol not in ("s3", "s3a"):
        return {}
    return {option: os.environ[name] for option, name in _S3_VARIABLES.items() if os.environ.get(name)}


def client_options(protocol: str) -> dict[str, Any]:
    """What a session's filesystem is opened with: :func:`environment_options`, and on S3 no retries
    of botocore's own (one attempt per request).

    :mod:`digideep.storage.retry` retries every request for a bounded time; botocore's retries
    under it would only add their few seconds, and their jitter draws from Python's global
    ``random``, a stream that checkpoints hold: an outage would make a resumed run differ.
    """
    options: dict[str, Any] = environment_options(protocol)
    if protocol in ("s3", "s3a"):
        options["config_kwargs"] = {"retries": dict(BOTOCORE_RETRIES)}
    return options


def _probe_filesystem(location: Location) -> Any:
    """A filesystem for one quick request: on S3, few retries and short timeouts (a bad endpoint
    answers within seconds); the session's own filesystem keeps the client's patient defaults."""
    if location.protocol not in ("s3", "s3a"):
        return location.fs
    from fsspec.core import url_to_fs

    fs, _ = url_to_fs(
        location.url,
        **environment_options(location.protocol),
        skip_instance_cache=True,
        use_listings_cache=False,
        config_kwargs={"connect_timeout": 3, "read_timeout": 5, "retries": {"max_attempts": 2}},
    )
    fs.retries = 1  # s3fs's own retries, on top of botocore's
    return fs
