"""Memories of trajectory chunks and the samplers that read them.

- :class:`Memory` (:mod:`~digideep.memory.memory`): the off-policy replay memory, ``capacity`` rows
  per worker: a RAM ring (:mod:`~digideep.memory.ring`) that sampling reads, and with a path an
  append-only Zarr log (:mod:`~digideep.memory.log`) that ``flush()`` commits and
  ``restore(state)`` returns to byte for byte. ``mode="disk"`` keeps no ring: sampling reads the log.
- :class:`RolloutMemory` (:mod:`~digideep.memory.rollout`): on-policy, the latest chunk(s) by
  reference, stacked uint8 frames held once (:mod:`~digideep.memory.frames`).
- :class:`TrajectoryMemory`: what the Runner needs of both.
- :class:`Sampler` and its units (:mod:`~digideep.memory.sampler`).

A chunk is the Explorer's flat dict, ``(W, T + 1, ...)`` per key (``docs/trajectories.md``); its
last row, the final prestep, is overwritten by the next chunk's first row. The valid transition
rows are the ``size`` rows before ``pos`` (``valid_rows()``; sample through
:func:`uniform_transitions` or ``physical_rows``, never ``randint(size)``, wrong once the ring
wraps). A key that appears late is back-filled with the nonify placeholder; a chunk that does not
fit is refused with a message naming the key, the memory left unchanged. The design, its
guarantees and its costs: ``docs/memory.md``.
"""

from digideep.memory.layout import DamagedMemoryError, KeySpec
from digideep.memory.log import Readback
from digideep.memory.memory import Memory, TrajectoryMemory
from digideep.memory.ring import DeviceMirror, RingState
from digideep.memory.rollout import RolloutMemory
from digideep.memory.sampler import (
    DeviceUniformTransitions,
    LastChunk,
    Sampler,
    UniformTransitions,
    Unit,
    check_nan,
    chunk_stats,
    device_uniform_transitions,
    drop_final_prestep,
    flatten_first_two,
    get_last_chunk,
    inspect_shapes,
    minibatch_iterator,
    select_keys,
    uniform_transitions,
)

__all__ = [
    "DamagedMemoryError",
    "DeviceMirror",
    "DeviceUniformTransitions",
    "KeySpec",
    "LastChunk",
    "Memory",
    "Readback",
    "RingState",
    "RolloutMemory",
    "Sampler",
    "TrajectoryMemory",
    "UniformTransitions",
    "Unit",
    "check_nan",
    "chunk_stats",
    "device_uniform_transitions",
    "drop_final_prestep",
    "flatten_first_two",
    "get_last_chunk",
    "inspect_shapes",
    "minibatch_iterator",
    "select_keys",
    "uniform_transitions",
]
