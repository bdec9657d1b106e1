"""Samplers composed of units (the original Digideep's "decompose a sampler into smaller units").

A unit is a plain function ``unit(data, info) -> data``: the first unit of a :class:`Sampler`
receives the memory, each later one what the previous returned (usually a flat
``dict[str, np.ndarray]``). ``info`` is the sampler's dict of settings, shared by all units; every
unit documents the entries it reads, and the sampler adds ``info["rng"]``, a
``numpy.random.Generator`` seeded from ``info.get("seed")`` whose state is in its ``state_dict``.

Example (off-policy, with a NaN check injected)::

    sampler = UniformTransitions(batch_size=256, num_batches=1000, keys=["/observations", ...], seed=0)
    sampler.insert(1, check_nan)
    batch = sampler(memory)  # {"/observations": (1000, 256, 17), ..., "/indices": (1000, 256, 2)}

Units: sources take a memory (:func:`get_last_chunk`, :func:`uniform_transitions`,
:func:`device_uniform_transitions`); transforms take and return a flat dict of numpy arrays or
torch tensors (:func:`select_keys`, :func:`drop_final_prestep`, :func:`flatten_first_two`;
:func:`minibatch_iterator` returns an iterator of minibatches: put it last). Debug units
(:func:`inspect_shapes`, :func:`check_nan`, :func:`chunk_stats`) return their input unchanged and
take a dict or an iterator of them.
"""

from __future__ import annotations

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
    """A composition of units: ``sampler(memory)`` runs ``units`` in order.

    Args:
        units: the units, first to last.
        info: settings read by the units (copied; the sampler adds ``"rng"``).
    """

    def __init__(self, units: Sequence[Unit], info: Mapping[str, Any] | None = None) -> None:
        self.units: list[Unit] = []
        for unit in units:
            self.insert(len(self.units), unit)
        self.info: dict[str, Any] = dict(info or {})
        if self.info.get("rng") is None:
            self.info["rng"] = np.random.default_rng(self.info.get("seed"))

    @property
    def rng(self) -> np.random.Generator:
        return self.info["rng"]

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
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]


class UniformTransitions(Sampler):
    """Off-policy: ``num_batches`` batches of ``batch_size`` transitions drawn uniformly, with replacement.

    The :func:`uniform_transitions` unit with typed settings; ``sampler(memory)``
    returns ``{key: (num_batches, batch_size, *row_shape)}`` plus ``"/indices"``.

    Args:
        batch_size: transitions per batch.
        num_batches: batches drawn at once (e.g. one per gradient step of the iteration).
        keys: keys to read; ``None`` reads every key.
        seed: seed of the sampler's generator.
        units: units run after the draw (transforms, debug units).
    """

    def __init__(
        self,
        batch_size: int,
        num_batches: int = 1,
        keys: Sequence[str] | None = None,
        seed: int | None = None,
        units: Sequence[Unit] = (),
    ) -> None:
        info = _transitions_info(type(self).__name__, batch_size, num_batches, keys, seed)
        super().__init__([uniform_transitions, *units], info)


