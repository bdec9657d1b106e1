"""Two-file checkpoints: atomic writes, discovery, retention and clear errors for damaged files."""

import json
import threading
import zipfile
from collections import deque
from contextlib import contextmanager

import numpy as np
import pytest
import torch

from digideep import __version__
from digideep.errors import UsageError
from digideep.storage import checkpoint as ckpt
from digideep.storage import codec
from tests.agents.runner_setup import close, iterate, make_runner, small_params
from tests.helpers import assert_same_tensors


def states():
    return {
        "agents": {"agent": {"w": torch.arange(4.0), "opt": {"step": 3}}},
        "memories": {"train": {"pos": np.int64(7), "ring": np.arange(6, dtype=np.uint8).reshape(2, 3)}},
        "rng": {"numpy": np.random.get_state(), "torch": torch.get_rng_state()},
    }


def info(iteration=1):
    return {"params": {"runner": {"seed": 0}}, "counters": {"iteration": iteration}, "classes": {}}


def test_round_trip_loads_with_weights_only(tmp_path):
    saved = ckpt.save_checkpoint(tmp_path, 5, info(5), states())
    assert saved.path == tmp_path / "checkpoint-5"
    # the states file holds no pickled code: the restricted loader accepts it
    raw = torch.load(saved.states_file, weights_only=True)
    assert isinstance(raw, dict)
    loaded_info, loaded = ckpt.load_checkpoint(saved.path)
    assert loaded_info["iteration"] == 5 and loaded_info["format_version"] == ckpt.FORMAT_VERSION
    assert torch.equal(loaded["agents"]["agent"]["w"], torch.arange(4.0))
    ring = loaded["memories"]["train"]["ring"]
    assert ring.dtype == np.uint8 and ring.shape == (2, 3) and ring[1, 2] == 5
    np.random.set_state(loaded["rng"]["numpy"])  # RNG states come back usable


def test_no_temporary_folder_is_left_and_leftovers_are_cleaned(tmp_path):
    (tmp_path / "checkpoint-3").mkdir()  # a save cut short: files, no commit record
    (tmp_path / "checkpoint-3" / "runner.json").write_text("{}")
    ckpt.save_checkpoint(tmp_path, 4, info(4), states())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-4"]


def test_a_failing_save_leaves_nothing(tmp_path):
    with pytest.raises(TypeError, match=r"cannot save a value of type builtins\.function"):
        ckpt.save_checkpoint(tmp_path, 2, info(2), {"bad": lambda: None})
    assert list(tmp_path.iterdir()) == []


def test_latest_ignores_incomplete_folders(tmp_path):
    for iteration in (1, 2, 10):
        ckpt.save_checkpoint(tmp_path, iteration, info(iteration), states())
    (tmp_path / "checkpoint-11").mkdir()  # no files: not complete
    assert ckpt.latest_checkpoint(tmp_path).iteration == 10
    assert [c.iteration for c in ckpt.find_checkpoints(tmp_path)] == [1, 2, 10]


def test_retention_keeps_the_last_k_and_the_best(tmp_path):
    for iteration in range(1, 7):
        ckpt.save_checkpoint(tmp_path, iteration, info(iteration), states())
    ckpt.apply_retention(tmp_path, keep=2, best=2)
    assert [c.iteration for c in ckpt.find_checkpoints(tmp_path)] == [2, 5, 6]


