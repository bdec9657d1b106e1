"""Memories of trajectory chunks and the samplers that read them (``docs/memory.md``):
:class:`Memory`, the off-policy replay memory (a RAM ring in front of an append-only Zarr log);
:class:`RolloutMemory`, the on-policy latest chunk(s); :class:`TrajectoryMemory`, what the Runner
needs of both; :class:`DurableMemory`, what it needs more of a memory kept in the session;
:class:`Sampler` and its units, which draw valid rows through :func:`uniform_transitions` or
``physical_rows`` (never ``randint(size)``, wrong once the ring wraps).
"""

from digideep.memory.log import Readback
from digideep.memory.memory import DurableMemory, Memory, TrajectoryMemory
from digideep.memory.record import DamagedMemoryError
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
    "DurableMemory",
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
