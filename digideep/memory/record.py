"""What a memory's log holds: the layout of its Zarr group, its commit record and its arrays' codecs.

The group (``<session>/memory/<name>.zarr``, a local folder or a URL)::

    zarr.json                 its attribute "digideep_memory" is the commit record (Record)
    observations/c/...        one array per key, (W, LOG_ROWS, *row_shape): row g is global row g
                              (ring.py), in chunks of chunk_rows rows, each ending with its crc32c
    _prestep/<total>          the final prestep rows of the state committed at ``total``, every key
                              in the record's order, in one object (its crc32c in the record)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import google_crc32c
import numpy as np
import zarr

import digideep
from digideep.memory.ring import KeySpec, RingState
from digideep.storage.location import Location

ATTR = "digideep_memory"  # the group attribute that holds the commit record
FORMAT = 4  # version of the layout above
PRESTEP = "_prestep"
LOG_ROWS = 1 << 40  # rows per worker an array can hold: its shape (chunks exist where written)
ZARR_MIN = (3, 1, 3)  # the first zarr release whose LocalStore writes files atomically
ARRAY_CONFIG = {"write_empty_chunks": True}  # a chunk of placeholders is a file too: missing is damage


class DamagedMemoryError(ValueError):
    """A memory's log changed after it was written: a chunk is missing, fails its checksum or does not
    decode, the commit record fails its own, or an array differs from what the record lists."""


def check_zarr_version(version: str = zarr.__version__) -> None:
    """Refuse zarr releases older than :data:`ZARR_MIN`, whose writes a crash can tear, in one line."""
    if tuple(int(part) for part in re.findall(r"\d+", version)[:3]) < ZARR_MIN:
        wanted = ".".join(map(str, ZARR_MIN))
        raise RuntimeError(
            f"digideep's replay memory needs zarr >= {wanted} (atomic file writes), zarr {version} is "
            f"installed; upgrade it: pip install 'zarr>={wanted},<4'"
        )


def compressors(compression: str | None, spec: KeySpec | None = None) -> tuple:
    """The bytes-to-bytes codecs of a key of ``spec``: its compression, then a crc32c of the bytes as
    stored, which zarr checks whenever it reads the chunk. ``None``/``"none"``; ``"zstd"`` (level 1)
    or ``"lz4"`` (blosc, level 1) for every key; ``"images"``: zstd level 1 for uint8 keys whose
    rows have two dimensions or more (images, frame stacks). Without ``spec`` it checks the name."""
    image = spec is not None and spec.dtype == np.uint8 and len(spec.shape) >= 2
    zstd = (zarr.codecs.ZstdCodec(level=1),)
    lz4 = (zarr.codecs.BloscCodec(cname="lz4", clevel=1, shuffle="shuffle"),)
    codecs = {None: (), "none": (), "zstd": zstd, "lz4": lz4, "images": zstd if image else ()}
    if compression not in codecs:
        raise ValueError(f"compression must be None, 'none', 'zstd', 'lz4' or 'images', got {compression!r}")
    return (*codecs[compression], zarr.codecs.Crc32cCodec())


@dataclass
class Record:
    """The commit record: the committed state, each key's spec, first row (``since``) and chunk rows,
    the oldest row kept (``first``), the totals of the checkpoints kept and of the presteps kept."""

    state: RingState = field(default_factory=RingState)
    specs: dict[str, KeySpec] = field(default_factory=dict)
    since: dict[str, int] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    first: int = 0
    checkpoints: tuple[int, ...] = ()
    presteps: dict[int, int] = field(default_factory=dict)  # total -> crc32c of its prestep object

    def to_json(self, num_workers: int, capacity: int) -> dict:
        keys = {
            key: {
                "dtype": spec.dtype.str,
                "shape": list(spec.shape),
                "since": self.since[key],
                "chunk_rows": self.rows[key],
            }
            for key, spec in self.specs.items()
        }
        record = {
            "format": FORMAT,
            "writer": f"digideep {digideep.__version__}",
            "num_workers": num_workers,
            "capacity": capacity,
            **self.state.as_dict(),
            "first": self.first,
            "keys": keys,
            "checkpoints": list(self.checkpoints),
            "presteps": [[total, crc] for total, crc in self.presteps.items()],
        }
        return {**record, "crc32c": record_crc(record)}

    @staticmethod
    def from_json(
        record: dict | None, name: str, location: Location, num_workers: int, capacity: int
    ) -> Record:
        """The record of the memory ``name`` at ``location``, checked against its crc32c (else a
        :class:`DamagedMemoryError`), its format, ``num_workers`` and ``capacity`` (else a ``ValueError``)."""
        if record is None:
            raise ValueError(
                f"memory '{name}': {location} is not a digideep memory (no Zarr group with a '{ATTR}' "
                "attribute); point the memory at its own folder"
            )
        if record.get("format") != FORMAT:
            raise ValueError(
                f"memory '{name}': {location} was written by {record.get('writer', 'an earlier digideep')} "
                f"in memory layout format {record.get('format')!r}; digideep {digideep.__version__} reads "
                f"format {FORMAT} only: start a new session, or continue this one with the version that "
                "wrote it"
            )
        if record.get("crc32c") != record_crc(record):
            raise DamagedMemoryError(
                f"memory '{name}': the commit record in {location} is damaged (its crc32c differs)"
            )
        layout = (record.get("num_workers"), record.get("capacity"))
        if layout != (num_workers, capacity):
            raise ValueError(
                f"memory '{name}': {location} holds num_workers={layout[0]}, capacity={layout[1]}, but this "
                f"memory was created with num_workers={num_workers}, capacity={capacity}; create it with "
                "the values of the run that wrote it"
            )
        keys = record["keys"]
        return Record(
            RingState.from_dict(record),
            {key: KeySpec(np.dtype(entry["dtype"]), tuple(entry["shape"])) for key, entry in keys.items()},
            {key: int(entry["since"]) for key, entry in keys.items()},
            {key: int(entry["chunk_rows"]) for key, entry in keys.items()},
            int(record["first"]),
            tuple(int(t) for t in record["checkpoints"]),
            {int(total): int(crc) for total, crc in record["presteps"]},
        )


def record_crc(record: dict) -> int:
    """crc32c of a commit record (without its own ``crc32c`` field), over its canonical JSON."""
    fields = {key: value for key, value in record.items() if key != "crc32c"}
    return google_crc32c.value(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode())
