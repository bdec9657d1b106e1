"""The storage contract (digideep.memory.storage.Storage): which storage a memory's arguments pick,
what ``durable`` promises, and that ``mode="ram"`` with a path writes Zarr all the same."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from digideep.memory import Memory, Storage
from digideep.memory.durable import WriteThroughStorage, ZarrStorage
from digideep.memory.storage import RamStorage

from .chunks import make_chunk, stamps

W = 2


@pytest.mark.parametrize(
    ("with_path", "mode", "kind", "durable"),
    [
        (False, "ram", RamStorage, False),
        (True, "ram", WriteThroughStorage, True),
        (True, "disk", ZarrStorage, True),
    ],
)
def test_the_arguments_pick_the_storage_and_durable_says_whether_rows_come_back(
    tmp_path: Path, with_path: bool, mode: str, kind: type, durable: bool
) -> None:
    path = tmp_path / "m.zarr" if with_path else None
    with Memory(path, W, 10, mode=mode) as memory:
        assert isinstance(memory.storage, Storage) and type(memory.storage) is kind
        assert memory.storage.durable is durable
        memory.store(make_chunk(W, 4, 0))
        memory.flush()
        rows = memory["/observations"][:, :5]
    if not durable:
        with pytest.raises(FileNotFoundError, match="no durable copy"):
            Memory(path, W, 10, mode=mode).load()
        return
    with Memory(path, W, 10, mode="disk") as reread:  # Zarr itself, whichever mode wrote it
        reread.load()
        assert np.array_equal(stamps(reread["/observations"][:, :5]), stamps(np.asarray(rows)))
        assert (reread.pos, reread.size) == (4, 4)


def test_a_storage_that_leaves_out_part_of_the_contract_cannot_be_built() -> None:
    class Partial(Storage):
        @property
        def durable(self) -> bool:
            return False

    with pytest.raises(TypeError, match="abstract"):
        Partial(1, 2, "partial")  # type: ignore[abstract]


def test_only_the_write_through_storage_runs_the_guard_before_its_background_writes(tmp_path: Path) -> None:
    calls: list[str] = []
    for path, mode in ((None, "ram"), (tmp_path / "d.zarr", "disk"), (tmp_path / "r.zarr", "ram")):
        with Memory(path, W, 10, mode=mode) as memory:
            memory.guard_writes(lambda mode=mode, path=path: calls.append(f"{mode}:{path is not None}"))
            memory.store(make_chunk(W, 4, 0))
            memory.flush()
    assert calls and set(calls) == {"ram:True"}
