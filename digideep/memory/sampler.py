"""Samplers composed of units (the original Digideep's "decompose a sampler into smaller units").

A unit is a plain function ``unit(data, info) -> data``. The first unit of a sampler receives the
memory; each later unit receives what the previous one returned, usually a flat
``dict[str, np.ndarray]``. ``info`` is the sampler's dict of settings, shared by all units; every
unit documents the entries it reads. A sampler adds ``info["rng"]``, a ``numpy.random.Generator``
seeded from ``info.get("seed")``, unless ``info`` brings its own; its state is in the sampler's
``state_dict`` so that a resumed run draws the same batches.

Example (off-policy, with a NaN check injected)::

    sampler = Sampler(
        [uniform_transitions, check_nan],
        {"batch_size": 256, "num_batches": 1000, "keys": ["/observations", ...], "seed": 0},
    )
    batch = sampler(memory)  # {"/observations": (1000, 256, 17), ..., "/indices": (1000, 256, 2)}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["Sampler", "Unit"]

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
