"""Samplers composed of units (the original Digideep's "decompose a sampler into smaller units").

A unit is a plain function ``unit(data, info) -> data``. The first unit of a sampler receives the
memory; each later unit receives what the previous one returned, usually a flat
``dict[str, np.ndarray]``. ``info`` is the sampler's dict of settings, shared by all units; every
unit documents the entries it reads. A sampler adds ``info["rng"]``, a ``numpy.random.Generator``
seeded from ``info.get("seed")``, unless ``info`` brings its own; its state is in the sampler's
``state_dict`` so that a resumed run draws the same batches.

Typed samplers build the usual compositions from keyword arguments: :class:`UniformTransitions`
(off-policy) and :class:`LastChunk` (on-policy); both are :class:`Sampler` objects (units can be
injected, ``state_dict`` holds the generator's state). :class:`DeviceUniformTransitions` is the
off-policy draw on a torch device: indices drawn there by a ``torch.Generator`` (its state in the
``state_dict`` too), rows gathered from the memory's device mirror; the units after it receive
torch tensors on that device.

Example (off-policy, with a NaN check injected)::

    sampler = Sampler(
        [uniform_transitions, check_nan],
        {"batch_size": 256, "num_batches": 1000, "keys": ["/observations", ...], "seed": 0},
    )
    batch = sampler(memory)  # {"/observations": (1000, 256, 17), ..., "/indices": (1000, 256, 2)}
    # the same, typed:
    sampler = UniformTransitions(batch_size=256, num_batches=1000, keys=["/observations", ...], seed=0)
    sampler.insert(1, check_nan)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from digideep.memory.units import device_uniform_transitions, get_last_chunk, uniform_transitions

__all__ = ["DeviceUniformTransitions", "LastChunk", "Sampler", "UniformTransitions", "Unit"]

logger = logging.getLogger(__name__)

Unit = Callable[[Any, dict[str, Any]], Any]


class Sampler:
    """A composition of units: ``sampler(memory)`` runs ``units`` in order.

    Args:
        units: the units, first to last.
        info: settings read by the units (copied; the sampler adds ``"rng"``).

    Returns of ``__call__``: what the last unit returns, a dict of arrays (for example
    ``uniform_transitions``) or an iterator of them (``minibatch_iterator``).
    """

    def __init__(self, units: Sequence[Unit], info: Mapping[str, Any] | None = None) -> None:
        self.units: list[Unit] = list(units)
        for unit in self.units:
            if not callable(unit):
                raise TypeError(f"sampler units must be callables unit(data, info) -> data, got {unit!r}")
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

    def __repr__(self) -> str:
        names = ", ".join(getattr(u, "__name__", repr(u)) for u in self.units)
        return f"Sampler([{names}])"

    def state_dict(self) -> dict[str, Any]:
        """The random generator's state (numbers and strings; loads with ``weights_only=True``)."""
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]


class UniformTransitions(Sampler):
    """Off-policy: ``num_batches`` batches of ``batch_size`` transitions drawn uniformly, with replacement.

    The :func:`~digideep.memory.units.uniform_transitions` unit with typed settings; ``sampler(memory)``
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
    """:class:`UniformTransitions` on a torch device: no host gather, no host-to-device copy.

    Indices are drawn on ``device`` by a ``torch.Generator`` seeded with ``seed``; rows are gathered
    from the memory's device mirror (:meth:`~digideep.memory.Memory.mirror`, the RAM ring itself on
    the CPU). ``sampler(memory)`` returns ``{key: (num_batches, batch_size, *row_shape)}`` torch
    tensors on ``device`` plus ``"/indices"``; units after the draw receive those tensors.

    ``state_dict()`` holds the torch generator's state (a uint8 tensor) beside the numpy generator's
    (which units may draw from), so a resumed run draws the same batches. A state saved on another
    device type (a CUDA run resumed on the CPU, or a state of :class:`UniformTransitions`) cannot
    continue that stream: the generator is then seeded from the numpy generator, deterministically.

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
