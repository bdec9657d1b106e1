"""Samplers composed of units (``docs/samplers.md``): a unit is a function ``unit(data, info) ->
data``; the first receives the memory, each later one what the previous returned. ``info`` holds the
settings the units read and ``"rng"``, a ``numpy.random.Generator`` seeded from ``info["seed"]``.
Sources take a memory; transforms take and return a flat dict of numpy arrays or torch tensors
(:func:`minibatch_iterator` returns an iterator: put it last); debug units return their input.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import pairwise
from typing import Any

import numpy as np
import torch

from digideep.utility.monitoring import monitor

logger = logging.getLogger(__name__)

Unit = Callable[[Any, dict[str, Any]], Any]
Batch = dict[str, np.ndarray]


class Sampler:
    """A composition of units: ``sampler(memory)`` runs ``units`` in order with ``info``, the
    settings the units read (copied; the sampler adds ``"rng"``)."""

    def __init__(self, units: Sequence[Unit], info: Mapping[str, Any] | None = None) -> None:
        self.units: list[Unit] = []
        for unit in units:
            self.insert(len(self.units), unit)
        self.info: dict[str, Any] = dict(info or {})
        if self.info.get("rng") is None:
            self.info["rng"] = np.random.default_rng(self.info.get("seed"))

    def __call__(self, memory: Any) -> Any:
        data = memory
        for unit in self.units:
            data = unit(data, self.info)
        return data

    def insert(self, index: int, unit: Unit) -> None:
        """Inject ``unit`` (e.g. a debug unit) before position ``index`` (``len(units)`` appends)."""
        if not callable(unit):
            raise TypeError(f"sampler units must be callables unit(data, info) -> data, got {unit!r}")
        self.units.insert(index, unit)

    def state_dict(self) -> dict[str, Any]:
        """The random generator's state (numbers and strings; loads with ``weights_only=True``)."""
        return {"rng": self.info["rng"].bit_generator.state}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.info["rng"].bit_generator.state = state["rng"]


class UniformTransitions(Sampler):
    """Off-policy: ``num_batches`` batches (e.g. one per gradient step of the iteration) of
    ``batch_size`` transitions of ``keys`` (``None``: every key) drawn uniformly, with replacement, by
    a generator seeded with ``seed`` (:func:`uniform_transitions`), then ``units`` (transforms,
    debug units): ``{key: (num_batches, batch_size, *row_shape)}`` plus ``"/indices"``."""

    def __init__(
        self,
        batch_size: int,
        num_batches: int = 1,
        keys: Sequence[str] | None = None,
        seed: int | None = None,
        units: Sequence[Unit] = (),
    ) -> None:
        if int(batch_size) < 1 or int(num_batches) < 1:
            raise ValueError(
                f"{type(self).__name__} needs batch_size >= 1 and num_batches >= 1, got {batch_size}, "
                f"{num_batches}"
            )
        keys = None if keys is None else list(keys)
        info = {"batch_size": int(batch_size), "num_batches": int(num_batches), "keys": keys, "seed": seed}
        super().__init__([uniform_transitions, *units], info)


