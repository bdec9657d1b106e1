"""The replay ring on a torch device (what the device sampler gathers from), kept equal to the RAM
ring: on the CPU the ring itself (``torch.from_numpy`` views), elsewhere a copy that every store
updates and a restore refills. It holds no state of its own."""

from __future__ import annotations

import logging
from collections.abc import Iterable

import torch

from digideep.memory.ring import Pieces, Ring

__all__ = ["DeviceMirror"]

logger = logging.getLogger(__name__)


class DeviceMirror:
    """The rings of some keys of a memory's :class:`~digideep.memory.ring.Ring` on ``device``, kept equal to them.

    Args:
        ring: the memory's RAM ring.
        device: where the mirror lives; ``cpu`` shares the ring's memory (no copy).
        name: the memory's, shown in messages.
        copy: keep a copy that stores fill (default: on every device but the CPU). ``True`` on the
            CPU runs the CUDA path (the fill and the row copies of each store) where there is no GPU.

    Attributes:
        rings: ``{key: (W, C, *row_shape) tensor}`` in the ring's dtype, on ``device``.
    """

    def __init__(self, ring: Ring, device: torch.device | str, name: str, copy: bool | None = None) -> None:
        self.ring, self.device, self.name = ring, torch.device(device), name
        self.copy = self.device.type != "cpu" if copy is None else bool(copy)
        self.rings: dict[str, torch.Tensor] = {}
        self._flat: dict[str, torch.Tensor] = {}

    def add(self, keys: Iterable[str]) -> None:
        """Mirror ``keys`` too (those not mirrored yet are filled from the ring now)."""
        for key in keys:
            if key not in self.rings:
                self._fill(key)

    def refill(self) -> None:
        """Fill every mirrored key from the ring again (after the memory returned to a saved state,
        whose ring may hold new arrays)."""
        for key in list(self.rings):
            self._fill(key)

    def write(self, pieces: Pieces) -> None:
        """Copy the rows a store just wrote, ``ring[:, start:stop]`` per piece (a no-op on the CPU)."""
        if not self.copy:
            return
        for key, tensor in self.rings.items():
            ring = self.ring.arrays[key]
            for start, stop, _ in pieces:
                tensor[:, start:stop].copy_(torch.from_numpy(ring[:, start:stop]))

    def gather(self, key: str, index: torch.Tensor) -> torch.Tensor:
        """Rows ``index`` of the flattened ring of ``key``: ``(n, *row_shape)``, a new tensor.

        Args:
            index: ``(n,) int64`` on :attr:`device`, ``worker * capacity + physical_row``.

        On the CPU, numpy's ``take`` on the same memory (torch's ``index_select`` of 17-float rows ran
        at a fifth of its speed on one thread here); elsewhere ``index_select``. The same rows either way.
        """
        flat = self._flat[key]
        if self.device.type == "cpu":
            return torch.from_numpy(flat.numpy().take(index.numpy(), axis=0))
        return flat.index_select(0, index)

    def _fill(self, key: str) -> None:
        ring = self.ring.arrays[key]
        host = torch.from_numpy(ring)
        tensor = host.to(self.device, copy=True) if self.copy else host
        self.rings[key] = tensor
        self._flat[key] = tensor.view(ring.shape[0] * ring.shape[1], *ring.shape[2:])
        if self.copy:
            logger.debug(
                "memory '%s': %s mirrored on %s (%d bytes)", self.name, key, self.device, ring.nbytes
            )
