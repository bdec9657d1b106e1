"""Memories of trajectory chunks and the samplers that read them.

Contract (relied on by the Runner and the agents)
=================================================

``Memory(path, num_workers, capacity, mode="ram", zarr_chunk_rows=None, compression=None, name=None)``
    Circular memory, off-policy replay: a storage (the :class:`~digideep.memory.storage.Storage`
    contract: what a memory needs from where its rows live) plus a ring cursor
    (:class:`~digideep.memory.ring.RingCursor`, the pointers). ``capacity`` counts rows (steps)
    **per worker**; ``path`` is the Zarr group's place, a local folder or an fsspec URL (the Runner
    passes ``session.memory_location(name).url``), or ``None`` for RAM only. ``mode`` says where sampling
    reads: ``"ram"``, a numpy ring, with every chunk also written behind to Zarr when there is a
    path (:mod:`~digideep.memory.durable.write_through`); ``"disk"``, Zarr only.

    - ``store(chunk)``: a chunk is the Explorer's flat dict, ``(W, T + 1, ...)`` per key (see
      ``docs/architecture.md``, "Trajectory chunk"). Writes the RAM ring and queues the rows for
      the background writer; raises a background write's error.
    - ``flush()``: waits for the outstanding writes, writes the open chunks, commits the pointers.
    - ``restore(state)``: returns to a checkpoint's ``state_dict()``, data included (the one call a
      resume needs; ``load_state_dict`` is the same). ``load()``: returns to the last commit.
      ``FileNotFoundError`` if nothing was flushed; ``ValueError`` with a message if the group is
      not a memory of this ``num_workers`` and ``capacity``.
    - ``state_dict()``: pointers and counters only (``pos``, ``size``, ``total``,
      ``last_chunk_rows`` from the cursor, ``num_workers``, ``capacity`` from the storage: ints).
    - ``checkpoint_committed(d=None)``: call it once a checkpoint holding ``d`` (the state after a
      ``flush()``; default the current one) is durable; the Runner does after every checkpoint.
    - Reading: ``keys()``, ``memory[key]`` (``(W, capacity, ...)`` ring: numpy in "ram" mode, the
      ``zarr.Array`` in "disk" mode), ``size`` (valid transition rows per worker), ``pos``,
      ``num_workers``, ``capacity``, ``valid_rows()``, ``physical_rows(logical)``,
      ``gather(key, workers, rows)``, ``last_chunk()``.
    - ``mirror(device, keys)``: the rings on a torch device (:mod:`digideep.memory.mirror`), which
      every ``store()`` keeps equal to the RAM ring; on the CPU the RAM ring itself.

``RolloutMemory(num_workers, keep=1, name="rollout", frames=True)``
    On-policy: holds the latest chunk(s) by reference (no copy), stacked uint8 frames (Atari) one
    frame per row (:mod:`digideep.memory.frames`, rebuilt bit-identically on read). ``last_chunk()``
    and ``memory[key]`` give ``(W, T + 1, ...)``; ``gather(key, workers, rows)`` a minibatch;
    ``nbytes`` what it holds. ``flush``/``load`` do nothing.

``Sampler(units, info)``; ``sampler(memory)``
    Runs ``unit(data, info) -> data`` in order (:mod:`digideep.memory.sampler`). Typed samplers:
    ``UniformTransitions(batch_size, num_batches, keys, seed)``, its twin on a torch device
    ``DeviceUniformTransitions(..., device)`` and ``LastChunk(units)``. Units:
    :func:`get_last_chunk`, :func:`uniform_transitions`, :func:`device_uniform_transitions`, :func:`select_keys`,
    :func:`drop_final_prestep`, :func:`flatten_first_two`, :func:`minibatch_iterator`; debug units
    :func:`inspect_shapes`, :func:`check_nan`, :func:`chunk_stats`.

Rows, the overrun convention, valid rows
========================================

A chunk of ``T + 1`` rows is written at rows ``pos .. pos + T`` of every worker (modulo
``capacity``); its last row (the final prestep) becomes the new ``pos`` and is overwritten by the
next chunk's first row, as in the original Digideep. So the latest row is always a final prestep
whose transition entries (``/rewards``, ``/terminals``, ``/truncations``, ``/next_observations``,
``/infos/...``) are placeholders. The **valid transition rows** are the ``size`` rows before
``pos``: physical rows ``(pos - size + k) % capacity`` for ``k in range(size)``, oldest first
(``valid_rows()``); while the ring has not wrapped that is simply ``0 .. size - 1``. ``size``
grows by ``T`` per chunk up to ``capacity - 1``. Sample through ``uniform_transitions`` or
``physical_rows`` rather than ``randint(size)``, which is wrong once the ring wraps.

Keys that appear late are back-filled with the nonify placeholder for earlier rows
(``digideep.utility.placeholders.placeholder_array``: NaN for floats, ``np.iinfo(dtype).min``
for signed ints, 0 for unsigned ints, False for bools); a key missing from a chunk gets the
placeholder for that chunk's rows. dtypes are preserved. A chunk whose worker count differs, whose
keys change dtype or row shape, or that has more rows than ``capacity`` is refused with a
``ValueError``/``TypeError`` naming the key, and the memory is left unchanged.

Durability (what a crash leaves)
================================

Zarr layout: :mod:`digideep.memory.durable.zarr_group` (the machinery: :mod:`digideep.memory.durable`). The commit record (pointers, committed keys, the
anchor and the undo area's extent) is one group attribute; zarr >= 3.1.3 writes it, like every
chunk, to a temporary file renamed into place, so a killed process leaves each file old or new.
The **anchor** is the state of the newest checkpoint (``checkpoint_committed``). Every Zarr write
(the background writer's, or ``store()`` in "disk" mode) and every ``flush()`` go:

1. protect what the dirty rows overwrite, in one commit: the chunks holding rows of the anchor
   that are overwritten for the first time since it are first copied whole to the undo area
   (:mod:`digideep.memory.durable.undo`), and the committed state shrinks to its untouched rows (same
   ``pos`` and ``total``, smaller ``size``) if the ring wrapped onto them;
2. write the rows, in whole chunks (the write-behind thread) or slices (disk mode);
3. ``flush()`` commits the new state, after the outstanding writes.

Guarantees, for a process killed at any instant (``tests/memory/test_persistence.py`` crashes at
every write while the ring wraps three times between two checkpoints; ``test_crash.py`` SIGKILLs a
real process halfway through a commit, a chunk (the write-behind thread's too), or between a flush
and the checkpoint; ``tests/memory/test_s3.py`` restores on S3):

- **the newest checkpoint comes back exactly**: ``restore`` with its state restores the
  undo area, so every array (placeholders included) holds the bytes it held at the checkpoint,
  however often the ring wrapped since and however many flushes followed;
- ``load()`` alone gives the last commit: every row it calls valid holds exactly the bytes it held
  when that state was reached (after a crash mid-flush, the previous commit minus the rows the
  flush was overwriting);
- an **older** checkpoint (kept by retention, chosen by hand) loses its oldest rows that stores
  after it overwrote: ``size`` shrinks, the remaining rows are exact;
- keys first stored after the restored state are not loaded.

Damage at rest: every chunk carries a crc32c (zarr's codec, after any compression), checked
whenever zarr reads it. A resume reads every chunk back (the RAM ring's fill; a Zarr-only memory
reads them all once), so a chunk whose bytes changed on disk (a flipped bit, a file overwritten)
fails ``restore``/``load`` with a :class:`DamagedMemoryError` naming
the key and the chunk files; the commit record carries a crc32c of its own. A chunk never written reads as the placeholder and is not damage, so
a chunk file that was deleted is not caught. Arrays written before the checksum keep their codecs.

The state restored becomes the anchor. Nothing is fsynced: a power loss may lose what the OS had
not written back. Costs, chunk shapes and measurements: ``docs/memory.md``.
"""

from digideep.memory.debug import check_nan, chunk_stats, inspect_shapes
from digideep.memory.layout import DamagedMemoryError, KeySpec
from digideep.memory.memory import Memory
from digideep.memory.mirror import DeviceMirror
from digideep.memory.ring import RingState
from digideep.memory.rollout import RolloutMemory
from digideep.memory.sampler import DeviceUniformTransitions, LastChunk, Sampler, UniformTransitions, Unit
from digideep.memory.storage import Storage
from digideep.memory.units import (
    device_uniform_transitions,
    drop_final_prestep,
    flatten_first_two,
    get_last_chunk,
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
    "RingState",
    "RolloutMemory",
    "Sampler",
    "Storage",
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
