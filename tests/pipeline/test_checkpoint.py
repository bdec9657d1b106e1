"""Two-file checkpoints: atomic writes, discovery, retention and clear errors for damaged files."""

import json
import zipfile

import numpy as np
import pytest
import torch

from digideep.errors import UsageError
from digideep.pipeline import checkpoint as ckpt


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
    (tmp_path / ".tmp-checkpoint-3-999").mkdir()
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


def test_incompatible_version_is_named(tmp_path):
    saved = ckpt.save_checkpoint(tmp_path, 1, info(), states())
    data = json.loads(saved.runner_file.read_text())
    data["format_version"] = 99
    saved.runner_file.write_text(json.dumps(data))
    with pytest.raises(UsageError, match=r"has format version 99 .* reads versions 1 and 2"):
        ckpt.load_checkpoint(saved.path)
