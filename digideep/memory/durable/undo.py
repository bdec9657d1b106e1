"""The undo area of a memory's Zarr group: the anchor's chunks that later writes overwrite.

The anchor is the state of the newest checkpoint (:meth:`digideep.memory.Memory.checkpoint_committed`).
Before a chunk of a key's array is overwritten for the first time after the anchor, its object
(file) is copied whole to the same key under ``<group>/_undo/<key>`` (an array of the same shape,
chunks and fill value): a server-side copy on object storage, a hard link on a local disk, so no
byte goes through this process and no chunk is read, decoded or partially rewritten. The commit
record says how many rows, from ``anchor.pos`` on (circular), are covered; the chunks overlapping
those rows are in the area, or were absent (never written) at the anchor. Copying them back (and
deleting the chunks that were absent) returns every array to its bytes at the anchor, however often
the ring wrapped since. Each chunk is copied at most once per anchor, so the area never exceeds one
ring.

Layout format 2 (before whole-chunk copies) saved rows, not chunks, into arrays whose other rows
hold the fill value; an area of that format is still restored row by row (:meth:`UndoArea.apply_rows`)
and, until the next anchor drops it, extended row by row.

Dropping the area: a local folder is renamed away and deleted in the background; on object
storage, which has no rename, the objects are deleted (one listing and one batched delete).
"""

from __future__ import annotations

import shutil
import threading
import uuid

import zarr

from digideep.memory.durable.integrity import ARRAY_CONFIG, chunk_keys
from digideep.memory.layout import DamagedMemoryError
from digideep.memory.ring import ring_slices
from digideep.storage.location import Location
from digideep.storage.objects import copy_objects, delete_objects, list_objects

__all__ = ["UNDO", "UndoArea", "chunks_of_rows"]

UNDO = "_undo"  # subgroup of the undo area
_TRASH = "-deleted-"  # an undo area being deleted: "_undo-deleted-<hex>"


