"""The layout of a memory (key -> dtype and per-row shape) and the validation of incoming chunks.

A chunk is the Explorer's flat dict (see ``docs/architecture.md``, "Trajectory chunk"): keys are
unix-style paths, values numpy arrays shaped ``(num_workers, T + 1, *row_shape)``. Validation runs
before anything is written, so a refused chunk leaves the memory exactly as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import zarr

from digideep.utility.placeholders import placeholder_array

# numpy kinds a memory stores: bool, signed and unsigned ints, floats, complex.
_KINDS = "biufc"


class DamagedMemoryError(ValueError):
    """The memory's Zarr log changed on disk after it was written: a chunk is missing, fails its
    checksum or does not decode, the commit record fails its own, or an array differs from what the
    record lists (:mod:`digideep.memory.log`)."""


@dataclass(frozen=True)
class KeySpec:
    """What a key holds per row: ``dtype`` and ``shape`` (the trailing dims after workers and rows)."""

    dtype: np.dtype
    shape: tuple[int, ...]

    def describe(self) -> str:
        return f"{self.dtype} {self.shape}"

    def to_json(self) -> dict:
        return {"dtype": self.dtype.str, "shape": list(self.shape)}

    @staticmethod
    def from_json(entry: Mapping) -> KeySpec:
        return KeySpec(np.dtype(entry["dtype"]), tuple(int(d) for d in entry["shape"]))


def fill_value(dtype: np.dtype) -> np.generic:
    """The nonify placeholder of ``dtype``: NaN for floats, ``iinfo.min`` for ints, False for bools."""
    return placeholder_array((), dtype)[()]


def validate_chunk(
    chunk: Mapping[str, np.ndarray],
    num_workers: int,
    specs: Mapping[str, KeySpec],
    capacity: int | None = None,
    name: str = "memory",
) -> tuple[int, dict[str, KeySpec]]:
    """Check ``chunk`` against the memory's layout without changing anything.

    Args:
        chunk: flat dict, each value ``(num_workers, T + 1, *row_shape)``.
        num_workers: the memory's worker count.
        specs: the layout known so far (key -> :class:`KeySpec`).
        capacity: rows per worker of the ring; ``None`` for no bound.
        name: shown in error messages.

    Returns:
        ``(rows, new_specs)``: ``T + 1`` and the specs of keys the memory has not seen yet.

    Raises:
        TypeError: if the chunk is not a dict of numpy arrays, or a dtype cannot be stored.
        ValueError: if worker counts, row counts, shapes or dtypes do not fit the memory.
    """
    if not isinstance(chunk, Mapping) or not chunk:
        raise TypeError(
            f"{name}: a chunk must be a non-empty dict of numpy arrays, got {type(chunk).__name__}"
        )
    rows: int | None = None
    first_key = ""
    new_specs: dict[str, KeySpec] = {}
    for key, value in chunk.items():
        spec = specs.get(key)
        if spec is None and not isinstance(key, str):
            raise TypeError(f"chunk keys must be strings like '/observations', got {key!r}")
        if spec is None and (
            not key.startswith("/") or any(p in ("", ".", "..") for p in key.split("/")[1:])
        ):
            raise ValueError(
                f"chunk key {key!r} is not a flat unix-style path like '/agents/agent/actions'; "
                "flatten nested dicts with digideep.environment.data_helpers.flatten_dict"
            )
        if not isinstance(value, np.ndarray):
            raise TypeError(
                f"{name}: chunk key '{key}' is a {type(value).__name__}, expected a numpy array "
                "(convert tensors with .cpu().numpy() before storing)"
            )
        shape = value.shape
        if len(shape) < 2:
            raise ValueError(
                f"{name}: chunk key '{key}' has shape {shape}; values must be (num_workers, T + 1, ...)"
            )
        if shape[0] != num_workers:
            raise ValueError(
                f"{name}: chunk key '{key}' holds {shape[0]} workers (shape {shape}) but the memory was "
                f"created for num_workers={num_workers}; store chunks of the same explorer or create "
                "the memory with its num_workers"
            )
        if rows is None:
            rows, first_key = shape[1], key
        elif shape[1] != rows:
            raise ValueError(
                f"{name}: chunk key '{key}' has {shape[1]} rows but '{first_key}' has {rows}; every "
                "value of a chunk must be (num_workers, T + 1, ...) with the same T"
            )
        if spec is None:
            if value.dtype.kind not in _KINDS:
                raise TypeError(
                    f"{name}: chunk key '{key}' has dtype {value.dtype}; a memory stores bool, int, "
                    "float and complex arrays only"
                )
            new_specs[key] = KeySpec(value.dtype, shape[2:])
        elif value.dtype != spec.dtype or shape[2:] != spec.shape:
            raise ValueError(
                f"{name}: chunk key '{key}' changed from {spec.describe()} to {value.dtype} {shape[2:]} "
                "(dtype, per-row shape); keep each key's dtype and shape fixed during a run (cast in the "
                "explorer or the env wrappers) or store it under a new key"
            )
    assert rows is not None
    if rows < 2:
        raise ValueError(
            f"{name}: a chunk needs at least 2 rows (T >= 1 steps plus the final prestep), got {rows}"
        )
    if capacity is not None and rows > capacity:
        raise ValueError(
            f"{name}: a chunk of {rows} rows does not fit a capacity of {capacity} rows per worker; "
            "raise the capacity or store shorter chunks (n_steps)"
        )
    if new_specs:
        _check_no_nesting(list(specs) + list(new_specs), name)
    return rows, new_specs


def compressors(compression: str | None, spec: KeySpec | None = None) -> tuple:
    """The bytes-to-bytes codecs of a key of ``spec``: its compression, then a crc32c checksum.

    ``None``/``"none"``; ``"zstd"`` (level 1) or ``"lz4"`` (blosc, level 1) for every key;
    ``"images"``: zstd level 1 for uint8 keys whose rows have two dimensions or more (images or frame
    stacks), none for the rest. Without ``spec`` it only checks the name (``"images"``: no compression).

    The checksum comes last, so it covers the bytes as stored: zarr checks it whenever it reads the
    chunk, and a chunk damaged on disk (a flipped bit, a file overwritten) fails its read instead of
    training on other data (:mod:`digideep.memory.log`).
    """
    return (*_compression(compression, spec), zarr.codecs.Crc32cCodec())


def _compression(compression: str | None, spec: KeySpec | None = None) -> tuple:
    if compression is None or compression == "none":
        return ()
    if compression == "zstd":
        return (zarr.codecs.ZstdCodec(level=1),)
    if compression == "lz4":
        return (zarr.codecs.BloscCodec(cname="lz4", clevel=1, shuffle="shuffle"),)
    if compression == "images":
        image = spec is not None and spec.dtype == np.uint8 and len(spec.shape) >= 2
        return (zarr.codecs.ZstdCodec(level=1),) if image else ()
    raise ValueError(f"compression must be None, 'none', 'zstd', 'lz4' or 'images', got {compression!r}")


def _check_no_nesting(keys: list[str], name: str) -> None:
    """Refuse a key that is also the folder of another key ('/a' and '/a/b'): Zarr cannot hold both."""
    known = set(keys)
    for key in keys:
        parts = key.split("/")
        for i in range(2, len(parts)):
            parent = "/".join(parts[:i])
            if parent in known:
                raise ValueError(
                    f"{name}: keys '{parent}' and '{key}' cannot both be stored: '{parent}' would be "
                    "an array and a folder at once; rename one of them"
                )