def test_missing_checkpoint_folder(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        ckpt.load_checkpoint(tmp_path / "checkpoint-9")


@pytest.mark.parametrize("victim", ["runner.json", "states.pt"])
def test_missing_file_is_named(tmp_path, victim):
    saved = ckpt.save_checkpoint(tmp_path, 1, info(), states())
    (saved.path / victim).unlink()
    with pytest.raises(UsageError, match=rf"'{saved.path / victim}' is missing"):
        ckpt.load_checkpoint(saved.path)


def test_truncated_states_file_is_named(tmp_path):
    saved = ckpt.save_checkpoint(tmp_path, 1, info(), states())
    data = saved.states_file.read_bytes()
    saved.states_file.write_bytes(data[: len(data) // 2])
    with pytest.raises(UsageError, match=rf"'{saved.states_file}' is damaged or truncated"):
        ckpt.load_checkpoint(saved.path)


def test_pickled_code_in_states_is_refused(tmp_path):
    saved = ckpt.save_checkpoint(tmp_path, 1, info(), states())
    torch.save({"evil": zipfile.ZipFile}, saved.states_file)  # a class reference: code, not data
    with pytest.raises(UsageError, match="damaged or truncated"):
        ckpt.load_checkpoint(saved.path)


def test_damaged_runner_json_is_named(tmp_path):
    saved = ckpt.save_checkpoint(tmp_path, 1, info(), states())
    saved.runner_file.write_text('{"format_version": 1, "params": ')
    with pytest.raises(UsageError, match=rf"'{saved.runner_file}' is damaged \(not valid JSON"):
        ckpt.load_checkpoint(saved.path)


@pytest.mark.parametrize("version", [1, 99])  # 1: a layout of an earlier digideep, 99: a newer one
def test_incompatible_version_is_refused_in_one_line(tmp_path, version):
    saved = ckpt.save_checkpoint(tmp_path, 1, info(), states())
    data = json.loads(saved.runner_file.read_text())
    data["format_version"] = version
    saved.runner_file.write_text(json.dumps(data))
    with pytest.raises(UsageError) as refused:
        ckpt.load_checkpoint(saved.path)
    assert str(refused.value) == (
        f"checkpoint file '{saved.runner_file}' has format version {version} (digideep {__version__}); "
        f"this digideep {__version__} reads version 2 only: resume it with the version that wrote it, "
        "or start a new session"
    )


def test_the_codec_keeps_tensors_tensors_and_arrays_arrays(tmp_path):
    live = {
        "tensor": torch.arange(3.0),
        "array": np.arange(6, dtype=np.int16).reshape(2, 3),
        "scalar": np.float32(1.5),
        "tuple": (1, np.zeros(2)),
        "deque": deque([np.ones(2)], maxlen=3),
        "rng": np.random.default_rng(5),
    }
    encoded = codec.encode(live)
    assert_same_tensors(codec.encode(encoded), encoded)  # idempotent: encoding twice changes nothing
    torch.save(codec.encode(encoded), tmp_path / "s.pt")
    back = codec.decode(torch.load(tmp_path / "s.pt", weights_only=True))
    assert isinstance(back["tensor"], torch.Tensor) and torch.equal(back["tensor"], live["tensor"])
    assert isinstance(back["array"], np.ndarray) and back["array"].dtype == np.int16
    np.testing.assert_array_equal(back["array"], live["array"])
    assert type(back["scalar"]) is np.float32 and back["scalar"] == 1.5
    assert isinstance(back["tuple"], tuple) and isinstance(back["tuple"][1], np.ndarray)
    assert back["deque"].maxlen == 3
    assert back["rng"].random() == np.random.default_rng(5).random()
    assert codec.decode(back)["array"] is back["array"]  # decoding live values changes nothing


@contextmanager
def storages_tagged(location: str):
    """torch.save records ``location`` for every CPU storage, as it records ``cuda:0`` on a GPU.

    torch offers no way to unregister a package, so the entry is removed from its (private) registry.
    """
    torch.serialization.register_package(-1000, lambda storage: location, lambda obj, where: None)
    entry = next(e for e in torch.serialization._package_registry if e[0] == -1000)
    try:
        yield
    finally:
        torch.serialization._package_registry.remove(entry)


def test_a_checkpoint_written_on_a_gpu_loads_every_state_on_the_cpu(tmp_path):
    with storages_tagged("cuda:0"):
        saved = ckpt.save_checkpoint(tmp_path, 1, info(), states())
    if not torch.cuda.is_available():  # what map_location=None (or a session's cuda device) meets here
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(saved.states_file, weights_only=True)
    _, loaded = ckpt.load_checkpoint(saved.path)
    assert loaded["agents"]["agent"]["w"].device.type == "cpu"
    assert loaded["rng"]["torch"].device.type == "cpu"
    assert isinstance(loaded["memories"]["train"]["ring"], np.ndarray)
    np.random.set_state(loaded["rng"]["numpy"])


def test_closing_a_runner_ends_its_memories_writers_before_the_session_is_released(tmp_path):
    """A second Runner on the same session may follow at once (a resume in the same process): no
    background Zarr write of the first may land in its folder. (CI once saw the undo area's
    ``create_array(overwrite=True)`` fail because a closed Runner's writer was still linking into it.)"""
    sac = {"batch_size": 16, "updates_per_iteration": 4, "learning_starts": 20, "hidden_sizes": [16]}
    params = small_params("digideep.agents.sac.SAC", sac, "Pendulum-v1", 1, 20, warm_start=1, capacity=200)
    before = set(threading.enumerate())
    runner = make_runner(tmp_path, params)
    iterate(runner, 3)
    writers = [t for t in set(threading.enumerate()) - before if t.name.startswith("write-behind")]
    assert writers, "the replay memory writes behind on a thread of its own"
    close(runner)
    assert not any(t.is_alive() for t in writers)