class DeviceUniformTransitions(UniformTransitions):
    """:class:`UniformTransitions` on a torch device (:func:`device_uniform_transitions`): indices
    drawn there by a ``torch.Generator`` seeded with ``seed``, rows gathered from the memory's device
    mirror; the units after the draw receive tensors on ``device``. A saved state of another device
    type cannot continue its stream: the generator is then seeded from the numpy generator, the same
    way on every resume.
    """

    def __init__(
        self,
        batch_size: int,
        num_batches: int = 1,
        keys: Sequence[str] | None = None,
        seed: int | None = None,
        device: torch.device | str = "cpu",
        units: Sequence[Unit] = (),
    ) -> None:
        super().__init__(batch_size, num_batches, keys, seed, units)
        self.units[0] = device_uniform_transitions
        self.device = torch.device(device)
        self.generator = torch.Generator(device=self.device)
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(int(seed))
        self.info |= {"device": self.device, "generator": self.generator}

    def state_dict(self) -> dict[str, Any]:
        """Both generators' states: ``rng`` (numpy, as :class:`Sampler`) and ``generator``:
        ``{"device": "cuda", "state": (n,) uint8 tensor}``; loads with ``weights_only=True``."""
        generator = {"device": self.device.type, "state": self.generator.get_state()}
        return {**super().state_dict(), "generator": generator}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        saved = state.get("generator")  # absent in a state of UniformTransitions
        if saved is not None and saved["device"] == self.device.type:
            self.generator.set_state(saved["state"].cpu())
            return
        origin = "the host sampler" if saved is None else f"a {saved['device']} generator"
        logger.info(
            "sampler: the saved state is %s's, not a %s generator's: the draws continue from a seed "
            "taken from the numpy generator (the same on every resume, not the saved stream)",
            origin,
            self.device.type,
        )
        self.generator.manual_seed(int(self.info["rng"].integers(2**63)))


class LastChunk(Sampler):
    """On-policy: the memory's latest chunk, ``(W, T + 1, ...)`` per key, then ``units`` (e.g.
    ``drop_final_prestep``, ``minibatch_iterator``, which shuffles with the generator seeded with
    ``seed``); ``info``: the settings they read (e.g. ``num_minibatches=4, epochs=10``)."""

    def __init__(self, units: Sequence[Unit] = (), seed: int | None = None, **info: Any) -> None:
        super().__init__([get_last_chunk, *units], {**info, "seed": seed})


# -- units: sources (take a memory) and transforms (take a flat dict of arrays) ------------------


def get_last_chunk(memory: Any, info: dict[str, Any]) -> Batch:
    """The memory's latest chunk: ``(W, T + 1, ...)`` per key, the memory's own arrays (units after
    this one must not write into them). The last row is the final prestep, its transition entries
    NaN placeholders. No ``info`` entries."""
    return dict(memory.last_chunk())


def uniform_transitions(memory: Any, info: dict[str, Any]) -> Batch:
    """``info["num_batches"]`` (default 1) batches of ``info["batch_size"]`` transitions drawn
    uniformly over every worker's valid rows (never a final prestep), with replacement, in one draw
    by ``info["rng"]``: ``{key: (num_batches, batch_size, *row_shape)}`` of ``info["keys"]`` (default
    all), each read with one fancy-index operation, plus ``"/indices": (num_batches, batch_size, 2)
    int64`` holding (worker, physical row). Refuses a memory that holds no transition yet."""
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
    """:func:`uniform_transitions` on a torch device, from the memory's device mirror (refused for a
    ``mode="disk"`` memory): the same distribution, another random stream; tensors on
    ``info["device"]``, drawn by ``info["generator"]`` (added by :class:`DeviceUniformTransitions`)."""
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
    """``batch_size``, ``num_batches``, the memory's valid rows per worker and the keys to read."""
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
    """``(W, T + 1, ...)`` -> ``(W, T, ...)``: drop the final prestep row (views, no copy); put it
    after the units that need the final prestep (bootstrapped returns). No ``info`` entries."""
    return {key: value[:, :-1] for key, value in data.items()}


def flatten_first_two(data: Batch, info: dict[str, Any]) -> Batch:
    """``(A, B, ...)`` -> ``(A * B, ...)`` for every key (a view when the array allows it)."""
    return {
        key: value.reshape(value.shape[0] * value.shape[1], *value.shape[2:]) for key, value in data.items()
    }


