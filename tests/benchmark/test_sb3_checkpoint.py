"""An SB3 cell's checkpoint: what it restores, and that a save cut short is never read."""

from __future__ import annotations

import json
import random

import gymnasium as gym
import numpy as np
import pytest
import torch

from digideep.benchmark.sb3 import silence
from digideep.benchmark.sb3_checkpoint import CellCheckpoints, cell_folder

pytest.importorskip("stable_baselines3")


def _draws(model, eval_env) -> dict:
    """One draw from every generator a cell uses, and the next training episode's first observation."""
    return {
        "python": random.random(),
        "numpy": np.random.random(),
        "torch": torch.rand(1).item(),
        "action": model.action_space.sample().tolist(),
        "eval_env": eval_env.envs[0].unwrapped.np_random.random(),
        "train_reset": model.get_env().reset().tolist(),
    }


def test_a_checkpoint_restores_the_model_its_buffer_and_every_generator(tmp_path):
    from stable_baselines3 import SAC
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    def eval_env():
        return DummyVecEnv([lambda: Monitor(gym.make("Pendulum-v1"))])

    folder = cell_folder(tmp_path / "sessions", "my bench", "sb3:SAC/Pendulum-v1/seed-0/default")
    assert folder.path == tmp_path / "sessions" / "sb3-my-bench" / "SAC_Pendulum-v1_seed-0_default"
    checkpoints = CellCheckpoints(folder)
    model = SAC(
        "MlpPolicy", gym.make("Pendulum-v1"), seed=0, learning_starts=20, buffer_size=500, batch_size=16
    )
    silence(model)
    model.learn(40)
    model.get_env().envs[0].unwrapped.np_random.random()  # its generator moves on, as at an episode's reset
    evaluation = eval_env()
    evaluation.seed(10_000)
    evaluation.reset()
    saved = checkpoints.save(model, evaluation, "run-1")
    assert (saved.frames, saved.run_id) == (40, "run-1")
    expected = _draws(model, evaluation)

    other = eval_env()
    loaded = checkpoints.load(checkpoints.latest(), SAC, gym.make("Pendulum-v1"), other)
    restored_reset = loaded._last_obs.tolist()  # the reset load made, from the saved generator
    draws = _draws(loaded, other)
    draws["train_reset"] = restored_reset
    assert draws == expected
    assert (loaded.num_timesteps, loaded._n_updates) == (model.num_timesteps, model._n_updates)
    assert loaded.replay_buffer.pos == model.replay_buffer.pos == 40
    np.testing.assert_array_equal(loaded.replay_buffer.observations, model.replay_buffer.observations)
    for a, b in zip(loaded.policy.state_dict().values(), model.policy.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert (
        loaded.actor.optimizer.state_dict()["state"].keys()
        == model.actor.optimizer.state_dict()["state"].keys()
    )


def test_only_the_newest_whole_checkpoint_is_kept_and_read(tmp_path):
    from stable_baselines3 import TD3
    from stable_baselines3.common.vec_env import DummyVecEnv

    checkpoints = CellCheckpoints(tmp_path / "cell")
    model = TD3("MlpPolicy", gym.make("Pendulum-v1"), seed=0, learning_starts=10, buffer_size=100)
    evaluation = DummyVecEnv([lambda: gym.make("Pendulum-v1")])
    evaluation.reset()
    silence(model)
    model.learn(10)
    checkpoints.save(model, evaluation, "run-1")
    model.learn(10, reset_num_timesteps=False)
    checkpoints.save(model, evaluation, "run-1")
    assert [p.name for p in (tmp_path / "cell").iterdir()] == ["checkpoint-20"]

    # a save cut short: files without their record, or a record whose sizes the files do not match
    (tmp_path / "cell" / "checkpoint-30").mkdir()
    (tmp_path / "cell" / "checkpoint-30" / "model.zip").write_bytes(b"half")
    cut = tmp_path / "cell" / "checkpoint-40"
    cut.mkdir()
    (cut / "model.zip").write_bytes(b"half")
    (cut / "cell.json").write_text(
        json.dumps({"run_id": "run-1", "frames": 40, "files": {"model.zip": 1000}})
    )
    assert checkpoints.latest().frames == 20
    checkpoints.clear()
    assert checkpoints.latest() is None and not (tmp_path / "cell").exists()


def test_a_checkpoint_on_an_object_store_is_put_record_last_and_read_back(s3_bucket, tmp_path):
    from stable_baselines3 import SAC
    from stable_baselines3.common.vec_env import DummyVecEnv

    checkpoints = CellCheckpoints(
        cell_folder(f"s3://{s3_bucket}/sessions", "b", "sb3:SAC/Pendulum-v1/seed-0/default")
    )
    model = SAC(
        "MlpPolicy", gym.make("Pendulum-v1"), seed=0, learning_starts=10, buffer_size=100, batch_size=16
    )
    evaluation = DummyVecEnv([lambda: gym.make("Pendulum-v1")])
    evaluation.reset()
    silence(model)
    model.learn(20)
    checkpoints.save(model, evaluation, "run-1")
    model.learn(10, reset_num_timesteps=False)
    saved = checkpoints.save(model, evaluation, "run-1")
    assert [c.name for c in checkpoints.folder.children()] == ["checkpoint-30"]
    assert checkpoints.folder.files() == {
        f"checkpoint-30/{n}" for n in ("model.zip", "replay_buffer.pkl", "rng.pt", "cell.json")
    }
    assert checkpoints.latest() == saved
    loaded = checkpoints.load(
        saved, SAC, gym.make("Pendulum-v1"), DummyVecEnv([lambda: gym.make("Pendulum-v1")])
    )
    assert (loaded.num_timesteps, loaded.replay_buffer.pos) == (30, 30)
    (saved.location / "cell.json").delete()  # as if the upload stopped before its record
    assert checkpoints.latest() is None
    checkpoints.clear()
    assert checkpoints.folder.files() == set()
