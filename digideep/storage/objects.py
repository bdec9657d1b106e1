"""A memory's Zarr store on object storage, and whole objects (files) of a Zarr store.

:meth:`Location.zarr_store <digideep.storage.location.Location.zarr_store>` opens a local folder as
zarr's ``LocalStore`` (its writes go to a temporary file renamed into place) and an fsspec URL as
zarr's ``FsspecStore`` with an asynchronous filesystem, wrapped in a :class:`RetryingStore`:
credentials and the endpoint come from the environment, as the filesystem reads them (s3fs:
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``). An object store writes each
object whole (a PUT is atomic), so every file of the group is old or new after a crash, as on disk.
Every request to an object store is retried through the store's transient failures for a bounded
time (:class:`RetryingStore`, with the policy of :mod:`digideep.storage.retry` that the session's
other files follow). :func:`list_objects` and :func:`delete_objects` handle whole objects of a
store without decoding them (the chunk files a memory's log checks and prunes).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from zarr.abc.store import ByteRequest
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.core.sync import sync
from zarr.storage import FsspecStore, WrapperStore

from digideep.storage.retry import retrying_async

__all__ = ["RetryingStore", "delete_objects", "list_objects"]

T = TypeVar("T")


class RetryingStore(WrapperStore[FsspecStore]):
    """An object store's Zarr store whose every request is retried through the store's hiccups.

    A connection refused or reset, a 5xx or a ``SlowDown`` answer is retried with backoff for a
    bounded time; a permanent error (access refused, no bucket) fails at once in one line (see
    :mod:`digideep.storage.retry`). A listing is read whole before it is handed on, so a
    retried listing never yields a key twice.
    """

    @property
    def fs(self) -> Any:
        """The fsspec filesystem (whole-object copies and listings use it directly)."""
        return self._store.fs

    @property
    def path(self) -> str:
        return self._store.path

    async def _retry(self, what: str, key: str, call: Callable[[], Awaitable[T]]) -> T:
        protocol = self._store.fs.protocol
        scheme = protocol if isinstance(protocol, str) else protocol[0]
        return await retrying_async(call, what, f"{scheme}://{self._store.path}/{key}")

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        return await self._retry("read", key, lambda: self._store.get(key, prototype, byte_range))

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        ranges = list(key_ranges)
        return await self._retry("read", "", lambda: self._store.get_partial_values(prototype, ranges))

    async def exists(self, key: str) -> bool:
        return await self._retry("read", key, lambda: self._store.exists(key))

    async def set(self, key: str, value: Buffer) -> None:
        await self._retry("write", key, lambda: self._store.set(key, value))

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        await self._retry("write", key, lambda: self._store.set_if_not_exists(key, value))

    async def delete(self, key: str) -> None:
        await self._retry("delete", key, lambda: self._store.delete(key))

    async def delete_dir(self, prefix: str) -> None:
        await self._retry("delete", prefix, lambda: self._store.delete_dir(prefix))

    async def is_empty(self, prefix: str) -> bool:
        return await self._retry("list", prefix, lambda: self._store.is_empty(prefix))

    async def list(self) -> AsyncIterator[str]:
        for key in await self._retry("list", "", lambda: _whole(self._store.list())):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        for key in await self._retry("list", prefix, lambda: _whole(self._store.list_prefix(prefix))):
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        for key in await self._retry("list", prefix, lambda: _whole(self._store.list_dir(prefix))):
            yield key


async def _whole(keys: AsyncIterator[str]) -> list[str]:
    return [key async for key in keys]


# -- whole objects (files) of a zarr store: listed and deleted without decoding them ----------------


def _local_root(store: Any) -> Path | None:
    root = getattr(store, "root", None)
    return Path(root) if root is not None else None


def list_objects(store: Any, prefix: str) -> set[str]:
    """Keys of every object under ``prefix`` (relative to the store's root), one listing."""
    root = _local_root(store)
    if root is not None:
        folder = root / prefix
        if not folder.exists():
            return set()
        return {
            str(path.relative_to(root))
            for path in folder.rglob("*")
            if path.is_file() and not path.name.endswith(".tmp")
        }
    return sync(_list_remote(store.fs, store.path, prefix))


async def _list_remote(fs: Any, root: str, prefix: str) -> set[str]:
    try:
        found = await retrying_async(lambda: fs._find(f"{root}/{prefix}"), "list", f"{root}/{prefix}")
    except FileNotFoundError:
        return set()
    start = len(root.rstrip("/")) + 1
    return {path[start:] for path in found}


def delete_objects(store: Any, keys: list[str]) -> None:
    """Delete objects of ``store`` (keys relative to its root); missing ones are fine."""
    if not keys:
        return
    root = _local_root(store)
    if root is not None:
        for key in keys:
            (root / key).unlink(missing_ok=True)
        return
    sync(_delete_remote(store.fs, store.path, keys))


async def _delete_remote(fs: Any, root: str, keys: list[str]) -> None:
    with contextlib.suppress(FileNotFoundError):
        paths = [f"{root}/{key}" for key in keys]
        await retrying_async(lambda: fs._rm(paths), "delete", f"{root}/{keys[0]}")