def chunks_of_rows(start: int, count: int, capacity: int, rows: int) -> set[int]:
    """Indices of the row chunks (``rows`` rows each) that rows ``start .. start + count`` (circular) touch."""
    out: set[int] = set()
    for a, b, _ in ring_slices(start, min(count, capacity), capacity):
        out.update(range(a // rows, (b - 1) // rows + 1))
    return out


class UndoArea:
    """The ``_undo`` subgroup of one memory's group.

    Args:
        location: the memory's group.
        capacity: rows per worker of the ring.
        name: shown in messages.

    Each array of the area takes the codecs of the main array it copies.
    """

    def __init__(self, location: Location, capacity: int, name: str) -> None:
        self.location, self.capacity, self.name = location, capacity, name
        self.arrays: dict[str, zarr.Array] = {}

    def open(self, group: zarr.Group, keys: tuple[str, ...], main: dict[str, zarr.Array]) -> None:
        """Open the area of ``keys`` that a commit record lists (reads only: see :meth:`tidy`).

        Raises:
            DamagedMemoryError: if an array of the area is missing or has another shape.
        """
        self.arrays = {}
        for key in keys:
            array = group.get(f"{UNDO}/{key[1:]}")
            if not isinstance(array, zarr.Array) or array.shape != main[key].shape:
                raise DamagedMemoryError(
                    f"memory '{self.name}': the undo area of {self.location} lacks key '{key}' that its commit "
                    "record lists; the folder was changed by something else than this memory"
                )
            self.arrays[key] = array

    def tidy(self) -> None:
        """Finish the deletions of areas that a process which ended had renamed away (local folders)."""
        if self.location.local is not None:
            for trash in self.location.local.glob(f"{UNDO}{_TRASH}*"):
                shutil.rmtree(trash, ignore_errors=True)

    def _area_array(self, group: zarr.Group, key: str, source: zarr.Array) -> zarr.Array:
        """The area's array of ``key``, created (dropping leftovers) at the first save since the anchor."""
        if key not in self.arrays:
            self.arrays[key] = group.create_array(
                f"{UNDO}/{key[1:]}",
                shape=source.shape,
                chunks=source.chunks,
                dtype=source.dtype,
                fill_value=source.fill_value,
                compressors=source.compressors or None,  # the key's own codecs (they may differ by key)
                overwrite=True,
                config=ARRAY_CONFIG,
            )
        return self.arrays[key]

    # -- whole chunks (layout format 3) ----------------------------------------------------------
    def save(
        self,
        group: zarr.Group,
        main: dict[str, zarr.Array],
        keys: tuple[str, ...],
        start: int,
        saved: int,
        rows: int,
    ) -> None:
        """Copy the chunks that rows ``start + saved .. start + rows`` (circular) touch and rows
        ``start .. start + saved`` did not (those are in the area already), for every key."""
        pairs = []
        for key in keys:
            source = main[key]
            chunk_rows = source.chunks[1]
            new = chunks_of_rows(start, rows, self.capacity, chunk_rows)
            new -= chunks_of_rows(start, saved, self.capacity, chunk_rows)
            if not new:
                continue
            target = self._area_array(group, key, source)
            pairs += [(f"{source.path}/{c}", f"{target.path}/{c}") for c in chunk_keys(source, new)]
        copy_objects(group.store, pairs)

    def apply(
        self, group: zarr.Group, main: dict[str, zarr.Array], keys: tuple[str, ...], start: int, rows: int
    ) -> None:
        """Copy the area's chunks of rows ``start .. start + rows`` (circular) back into ``main``;
        delete the main chunks that were absent at the anchor (the area has none for them)."""
        pairs, absent = [], []
        for key in keys:
            source, target = self.arrays[key], main[key]
            present = list_objects(group.store, source.path)
            for c in chunk_keys(target, chunks_of_rows(start, rows, self.capacity, target.chunks[1])):
                if f"{source.path}/{c}" in present:
                    pairs.append((f"{source.path}/{c}", f"{target.path}/{c}"))
                else:
                    absent.append(f"{target.path}/{c}")
        copy_objects(group.store, pairs)
        delete_objects(group.store, absent)

    # -- rows (layout format 2, read and finished only) ------------------------------------------
    def save_rows(
        self, group: zarr.Group, main: dict[str, zarr.Array], keys: tuple[str, ...], start: int, count: int
    ) -> None:
        """Format 2: copy rows ``start .. start + count`` (circular) of ``main[key]`` to the area."""
        for key in keys:
            source = main[key]
            target = self._area_array(group, key, source)
            for a, b, _ in ring_slices(start, count, self.capacity):
                target[:, a:b] = source[:, a:b]

    def apply_rows(self, main: dict[str, zarr.Array], keys: tuple[str, ...], start: int, count: int) -> None:
        """Format 2: copy rows ``start .. start + count`` (circular) of the area back into ``main``."""
        for key in keys:
            for a, b, _ in ring_slices(start, count, self.capacity):
                main[key][:, a:b] = self.arrays[key][:, a:b]

    def drop(self, group: zarr.Group) -> None:
        """Delete the area (call it once the commit record no longer refers to it).

        A local folder is renamed away (instant) and deleted by a background thread: deleting a
        ring's worth of chunk files took as long as copying them; a deletion cut short by the
        process's end is finished by the next :meth:`open`. On object storage the objects are
        deleted now; leftovers of a deletion cut short are deleted when the next area's array of
        their key is created.
        """
        had = bool(self.arrays)
        self.arrays = {}
        if self.location.local is None:
            if had or UNDO in group:
                del group[UNDO]
            return
        folder = self.location.local / UNDO
        if folder.exists():
            trash = self.location.local / f"{UNDO}{_TRASH}{uuid.uuid4().hex}"
            folder.rename(trash)
            threading.Thread(
                target=shutil.rmtree, args=(trash,), kwargs={"ignore_errors": True}, daemon=True
            ).start()
