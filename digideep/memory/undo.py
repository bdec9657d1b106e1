"""The undo area of a memory's Zarr group: the anchor's rows that later writes overwrote.

The anchor is the state of the newest checkpoint (:meth:`digideep.memory.Memory.checkpoint_committed`).
Before a physical row is overwritten for the first time after the anchor, its bytes are copied to
the same row of ``<group>/_undo/<key>`` (same shape, chunks and fill value as the key's array);
the commit record then says how many rows, from ``anchor.pos`` on (circular), the area holds.
Copying them back returns every array to its bytes at the anchor, however often the ring wrapped
since. Each row is copied at most once per anchor, so the area never exceeds one ring.

Dropping the area: a local folder is renamed away and deleted in the background; on object
storage, which has no rename, the objects are deleted at once (the chunks are large, so that is
one listing and one batched delete for a few dozen objects).
"""

from __future__ import annotations

import shutil
import threading
import uuid

import zarr

from digideep.memory.location import Location
from digideep.memory.ring import ring_slices

__all__ = ["UNDO", "UndoArea"]

UNDO = "_undo"  # subgroup of the undo area
_TRASH = "-deleted-"  # an undo area being deleted: "_undo-deleted-<hex>"


class UndoArea:
    """The ``_undo`` subgroup of one memory's group.

    Args:
        location: the memory's group.
        capacity: rows per worker of the ring.
        compressors: the codecs of the memory's arrays.
        name: shown in messages.
    """

    def __init__(self, location: Location, capacity: int, compressors: object, name: str) -> None:
        self.location, self.capacity, self.compressors, self.name = location, capacity, compressors, name
        self.arrays: dict[str, zarr.Array] = {}

    def open(self, group: zarr.Group, keys: tuple[str, ...], main: dict[str, zarr.Array]) -> None:
        """Open the area of ``keys`` that a commit record lists; finish deletions cut short.

        Raises:
            ValueError: if an array of the area is missing or has another shape.
        """
        if self.location.path is not None:
            for trash in self.location.path.glob(
                f"{UNDO}{_TRASH}*"
            ):  # left by a process that ended meanwhile
                shutil.rmtree(trash, ignore_errors=True)
        self.arrays = {}
        for key in keys:
            array = group.get(f"{UNDO}/{key[1:]}")
            if not isinstance(array, zarr.Array) or array.shape != main[key].shape:
                raise ValueError(
                    f"memory '{self.name}': the undo area of {self.location} lacks key '{key}' that its commit "
                    "record lists; the folder was changed by something else than this memory"
                )
            self.arrays[key] = array

    def save(
        self, group: zarr.Group, main: dict[str, zarr.Array], keys: tuple[str, ...], start: int, count: int
    ) -> None:
        """Copy rows ``start .. start + count`` (circular) of ``main[key]`` for every key to the area."""
        for key in keys:
            source = main[key]
            if key not in self.arrays:  # first save since the anchor: a fresh array
                self.arrays[key] = group.create_array(
                    f"{UNDO}/{key[1:]}",
                    shape=source.shape,
                    chunks=source.chunks,
                    dtype=source.dtype,
                    fill_value=source.fill_value,
                    compressors=self.compressors,
                    overwrite=True,
                )
            for a, b, _ in ring_slices(start, count, self.capacity):
                self.arrays[key][:, a:b] = source[:, a:b]

    def apply(self, main: dict[str, zarr.Array], keys: tuple[str, ...], start: int, count: int) -> None:
        """Copy rows ``start .. start + count`` (circular) of the area back into ``main``."""
        for key in keys:
            for a, b, _ in ring_slices(start, count, self.capacity):
                main[key][:, a:b] = self.arrays[key][:, a:b]

    def drop(self, group: zarr.Group) -> None:
        """Delete the area (call it once the commit record no longer refers to it).

        A local folder is renamed away (instant) and deleted by a background thread: deleting a
        ring's worth of chunk files took as long as copying them (``bench/bench_memory.py
        --undo-only``); a deletion cut short by the process's end is finished by the next
        :meth:`open`. On object storage the objects are deleted now; leftovers of a deletion cut
        short are overwritten when the next area is created.
        """
        had = bool(self.arrays)
        self.arrays = {}
        if self.location.path is None:
            if had or UNDO in group:
                del group[UNDO]
            return
        folder = self.location.path / UNDO
        if folder.exists():
            trash = self.location.path / f"{UNDO}{_TRASH}{uuid.uuid4().hex}"
            folder.rename(trash)
            threading.Thread(
                target=shutil.rmtree, args=(trash,), kwargs={"ignore_errors": True}, daemon=True
            ).start()
