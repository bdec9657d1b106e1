"""The memory on a real S3 server (moto on 127.0.0.1), the write-behind error path, the split classes."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import numpy as np
import pytest
import torch

from digideep.memory import DamagedMemoryError, LastChunk, Memory, RolloutMemory, UniformTransitions
from digideep.storage.held_lease import LeaseLostError
from digideep.storage.location import Location

from .chunks import make_chunk

W = 2
ROOT = Path(__file__).resolve().parents[2]


def stream(memory: Memory, steps: list[int], start: int = 0) -> int:
    for n in steps:
        memory.store(make_chunk(W, n, start))
        start += n
    return start


def whole_ring(memory: Memory) -> dict[str, np.ndarray]:
    return {key: np.array(memory[key][:]) for key in memory}


def same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(a[k].tobytes() == b[k].tobytes() for k in a)


def objects(bucket: str, prefix: str) -> list[str]:
    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


def test_memory_on_s3_stores_flushes_and_reloads_exactly(s3_bucket: str) -> None:
    url = f"s3://{s3_bucket}/sessions/s1/memory/train.zarr"
    memory = Memory(url, W, 40, zarr_chunk_rows=8)
    assert memory.name == "train" and memory.path == url
    stream(memory, [5, 5, 5])
    memory.flush()
    assert "sessions/s1/memory/train.zarr/zarr.json" in objects(s3_bucket, "sessions/s1/")
    reloaded = Memory(url, W, 40)
    reloaded.load()
    assert reloaded.state_dict() == memory.state_dict()
    assert same(whole_ring(reloaded), whole_ring(memory))
    with pytest.raises(ValueError, match="call load"):  # a new memory never overwrites the bucket's
        fresh = Memory(url, W, 40)
        fresh.store(make_chunk(W, 3, 0))
        fresh.flush()


def test_resume_on_s3_after_wrapping_past_the_checkpoint_in_a_fresh_process(
    s3_bucket: str, s3_env: dict[str, str], tmp_path: Path
) -> None:
    """Checkpoint, wrap the ring twice with flushes, then restore in a new process."""
    url = f"s3://{s3_bucket}/m.zarr"
    memory = Memory(url, W, 12, zarr_chunk_rows=5)
    start = stream(memory, [4, 4, 4])
    memory.flush()
    checkpoint, expected = memory.state_dict(), whole_ring(memory)
    memory.checkpoint_committed(checkpoint)
    stream(memory, [11, 7, 11], start)  # 29 rows after the checkpoint: wraps twice
    memory.flush()
    script = (
        "import json, sys, numpy as np\n"
        "from digideep.memory import Memory\n"
        "m = Memory(sys.argv[1], 2, 12)\n"
        "m.restore(json.loads(sys.argv[2]))\n"
        "np.savez(sys.argv[3], state=json.dumps(m.state_dict()), **{k[1:].replace('/', '|'): m[k] for k in m})\n"
    )
    out = tmp_path / "restored.npz"
    env = {**os.environ, **s3_env, "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, "-c", script, url, json.dumps(checkpoint), str(out)],
        env=env,
        check=True,
        timeout=120,
    )
    restored = np.load(out)
    assert json.loads(str(restored["state"])) == checkpoint
    assert same({"/" + k.replace("|", "/"): restored[k] for k in restored.files if k != "state"}, expected)
    assert any("m.zarr/rewards/c/0/0/" in key for key in objects(s3_bucket, "m.zarr/"))  # rows 0..4 stay


def bucket_bytes(bucket: str, prefix: str) -> dict[str, bytes]:
    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    return {key: client.get_object(Bucket=bucket, Key=key)["Body"].read() for key in objects(bucket, prefix)}


def test_a_deleted_chunk_object_on_s3_is_caught_before_the_restore_changes_any_object(s3_bucket: str) -> None:
    """A chunk object deleted from the bucket is damage (zarr alone reads it as never written); the
    check lists the objects and refuses before the commit record is rolled back."""
    url = f"s3://{s3_bucket}/d.zarr"
    memory = Memory(url, W, 40, zarr_chunk_rows=5)
    start = stream(memory, [4, 4])
    memory.flush()
    checkpoint = memory.state_dict()
    memory.checkpoint_committed(checkpoint)
    stream(memory, [4], start)  # rows 8..11, committed past the checkpoint
    memory.flush()
    memory.close()
    boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"]).delete_object(
        Bucket=s3_bucket, Key="d.zarr/rewards/c/0/0/0"
    )
    before = bucket_bytes(s3_bucket, "d.zarr/")
    with pytest.raises(DamagedMemoryError, match=r"key '/rewards' are missing \(rewards/c/0/0/0\)"):
        Memory(url, W, 40).restore(checkpoint)
    assert bucket_bytes(s3_bucket, "d.zarr/") == before


def test_a_failed_background_write_is_raised_on_the_next_flush_and_every_call_after(s3_bucket: str) -> None:
    url = f"s3://{s3_bucket}/gone/m.zarr"
    memory = Memory(url, W, 12)
    stream(memory, [4])
    memory.flush()
    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    for key in objects(s3_bucket, ""):
        client.delete_object(Bucket=s3_bucket, Key=key)
    client.delete_bucket(Bucket=s3_bucket)  # the storage goes away under a running memory
    stream(memory, [4], start=4)
    with pytest.raises(Exception) as first:
        memory.flush()
    assert "background writer of memory 'm' at " + url in "\n".join(getattr(first.value, "__notes__", []))
    with pytest.raises(RuntimeError, match="earlier background write failed"):
        memory.store(make_chunk(W, 4, 8))
    with pytest.raises(RuntimeError, match="resume the run from its last checkpoint"):
        memory.flush()


def test_a_memory_whose_write_guard_refuses_writes_nothing_more_to_the_bucket(s3_bucket: str) -> None:
    """A host that lost its session's lease: the guard raises, no chunk lands beside the new holder's."""
    memory = Memory(f"s3://{s3_bucket}/held/m.zarr", W, 12)
    stream(memory, [4])
    memory.flush()
    before = {
        key: boto3.client("s3").head_object(Bucket=s3_bucket, Key=key)["ETag"]
        for key in objects(s3_bucket, "")
    }
    lost = LeaseLostError("the lease was taken over by host b")

    def guard() -> None:
        raise lost

    memory.guard_writes(guard)
    stream(memory, [6], start=4)
    with pytest.raises(LeaseLostError):
        memory.flush()
    after = {
        key: boto3.client("s3").head_object(Bucket=s3_bucket, Key=key)["ETag"]
        for key in objects(s3_bucket, "")
    }
    assert after == before


def test_a_failed_background_write_on_a_local_disk_is_raised_too(tmp_path: Path) -> None:
    memory = Memory(tmp_path / "m.zarr", W, 12, zarr_chunk_rows=4)
    stream(memory, [4])
    memory.flush()
    (tmp_path / "m.zarr" / "observations").rename(tmp_path / "moved")
    (tmp_path / "m.zarr" / "observations").write_text("a file where the array's folder was")
    stream(memory, [6], start=4)
    with pytest.raises(OSError):
        memory.flush()
    with pytest.raises(RuntimeError, match="earlier background write failed"):
        memory.flush()


def test_location_tells_paths_from_urls(tmp_path: Path) -> None:
    assert (
        Location(tmp_path / "a.zarr").is_local
        and Location(f"file://{tmp_path}/a.zarr").local == tmp_path / "a.zarr"
    )
    remote = Location("s3://bucket/x/train.zarr/")
    assert not remote.is_local and str(remote) == "s3://bucket/x/train.zarr" and remote.stem == "train"


def round_trip(state: dict) -> dict:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_the_memorys_state_dict_round_trips_and_restores_it(tmp_path: Path) -> None:
    memory = Memory(tmp_path / "m.zarr", W, 10)
    stream(memory, [4, 4, 4])
    assert memory.state_dict() == {**memory.state.as_dict(), "num_workers": W, "capacity": 10}
    memory.flush()
    resumed = Memory(tmp_path / "m.zarr", W, 10)
    resumed.restore(round_trip(memory.state_dict()))
    assert same(whole_ring(resumed), whole_ring(memory))
    ram_only = Memory(None, W, 10)
    stream(ram_only, [4, 4])
    older = ram_only.state_dict()
    stream(ram_only, [4], start=8)
    ram_only.restore(older)  # rolls back in RAM: the rows the later store left untouched
    assert (ram_only.total, ram_only.size) == (8, 5)
    with pytest.raises(FileNotFoundError, match="no durable copy"):
        ram_only.load()


def test_typed_samplers_draw_what_the_unit_compositions_draw_and_resume(tmp_path: Path) -> None:
    memory = Memory(None, 3, 16)
    for start in range(0, 25, 5):
        memory.store(make_chunk(3, 5, start))
    sampler = UniformTransitions(batch_size=8, num_batches=4, keys=["/observations", "/rewards"], seed=3)
    first = sampler(memory)
    assert first["/observations"].shape == (4, 8, 3) and set(first) == {
        "/observations",
        "/rewards",
        "/indices",
    }
    resumed = UniformTransitions(batch_size=8, num_batches=4, keys=["/observations", "/rewards"], seed=0)
    state = round_trip(sampler.state_dict())
    resumed.load_state_dict(state)
    assert np.array_equal(sampler(memory)["/indices"], resumed(memory)["/indices"])
    with pytest.raises(ValueError, match="batch_size >= 1"):
        UniformTransitions(batch_size=0)
    rollout = RolloutMemory(num_workers=2)
    chunk = make_chunk(2, 6, 0)
    rollout.store(chunk)
    assert LastChunk()(rollout)["/observations"] is chunk["/observations"]
    rollout.restore(round_trip(rollout.state_dict()))
    assert rollout.state_dict() == {"stored": 1}
