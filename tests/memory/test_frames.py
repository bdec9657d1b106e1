"""Frame stacks held one frame per row (digideep.memory.frames) and the RolloutMemory that uses it:
what comes back is bit-identical to what was stored, whatever the data."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from digideep.memory import Memory, RolloutMemory, frames

STACK, SIZE = 4, (6, 5)


def stacked_episodes(num_workers: int, rows: int, ends: dict[int, list[int]], seed: int = 0) -> dict:
    """A chunk of frame stacks as FrameStackObservation makes them: an episode starts with its first
    frame repeated, each step shifts in one new frame; ``ends[w]`` lists the rows where worker ``w``'s
    episode ended (its next observation is a final stack, the next row a reset)."""
    rng = np.random.default_rng(seed)
    obs = np.empty((num_workers, rows, STACK, *SIZE), np.uint8)
    nxt = np.empty_like(obs)
    for w in range(num_workers):
        stack = np.repeat(rng.integers(0, 256, (1, *SIZE), np.uint8), STACK, axis=0)
        for t in range(rows):
            obs[w, t] = stack
            stack = np.concatenate([stack[1:], rng.integers(0, 256, (1, *SIZE), np.uint8)])
            nxt[w, t] = stack
            if t in ends.get(w, []):
                stack = np.repeat(rng.integers(0, 256, (1, *SIZE), np.uint8), STACK, axis=0)
    nxt[:, -1] = 0  # the final prestep's placeholder
    return {
        "/observations": obs,
        "/next_observations": nxt,
        "/rewards": rng.standard_normal((num_workers, rows, 1)).astype(np.float32),
    }


def assert_same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_stacks_come_back_bit_identical_holding_each_frame_once() -> None:
    chunk = stacked_episodes(3, 40, ends={0: [5, 6, 30], 2: [38]})
    memory = RolloutMemory(3)
    memory.store(chunk)
    assert_same(memory.last_chunk(), chunk)
    held = memory._chunks[-1]
    assert isinstance(held["/observations"], frames.StackedFrames)
    # whole stacks: each worker's first row and the row after each episode end
    assert held["/observations"].starts.sum() == 3 + 4
    # next observations kept: each episode's final stack and each worker's final prestep
    assert held["/next_observations"].kept.sum() == 4 + 3
    plain = chunk["/observations"].nbytes * 2
    assert memory.nbytes - chunk["/rewards"].nbytes < plain / 5


def test_minibatch_rows_are_rebuilt_exactly() -> None:
    chunk = stacked_episodes(2, 30, ends={1: [0, 1, 2, 10]})
    memory = RolloutMemory(2)
    memory.store(chunk)
    rng = np.random.default_rng(1)
    workers, rows = rng.integers(0, 2, 200), rng.integers(0, 30, 200)
    for key, values in chunk.items():
        np.testing.assert_array_equal(memory.gather(key, workers, rows), values[workers, rows], err_msg=key)
        np.testing.assert_array_equal(memory[key], values, err_msg=key)


def test_data_that_is_not_a_frame_stack_is_kept_whole_and_exact() -> None:
    rng = np.random.default_rng(2)
    noise = rng.integers(0, 256, (2, 20, STACK, *SIZE), np.uint8)
    chunk = {"/observations": noise, "/next_observations": 255 - noise}
    memory = RolloutMemory(2)
    memory.store(chunk)
    assert all(isinstance(v, np.ndarray) for v in memory._chunks[-1].values()), "no saving: stays plain"
    assert_same(memory.last_chunk(), chunk)


def test_stacks_broken_anywhere_still_decode_exactly() -> None:
    """Shifted rows are found on the bytes, not trusted from flags: any edit decodes back as stored."""
    chunk = stacked_episodes(2, 25, ends={})
    chunk["/observations"][0, 7, 1] ^= 1  # one frame of one stack differs from its neighbours
    chunk["/observations"][1, 12:, 0] = 9  # the oldest frame frozen from row 12 on
    chunk["/next_observations"][1, 3, 2, 0, 0] += 1
    memory = RolloutMemory(2)
    memory.store(chunk)
    assert isinstance(memory._chunks[-1]["/observations"], frames.StackedFrames)
    assert_same(memory.last_chunk(), chunk)


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [((2, 9, 4, 6, 5), np.float32), ((2, 9, 6, 5, 4), np.uint8), ((2, 9, 1, 6, 5), np.uint8)],
)
def test_only_uint8_stacks_on_the_leading_axis_are_encoded(shape: tuple, dtype: type) -> None:
    values = np.zeros(shape, dtype)
    memory = RolloutMemory(2)
    memory.store({"/observations": values, "/next_observations": values.copy()})
    stored = memory._chunks[-1]
    if dtype is np.uint8 and shape[2] == 6:  # (6, 5, 4) reads as a stack of six 5x4 frames: fine
        assert isinstance(stored["/observations"], frames.StackedFrames)
    else:
        assert isinstance(stored["/observations"], np.ndarray)
    assert_same(memory.last_chunk(), {"/observations": values, "/next_observations": values})


def test_frames_false_keeps_the_arrays_as_stored() -> None:
    chunk = stacked_episodes(1, 10, ends={})
    memory = RolloutMemory(1, frames=False)
    memory.store(chunk)
    assert memory.last_chunk()["/observations"] is chunk["/observations"]


def test_replay_memory_compresses_image_keys_on_disk_and_reloads_them_exactly(tmp_path) -> None:
    """The replay Memory's ring is fixed rows per key, so it keeps stacks whole in RAM; on disk,
    ``compression="images"`` zstd-compresses the uint8 image keys only."""
    chunk = stacked_episodes(2, 40, ends={0: [10]})
    sizes = {}
    for compression in (None, "images"):
        path = tmp_path / f"{compression}.zarr"
        with Memory(path, num_workers=2, capacity=64, compression=compression) as memory:
            memory.store(chunk)
            memory.flush()
        sizes[compression] = sum(  # the log's rows (not the final prestep rows, one chunk each)
            f.stat().st_size for f in (path / "observations").rglob("*") if f.is_file()
        )
        loaded = Memory(path, num_workers=2, capacity=64, compression=compression)
        loaded.load()
        assert_same(loaded.last_chunk(), chunk)
        group = zarr.open_group(path, mode="r")
        codecs = {key: group[key].compressors for key in ("observations", "rewards")}
        loaded.close()
    assert [type(c) for c in codecs["rewards"]] == [zarr.codecs.Crc32cCodec], codecs  # a checksum only
    assert isinstance(codecs["observations"][0], zarr.codecs.ZstdCodec), codecs
    assert sizes["images"] < sizes[None] / 2, sizes