def minibatch_iterator(data: Batch, info: dict[str, Any]) -> Iterator[Batch]:
    """An iterator of shuffled minibatches of a flattened rollout ``{key: (N, ...)}``: ``{key: (n,
    ...)}`` copies with ``"/indices": (n,) int64``, the rows they hold, for ``info["epochs"]``
    (default 1) passes, each a fresh permutation by ``info["rng"]``. ``info["num_minibatches"]``
    per epoch (sizes differ by at most one), or ``info["minibatch_size"]`` rows each (the last of
    an epoch may be smaller)."""
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
    epochs, rng = int(info.get("epochs", 1)), info["rng"]

    def generate() -> Iterator[Batch]:
        for _ in range(epochs):
            order = rng.permutation(total)
            for lo, hi in pairwise(bounds):
                index = order[lo:hi]
                yield {**{key: value[index] for key, value in data.items()}, "/indices": index}

    return generate()


# -- debug units: return their input unchanged (numpy arrays or torch tensors on any device) ------


def _host(value: np.ndarray | torch.Tensor) -> np.ndarray:
    """A numpy array of ``value`` (a tensor is copied to the host)."""
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value


def _debug_unit(check: Callable[[Batch, dict[str, Any]], None]) -> Unit:
    """The unit that runs ``check(batch, info)`` on its input, a dict or each dict of an iterator as
    it is drawn, and returns the input."""

    @functools.wraps(check)
    def unit(data: Any, info: dict[str, Any]) -> Any:
        if isinstance(data, Mapping):
            check(data, info)
            return data

        def checked() -> Iterator[Batch]:
            for item in data:
                check(item, info)
                yield item

        return checked()

    return unit


@_debug_unit
def inspect_shapes(batch: Batch, info: dict[str, Any]) -> None:
    """Log every key's shape and dtype at INFO level (``info["debug_tag"]`` prefixes the line)."""
    lines = "\n".join(f"  {key}: {tuple(value.shape)} {value.dtype}" for key, value in batch.items())
    logger.info("%s shapes:\n%s", info.get("debug_tag", "sampler"), lines)


@_debug_unit
def check_nan(batch: Batch, info: dict[str, Any]) -> None:
    """Raise a ``ValueError`` naming the first floating-point key that holds NaN or +-inf, how many and
    where the first is; ``info["nan_skip_keys"]`` (default none) lists keys left unchecked, e.g. the
    transition keys of a chunk with its final prestep (or put ``drop_final_prestep`` before)."""
    skip = set(info.get("nan_skip_keys", ()))
    for key, value in batch.items():
        tensor = isinstance(value, torch.Tensor)
        floating = value.is_floating_point() or value.is_complex() if tensor else value.dtype.kind in "fc"
        if key in skip or not floating:
            continue
        finite = torch.isfinite(value) if tensor else np.isfinite(value)
        if not finite.all():
            bad = np.argwhere(~_host(finite))
            raise ValueError(
                f"check_nan: key '{key}' {tuple(value.shape)} holds {len(bad)} NaN/inf values, the "
                f"first at index {tuple(int(i) for i in bad[0])}"
            )


@_debug_unit
def chunk_stats(batch: Batch, info: dict[str, Any]) -> None:
    """Mean and std of every numeric key, placeholders left out (NaN, the ``iinfo.min`` of signed
    ints), logged at INFO and recorded in the Monitor as ``<prefix><key>/mean`` and ``.../std``,
    prefix ``info["stats_prefix"]`` (default ``"/memory/stats"``)."""
    prefix, lines = info.get("stats_prefix", "/memory/stats"), []
    for key, tensor in batch.items():
        value = _host(tensor)
        if key == "/indices" or value.dtype.kind not in "biuf":
            continue
        values = value.astype(np.float64, copy=False)
        if value.dtype.kind == "f":
            values = values[~np.isnan(values)]
        elif value.dtype.kind == "i":
            values = values[value != np.iinfo(value.dtype).min]
        if values.size == 0:
            continue
        mean, std = float(values.mean()), float(values.std())
        monitor(f"{prefix}{key}/mean", mean)
        monitor(f"{prefix}{key}/std", std)
        lines.append(f"  {key}: mean {mean:.6g} std {std:.6g}")
    logger.info("chunk stats:\n%s", "\n".join(lines))
