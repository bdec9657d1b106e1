"""Common sampler units ``unit(data, info) -> data`` (see :mod:`digideep.memory.sampler`).

Sources (first unit, take a memory):
- :func:`get_last_chunk`: the latest chunk, ``(W, T + 1, ...)`` per key (on-policy);
- :func:`uniform_transitions`: uniform (worker, row) transitions, ``(num_batches, batch_size, ...)``;
- :func:`device_uniform_transitions`: the same draw on a torch device, gathered from the memory's
  device mirror: torch tensors on that device.

Transforms (take and return a flat dict of arrays, numpy or torch alike):
- :func:`select_keys`, :func:`drop_final_prestep`, :func:`flatten_first_two`;
- :func:`minibatch_iterator`: returns an iterator of minibatch dicts (put it last).
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import numpy as np
import torch

__all__ = [
    "device_uniform_transitions",
    "drop_final_prestep",
    "flatten_first_two",
    "get_last_chunk",
    "minibatch_iterator",
    "select_keys",
    "uniform_transitions",
]

Batch = dict[str, np.ndarray]


def get_last_chunk(memory: Any, info: dict[str, Any]) -> Batch:
    """The memory's latest chunk (``RolloutMemory`` or ``Memory``): ``(W, T + 1, ...)`` per key.

    Arrays are the memory's own (no copy): units after this one must not write into them. The last
    row is the final prestep; its transition entries are NaN placeholders. No ``info`` entries.
    """
    return dict(memory.last_chunk())


def uniform_transitions(memory: Any, info: dict[str, Any]) -> Batch:
    """Draw transitions uniformly over every worker's valid rows, with replacement.

    ``num_batches * batch_size`` (worker, row) pairs come from one draw; each key is read with one
    fancy-index operation. The final prestep row is never drawn, so ``/next_observations``,
    ``/rewards``, ``/terminals`` and ``/truncations`` of a sampled row are real.

    info:
        batch_size (int): transitions per batch.
        num_batches (int, default 1): batches drawn at once (e.g. one per gradient step).
        keys (list[str] | None, default all): keys to read.
        rng (np.random.Generator): added by the Sampler.

    Returns:
        ``{key: (num_batches, batch_size, *row_shape)}`` in the memory's dtypes, plus
        ``"/indices": (num_batches, batch_size, 2) int64`` holding (worker, physical row).

    Raises:
        ValueError: if the memory holds no transition yet.
    """
    batch_size, num_batches, size, keys = _draw_sizes("uniform_transitions", memory, info)
    draws = info["rng"].integers(0, memory.num_workers * size, num_batches * batch_size)
    workers, logical = np.divmod(draws, size)
    rows = memory.physical_rows(logical)
    batch = {}
    for key in keys:
        values = memory.gather(key, workers, rows)
        batch[key] = values.reshape(num_batches, batch_size, *values.shape[1:])
    batch["/indices"] = np.stack((workers, rows), axis=-1).reshape(num_batches, batch_size, 2)
    return batch


def device_uniform_transitions(memory: Any, info: dict[str, Any]) -> dict[str, torch.Tensor]:
    """:func:`uniform_transitions` on a torch device: drawn by a ``torch.Generator`` there, gathered
    from the memory's device mirror (:meth:`~digideep.memory.Memory.mirror`), no host copy.

    The same distribution as :func:`uniform_transitions` (uniform, with replacement, over every
    worker's valid rows, never the final prestep), from another random stream.

    info:
        batch_size (int), num_batches (int, default 1), keys (list[str] | None, default all): as in
            :func:`uniform_transitions`.
        device (torch.device): where the mirror lives and the batch is returned.
        generator (torch.Generator): on ``device``; added by :class:`~digideep.memory.DeviceUniformTransitions`.

    Returns:
        ``{key: (num_batches, batch_size, *row_shape)}`` tensors on ``device`` in the memory's dtypes,
        plus ``"/indices": (num_batches, batch_size, 2) int64`` holding (worker, physical row).

    Raises:
        ValueError: if the memory holds no transition yet, or reads Zarr (``mode="disk"``).
    """
    batch_size, num_batches, size, keys = _draw_sizes("device_uniform_transitions", memory, info)
    device = torch.device(info["device"])
    mirror = memory.mirror(device, keys)
    count = num_batches * batch_size
    draws = torch.randint(0, memory.num_workers * size, (count,), generator=info["generator"], device=device)
    workers, logical = draws.div(size, rounding_mode="floor"), draws.remainder(size)
    rows = memory.physical_rows(logical)
    index = workers * memory.capacity + rows
    batch = {}
    for key in keys:
        values = mirror.gather(key, index)
        batch[key] = values.view(num_batches, batch_size, *values.shape[1:])
    batch["/indices"] = torch.stack((workers, rows), dim=-1).view(num_batches, batch_size, 2)
    return batch


def _draw_sizes(unit: str, memory: Any, info: dict[str, Any]) -> tuple[int, int, int, list[str]]:
    """``batch_size``, ``num_batches``, the memory's valid rows per worker and the keys to read.

    Raises:
        ValueError: the memory holds no transition yet.
    """
    if memory.size <= 0:
        raise ValueError(
            f"{unit}: the memory holds no transition yet; store a chunk first "
            "(with warm_start, explore before the first update)"
        )
    keys = info.get("keys") or memory.keys()
    return int(info["batch_size"]), int(info.get("num_batches", 1)), int(memory.size), keys


def select_keys(data: Batch, info: dict[str, Any]) -> Batch:
    """Keep ``info["keys"]`` (list of keys; ``"/indices"`` is kept when present)."""
    missing = [key for key in info["keys"] if key not in data]
    if missing:
        raise KeyError(f"select_keys: keys {missing} are not in the data; it holds {list(data)}")
    keep = {key: data[key] for key in info["keys"]}
    if "/indices" in data:
        keep["/indices"] = data["/indices"]
    return keep


def drop_final_prestep(data: Batch, info: dict[str, Any]) -> Batch:
    """``(W, T + 1, ...)`` -> ``(W, T, ...)``: drop the final prestep row (views, no copy).

    Use it after the units that need the final prestep (bootstrapped returns). No ``info`` entries.
    """
    return {key: value[:, :-1] for key, value in data.items()}


def flatten_first_two(data: Batch, info: dict[str, Any]) -> Batch:
    """``(A, B, ...)`` -> ``(A * B, ...)`` for every key (a view when the array allows it)."""
    return {
        key: value.reshape(value.shape[0] * value.shape[1], *value.shape[2:]) for key, value in data.items()
    }


def minibatch_iterator(data: Batch, info: dict[str, Any]) -> Iterator[Batch]:
    """Shuffled minibatches of a flattened rollout ``{key: (N, ...)}``, for ``epochs`` passes.

    info:
        num_minibatches (int): minibatches per epoch (sizes differ by at most one); or
        minibatch_size (int): rows per minibatch (the last of an epoch may be smaller).
        epochs (int, default 1): passes over the data, each with a fresh permutation.
        rng (np.random.Generator): added by the Sampler.

    Returns:
        An iterator of ``{key: (n, ...)}`` dicts (fancy-indexed copies), each with
        ``"/indices": (n,) int64``, the rows of the flattened data it holds.
    """
    lengths = {len(value) for value in data.values()}
    if len(lengths) != 1:
        raise ValueError(f"minibatch_iterator: keys have different lengths {sorted(lengths)}; flatten first")
    (total,) = lengths
    if "num_minibatches" in info:
        count = int(info["num_minibatches"])
        if not 1 <= count <= total:
            raise ValueError(f"minibatch_iterator: num_minibatches={count} must be in [1, {total}]")
        bounds = np.linspace(0, total, count + 1).astype(np.int64)
    elif "minibatch_size" in info:
        bounds = np.r_[np.arange(0, total, int(info["minibatch_size"])), total]
    else:
        raise KeyError("minibatch_iterator: give info['num_minibatches'] or info['minibatch_size']")
    epochs = int(info.get("epochs", 1))
    rng: np.random.Generator = info["rng"]

    def generate() -> Iterator[Batch]:
        for _ in range(epochs):
            order = rng.permutation(total)
            for lo, hi in pairwise(bounds):
                index = order[lo:hi]
                minibatch = {key: value[index] for key, value in data.items()}
                minibatch["/indices"] = index
                yield minibatch

    return generate()
