"""Where a memory's Zarr group lives: a local folder or an fsspec URL (``s3://bucket/prefix``, ``gs://...``).

A local path (or a ``file://`` URL) opens zarr's ``LocalStore``, whose writes go to a temporary file
renamed into place. Any other URL opens zarr's ``FsspecStore`` with an asynchronous filesystem;
credentials and the endpoint come from the environment, as the filesystem reads them (s3fs:
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``). An object store writes each
object whole (a PUT is atomic), so every file of the group is old or new after a crash, as on disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import zarr
from zarr.core.sync import sync

__all__ = ["Location"]


class Location:
    """A Zarr group's place: ``Location("data/sessions/s/memory/train.zarr")`` or ``Location("s3://b/m.zarr")``.

    Args:
        where: a local path, a ``file://`` URL, or an fsspec URL.
    """

    def __init__(self, where: str | Path) -> None:
        text = str(where)
        scheme, sep, rest = text.partition("://")
        self.url: str | None = None
        self.path: Path | None = None
        if sep and scheme != "file":
            self.url = text.rstrip("/")
        else:
            self.path = Path(rest if sep else text)

    @property
    def is_local(self) -> bool:
        return self.path is not None

    @property
    def stem(self) -> str:
        """The last part of the name without its suffix (``train`` for ``.../train.zarr``)."""
        return Path(self.url.rsplit("/", 1)[-1]).stem if self.url else self.path.stem  # type: ignore[union-attr]

    def __str__(self) -> str:
        return self.url if self.url is not None else str(self.path)

    def __repr__(self) -> str:
        return f"Location({str(self)!r})"

    def store(self, read_only: bool = False) -> Any:
        """A zarr store of this place (a path string for a local folder, which zarr opens as a ``LocalStore``)."""
        if self.path is not None:
            return str(self.path)
        return zarr.storage.FsspecStore.from_url(
            self.url, storage_options={"asynchronous": True}, read_only=read_only
        )

    def open_group(self, mode: str) -> zarr.Group:
        """The group at this place (``mode`` as in :func:`zarr.open_group`)."""
        return zarr.open_group(store=self.store(read_only=mode == "r"), mode=mode)

    def is_empty(self) -> bool:
        """True if nothing is stored here (no file or object under the prefix)."""
        if self.path is not None:
            return not self.path.exists() or not any(self.path.iterdir())
        return bool(sync(self.store(read_only=True).is_empty("")))

    def exists(self) -> bool:
        """True if the group's metadata ``zarr.json`` is here (or, locally, the folder exists)."""
        if self.path is not None:
            return self.path.exists()
        return bool(sync(self.store(read_only=True).exists("zarr.json")))
