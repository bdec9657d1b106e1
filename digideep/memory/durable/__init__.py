"""The durable storages of a replay memory and their crash protocol.

Words: a **trajectory chunk** is what the Explorer hands ``Memory.store`` (``(W, T + 1, ...)`` per
key); a **Zarr chunk** is one file or object of a Zarr array (``(workers, rows, *row_shape)``). A
**chunk-row window** is the rows one Zarr chunk holds, all workers.

Modules, from the memory down:

- :mod:`~digideep.memory.durable.write_through`: :class:`WriteThroughStorage` (``mode="ram"``
  with a path): the RAM ring for sampling, every stored trajectory chunk's rows written to Zarr
  in whole Zarr chunks by a :class:`~digideep.memory.durable.write_through.ZarrWindowWriter`
  on the background thread;
- :mod:`~digideep.memory.durable.background`: :class:`BackgroundWriter`, that thread (ordered
  jobs, a bounded queue, errors raised on the training thread);
- :mod:`~digideep.memory.durable.zarr_storage`: :class:`ZarrStorage` (``mode="disk"``) and the
  crash protocol both storages run (protect what a write overwrites, write, commit);
- :mod:`~digideep.memory.durable.zarr_group`: :class:`ZarrGroup`, one memory's Zarr group on disk
  or object storage (its arrays, the commit record, the layout formats, checksums);
- :mod:`~digideep.memory.durable.undo`: :class:`UndoArea`, the anchor's Zarr chunks that later
  writes overwrote, so the newest checkpoint comes back byte for byte.
- :mod:`~digideep.memory.durable.integrity`: what catches damage (the Zarr chunks' crc32c, the
  commit record's, the chunk files that must exist, the zarr release with atomic writes);
- :mod:`~digideep.memory.durable.readback`: a load or a restore, planned, listed and read back
  (every chunk checked) before anything is changed, so a refused resume leaves the group as it was.

The contract these storages implement is :class:`digideep.memory.storage.Storage`; the guarantees
they give after a crash are in the :mod:`digideep.memory` docstring.
"""

from digideep.memory.durable.background import BackgroundWriter
from digideep.memory.durable.undo import UndoArea
from digideep.memory.durable.write_through import WriteThroughStorage
from digideep.memory.durable.zarr_group import ZarrGroup
from digideep.memory.durable.zarr_storage import ZarrStorage

__all__ = ["BackgroundWriter", "UndoArea", "WriteThroughStorage", "ZarrGroup", "ZarrStorage"]