class DeviceUniformTransitions(Sampler):
    """:class:`UniformTransitions` on a torch device: indices drawn there by a ``torch.Generator``, rows
    gathered from the memory's device mirror; units after the draw receive tensors on ``device``.
    A saved state of another device type cannot continue its stream: the generator is then seeded
    from the numpy generator, the same way on every resume.

    Args:
        batch_size: transitions per batch.
        num_batches: batches drawn at once (e.g. one per gradient step of the iteration).
        keys: keys to read; ``None`` reads every key.
        seed: seed of both generators.
        device: where indices are drawn, rows gathered and batches returned.
        units: units run after the draw (transforms, debug units), on torch tensors.
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
        info = _transitions_info(type(self).__name__, batch_size, num_batches, keys, seed)
        self.device = torch.device(device)
        self.generator = torch.Generator(device=self.device)
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(int(seed))
        info |= {"device": self.device, "generator": self.generator}
        super().__init__([device_uniform_transitions, *units], info)

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
        self.generator.manual_seed(int(self.rng.integers(2**63)))


class LastChunk(Sampler):
    """On-policy: the memory's latest chunk, ``(W, T + 1, ...)`` per key, then ``units``.

    Args:
        units: units run after it (e.g. ``drop_final_prestep``, ``minibatch_iterator``).
        seed: seed of the generator the units may read (``minibatch_iterator`` shuffles with it).
        **info: settings the units read (e.g. ``num_minibatches=4, epochs=10``).
    """

    def __init__(self, units: Sequence[Unit] = (), seed: int | None = None, **info: Any) -> None:
        super().__init__([get_last_chunk, *units], {**info, "seed": seed})


def _transitions_info(
    sampler: str, batch_size: int, num_batches: int, keys: Sequence[str] | None, seed: int | None
) -> dict[str, Any]:
    """The ``info`` of a uniform-transitions sampler, its sizes checked.

    Raises:
        ValueError: ``batch_size`` or ``num_batches`` below 1.
    """
    if int(batch_size) < 1 or int(num_batches) < 1:
        raise ValueError(
            f"{sampler} needs batch_size >= 1 and num_batches >= 1, got {batch_size}, {num_batches}"
        )
    keys = None if keys is None else list(keys)
    return {"batch_size": int(batch_size), "num_batches": int(num_batches), "keys": keys, "seed": seed}


# -- units: sources (take a memory) and transforms (take a flat dict of arrays) ------------------


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
    """:func:`uniform_transitions` on a torch device, from the memory's device mirror: the same
    distribution, another random stream.

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


# -- debug units: return their input unchanged (numpy arrays or torch tensors on any device) ------


def _floating(value: np.ndarray | torch.Tensor) -> bool:
    if isinstance(value, torch.Tensor):
        return value.is_floating_point() or value.is_complex()
    return value.dtype.kind in "fc"


def _host(value: np.ndarray | torch.Tensor) -> np.ndarray:
    """A numpy array of ``value`` (a tensor is copied to the host)."""
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value


def _each(data: Any, check: Callable[[Batch], None]) -> Any:
    if isinstance(data, Mapping):
        check(data)
        return data

    def checked() -> Iterator[Batch]:
        for item in data:
            check(item)
            yield item

    return checked()


def inspect_shapes(data: Any, info: dict[str, Any]) -> Any:
    """Log every key's shape and dtype at INFO level (``info["debug_tag"]`` prefixes the line)."""
    tag = info.get("debug_tag", "sampler")

    def check(batch: Batch) -> None:
        lines = "\n".join(f"  {key}: {tuple(value.shape)} {value.dtype}" for key, value in batch.items())
        logger.info("%s shapes:\n%s", tag, lines)

    return _each(data, check)


def check_nan(data: Any, info: dict[str, Any]) -> Any:
    """Raise if a floating-point key holds NaN or +-inf.

    ``info["nan_skip_keys"]`` (list, default none) lists keys left unchecked, e.g. the transition
    keys of a chunk whose final prestep row holds NaN placeholders (or put
    ``drop_final_prestep`` before this unit).

    Raises:
        ValueError: naming the first bad key, how many values are bad and where the first is.
    """
    skip = set(info.get("nan_skip_keys", ()))

    def check(batch: Batch) -> None:
        for key, value in batch.items():
            if key in skip or not _floating(value):
                continue
            finite = torch.isfinite(value) if isinstance(value, torch.Tensor) else np.isfinite(value)
            if not finite.all():
                bad = np.argwhere(~_host(finite))
                raise ValueError(
                    f"check_nan: key '{key}' {tuple(value.shape)} holds {len(bad)} NaN/inf values, the "
                    f"first at index {tuple(int(i) for i in bad[0])}"
                )

    return _each(data, check)


def chunk_stats(data: Any, info: dict[str, Any]) -> Any:
    """Mean and std of every numeric key, logged at INFO and recorded in the Monitor.

    Placeholders are left out (NaN for floats, the sentinel ``iinfo.min`` for signed ints). Monitor names are
    ``<prefix><key>/mean`` and ``<prefix><key>/std``, prefix ``info["stats_prefix"]`` (default
    ``"/memory/stats"``).
    """
    prefix = info.get("stats_prefix", "/memory/stats")

    def check(batch: Batch) -> None:
        lines = []
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

    return _each(data, check)
