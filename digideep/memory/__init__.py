"""Memories of trajectory chunks and the samplers that read them.

Contract (relied on by the Runner and the agents)
=================================================

``Memory(path, num_workers, capacity, mode="ram", zarr_chunk_rows=None, compression=None, name=None)``
    Circular memory, off-policy replay. ``capacity`` counts rows (steps) **per worker**; ``path``
    is the Zarr group folder (the Runner passes ``session.memory_path(name)``).

    - ``store(chunk)``: a chunk is the Explorer's flat dict, ``(W, T + 1, ...)`` per key (see
      ``docs/architecture.md``, "Trajectory chunk"). Writes the RAM ring, marks rows dirty.
    - ``flush()``: writes the dirty rows to Zarr, then commits the pointers (crash-safe, below).
    - ``load()``: restores the committed state and (in "ram" mode) the ring from Zarr, byte for
      byte. ``FileNotFoundError`` if nothing was flushed; ``ValueError`` with a message if the folder
      is not a memory of this ``num_workers`` and ``capacity``.
    - ``state_dict()`` / ``load_state_dict(d)``: pointers and counters only (``pos``, ``size``,
      ``total``, ``last_chunk_rows``, ``num_workers``, ``capacity``: ints). Resume: build the memory
      with the same arguments, then call ``load_state_dict(d)`` and ``load()`` in either order; the
      memory returns to ``d``, byte for byte if ``d`` is the newest checkpoint (see below).
    - ``checkpoint_committed(d=None)``: call it once a checkpoint holding ``d`` (the state after a
      ``flush()``; default the current one) is durable; the Runner does after every checkpoint.
    - Reading: ``keys()``, ``memory[key]`` (``(W, capacity, ...)`` ring: numpy in "ram" mode, the
      ``zarr.Array`` in "disk" mode), ``size`` (valid transition rows per worker), ``pos``,
      ``num_workers``, ``capacity``, ``valid_rows()``, ``physical_rows(logical)``,
      ``gather(key, workers, rows)``, ``last_chunk()``.

``RolloutMemory(num_workers, keep=1, name="rollout")``
    On-policy: holds the latest chunk(s) by reference (no copy). ``last_chunk()`` and
    ``memory[key]`` give ``(W, T + 1, ...)``. ``flush``/``load`` do nothing.

``Sampler(units, info)``; ``sampler(memory)``
    Runs ``unit(data, info) -> data`` in order (:mod:`digideep.memory.sampler`). Units:
    :func:`get_last_chunk`, :func:`uniform_transitions`, :func:`select_keys`,
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
(``digideep.environment.data_helpers.placeholder_array``: NaN for floats, ``np.iinfo(dtype).min``
for signed ints, 0 for unsigned ints, False for bools); a key missing from a chunk gets the
placeholder for that chunk's rows. dtypes are preserved. A chunk whose worker count differs, whose
keys change dtype or row shape, or that has more rows than ``capacity`` is refused with a
``ValueError``/``TypeError`` naming the key, and the memory is left unchanged.

Durability (what a crash leaves)
================================

Zarr layout: :mod:`digideep.memory.zarr_store`. The commit record (pointers, committed keys, the
anchor and the undo area's extent) is one group attribute; zarr >= 3.1.3 writes it, like every
chunk, to a temporary file renamed into place, so a killed process leaves each file old or new.
The **anchor** is the state of the newest checkpoint (``checkpoint_committed``). ``flush()``:

1. protect what the dirty rows overwrite, in one commit: rows the anchor holds that are
   overwritten for the first time since it are first copied to the undo area
   (:mod:`digideep.memory.undo`), and the committed state shrinks to its untouched rows (same
   ``pos`` and ``total``, smaller ``size``) if the ring wrapped onto them;
2. write the dirty rows, at most two contiguous slices per key (split at the wrap-around);
3. commit the new state.

"disk" mode does step 1 in every ``store()``, which writes Zarr directly.

Guarantees, for a process killed at any instant (``tests/memory/test_persistence.py`` crashes at
every write while the ring wraps three times between two checkpoints; ``test_crash.py`` SIGKILLs a
real process halfway through a commit, a chunk, or between a flush and the checkpoint):

- **the newest checkpoint comes back exactly**: ``load_state_dict`` with its state restores the
  undo area, so every array (placeholders included) holds the bytes it held at the checkpoint,
  however often the ring wrapped since and however many flushes followed;
- ``load()`` alone gives the last commit: every row it calls valid holds exactly the bytes it held
  when that state was reached (after a crash mid-flush, the previous commit minus the rows the
  flush was overwriting);
- an **older** checkpoint (kept by retention, chosen by hand) loses its oldest rows that stores
  after it overwrote: ``size`` shrinks, the remaining rows are exact;
- keys first stored after the restored state are not loaded.

The state loaded by ``load_state_dict`` becomes the anchor. Costs: the undo copy makes a flush that
overwrites the anchor's rows about 2.4 to 2.9 times as long; the area holds the rows written since
the anchor (at most one ring, about 1.6 times their raw size with the default chunks) and is
deleted in the background when the next checkpoint commits. Nothing is fsynced: a power loss may
lose what the OS had not written back.

Performance (``python bench/bench_memory.py``; HalfCheetah sizes, capacity 1,000,000)
=====================================================================================

"ram" mode samples from the numpy ring (one ``np.take`` per key); Zarr is only written by
``flush`` and read by ``load``. Measured on the 2-core development machine (noisy, medians):

===================================  ============  =========================================
store a 1,000-step chunk             0.013 ms      0.8-1.0 x a plain numpy ring
sample 256 transitions (6 keys)      0.04 ms       1.6 x a plain numpy ring using ``np.take``
flush 50,000 dirty transitions       25-65 ms      target 100 ms
same, over a checkpoint's rows        2.4-2.9 x     the flush without the undo copy (200,000)
load 1,000,000 transitions           0.2-0.8 s     target 2 s (depends on the page cache)
peak RAM (store + flush / load)      1.09 / 1.20   x the raw data size (180 MB)
"disk" mode: store a 1,000 chunk     14 ms         about 1000 x "ram" mode
"disk" mode: sample 256              55-70 ms      about 1500 x "ram" mode
===================================  ============  =========================================

Chunks are uncompressed and about 1 MiB by default: replay data barely compresses (random
observations; only the flags compress well): lz4 and zstd (level 1) saved 13 and 16 % of the disk
space and made ``flush`` 1.2 to 2 times slower. "disk" mode keeps no ring: ``store`` writes Zarr
directly (chunks about 256 KiB) and sampling reads it, indices sorted by worker and row so each
Zarr chunk is read once per key, one orthogonal read per worker: the price of memories larger than
RAM. Paths are local folders (the commit's atomic rename is the local store's).
"""

from digideep.memory.debug import check_nan, chunk_stats, inspect_shapes
from digideep.memory.layout import KeySpec
from digideep.memory.memory import Memory
from digideep.memory.ring import RingState
from digideep.memory.rollout import RolloutMemory
from digideep.memory.sampler import LastChunk, Sampler, UniformTransitions, Unit
from digideep.memory.units import (
    drop_final_prestep,
    flatten_first_two,
    get_last_chunk,
    minibatch_iterator,
    select_keys,
    uniform_transitions,
)

__all__ = [
    "KeySpec",
    "LastChunk",
    "Memory",
    "RingState",
    "RolloutMemory",
    "Sampler",
    "UniformTransitions",
    "Unit",
    "check_nan",
    "chunk_stats",
    "drop_final_prestep",
    "flatten_first_two",
    "get_last_chunk",
    "inspect_shapes",
    "minibatch_iterator",
    "select_keys",
    "uniform_transitions",
]
