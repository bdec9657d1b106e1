"""What catches damage to a memory's Zarr group: the zarr release, the Zarr chunks' checksums, the record's,
the chunk files that must exist.

Every Zarr chunk ends with a crc32c of its stored bytes (zarr's codec, last among the array's
codecs), checked whenever zarr reads it; the commit record carries a crc32c of its canonical JSON.
Every chunk written is a file (:data:`ARRAY_CONFIG`), and the record says from which ring row on
each key was written (``since``), so a chunk file missing among the rows written is damage too
(:func:`missing_chunks`), found by one listing per array; zarr alone would read it as never written.
A read that fails is told apart here: damage (a chunk fails its checksum or does not decode) raises
:class:`~digideep.memory.layout.DamagedMemoryError` naming the Zarr chunks, any other failure (the
network, the disk) is raised as it came. zarr releases before :data:`ZARR_MIN` are refused: their
writes a crash can tear.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
from math import ceil

import google_crc32c
import zarr

from digideep.memory.layout import DamagedMemoryError
from digideep.storage.objects import list_objects

__all__ = [
    "ARRAY_CONFIG",
    "ZARR_MIN",
    "check_zarr_version",
    "chunk_keys",
    "damaged_chunks",
    "missing_chunks",
    "raise_damage",
    "raise_missing",
    "record_crc",
]

logger = logging.getLogger(__name__)

# Every chunk written is a file, even one of placeholders alone (zarr's default skips those), so that a
# chunk file missing where the commit record says rows were written is damage, not "never written".
ARRAY_CONFIG = {"write_empty_chunks": True}
ZARR_MIN = (3, 1, 3)  # the first zarr release whose LocalStore writes files atomically
_BAD_BYTES = (ValueError, RuntimeError, EOFError)  # the codecs' errors for bad bytes


def check_zarr_version(version: str | None = None) -> None:
    """Refuse zarr releases older than :data:`ZARR_MIN`, whose writes a crash can tear.

    Raises:
        RuntimeError: naming the installed version and the fix.
    """
    version = zarr.__version__ if version is None else version
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    if match is not None and tuple(int(part) for part in match.groups()) < ZARR_MIN:
        raise RuntimeError(
            f"digideep's replay memory needs zarr >= {'.'.join(map(str, ZARR_MIN))} (atomic file writes), "
            f"zarr {version} is installed; upgrade it: pip install 'zarr>={'.'.join(map(str, ZARR_MIN))},<4'"
        )


def damaged_chunks(array: zarr.Array, rows: int | None = None) -> list[str]:
    """Store keys (below the group) of the chunks of ``array`` that fail to decode, in rows ``:rows``.

    Each chunk is read alone: a crc32c mismatch (every array written since the checksum came), a
    file of the wrong length or a compressed stream that does not decompress is damage. A chunk
    that was never written reads as the fill value and is not damage.
    """
    rows = array.shape[1] if rows is None else rows
    grid = [range(ceil(n / c)) if n else range(0) for n, c in zip(array.shape, array.chunks, strict=True)]
    grid[1] = range(ceil(rows / array.chunks[1]))
    found = []
    for coords in itertools.product(*grid):
        try:
            array.get_block_selection(coords)
        except _BAD_BYTES as error:
            logger.debug("chunk %s of %s does not decode: %r", coords, array.path, error)
            found.append(f"{array.path}/{array.metadata.encode_chunk_key(coords)}")
    return found


def record_crc(record: dict) -> int:
    """crc32c of a commit record (without its own ``crc32c`` field), over its canonical JSON."""
    fields = {key: value for key, value in record.items() if key != "crc32c"}
    return google_crc32c.value(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode())


def raise_damage(array: zarr.Array, key: str, rows: int, error: BaseException, what: str) -> None:
    """Raise :class:`DamagedMemoryError` naming the Zarr chunks of ``key`` that fail in rows ``:rows``,
    or ``error`` if every chunk reads well (the read failed for another reason: the network, the disk).

    ``what`` names the memory and its place in the message.
    """
    found = damaged_chunks(array, rows)
    if not found:
        raise error
    shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    raise DamagedMemoryError(
        f"{what} is damaged: {len(found)} chunk(s) of key '{key}' fail their checksum ({shown})"
    ) from None


def chunk_keys(array: zarr.Array, row_chunks: set[int]) -> list[str]:
    """Store keys (below the array's folder) of every chunk object in the row chunks ``row_chunks``."""
    grid = [range(ceil(n / c)) if n else range(0) for n, c in zip(array.shape, array.chunks, strict=True)]
    encode = array.metadata.encode_chunk_key
    return [
        encode((w, index, *rest))
        for index in sorted(row_chunks)
        for w in grid[0]
        for rest in itertools.product(*grid[2:])
    ]


def missing_chunks(store: object, array: zarr.Array, row_chunks: set[int]) -> list[str]:
    """Store keys (below the group) of the chunk files of ``array`` in the row chunks ``row_chunks``
    that are missing: one listing of the array's objects, nothing read."""
    if not row_chunks:
        return []
    present = list_objects(store, array.path)
    wanted = (f"{array.path}/{key}" for key in chunk_keys(array, row_chunks))
    return [key for key in wanted if key not in present]


def raise_missing(missing: dict[str, list[str]], what: str) -> None:
    """Raise :class:`DamagedMemoryError` naming the missing chunk files of the first key that lacks some.

    Args:
        missing: ``{key: store keys of its missing chunk files}``.
        what: the memory and its place, for the message.
    """
    for key, found in missing.items():
        if found:
            shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
            raise DamagedMemoryError(
                f"{what} is damaged: {len(found)} chunk file(s) of key '{key}' are missing ({shown}), though "
                "the commit record says their rows were written (a file deleted)"
            )
