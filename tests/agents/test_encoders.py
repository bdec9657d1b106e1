"""Encoders picked from the observation space, end to end: PPO's Nature CNN on Atari, and SAC and PPO
on a Dict-observation MuJoCo env (MultiInput), each a few iterations on a real Runner, then a
checkpoint whose resumed run makes the same next update bit for bit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces

from digideep.agents.encoders import EncodedObservations, ObservationEncoder
from digideep.agents.ppo import PPO
from digideep.agents.sac import SAC
from digideep.errors import UsageError
from digideep.pipeline.devices import DeviceChoice
from digideep.pipeline.resuming import from_checkpoint
from digideep.pipeline.runner import Runner
from digideep.storage.session import Session
from tests.agents.runner_setup import close, iterate, make_runner, shipped_params, small_params

DICT_ENV = {
    "model_name": "InvertedPendulum-v5",
    "wrappers": [{"name": "digideep.environment.wrappers.StructuredObservation"}],
}
SMALL_PPO = {"batch_size": 16, "n_epochs": 2, "hidden_sizes": [16]}
SMALL_SAC = {"batch_size": 32, "updates_per_iteration": 8, "learning_starts": 32, "hidden_sizes": [32, 32]}


def atari_params() -> dict[str, Any]:
    pytest.importorskip("ale_py", reason="needs pip install 'digideep[atari]'")
    params = shipped_params(
        "atari_ppo",
        model_name="ALE/Breakout-v5",
        num_workers=2,
        n_steps=16,
        vectorization="sync",
        batch_size=16,
        n_epochs=1,
        number_epochs=1,
        epoch_size=8,
    )
    params["explorer"] = {"train": params["explorer"]["train"]}
    return params


def dict_params(agent: str) -> dict[str, Any]:
    if agent == "ppo":
        params = small_params("digideep.agents.ppo.PPO", SMALL_PPO, "InvertedPendulum-v5", 2, 16)
    else:
        params = small_params("digideep.agents.sac.SAC", SMALL_SAC, "InvertedPendulum-v5", 2, 16, 8, 500)
    params["env"] = dict(DICT_ENV)
    return params


def tensors(state: Any) -> dict[str, torch.Tensor]:
    """The tensors of a nested state dict, keyed by path."""
    if isinstance(state, torch.Tensor):
        return {"": state}
    if isinstance(state, dict):
        return {f"{k}/{p}": t for k, v in state.items() for p, t in tensors(v).items()}
    if isinstance(state, list | tuple):
        return {f"{i}/{p}": t for i, v in enumerate(state) for p, t in tensors(v).items()}
    return {}


def assert_resume_is_exact(tmp_path: Path, params: dict[str, Any], before: int) -> Runner:
    """``before`` iterations, a checkpoint, one more iteration; a Runner rebuilt from the checkpoint
    must make that iteration with the same metrics and end with the same agent state. The Runner
    reopens the same session, as a resumed run does (a replay memory is in its folder)."""
    torch.manual_seed(0)
    runner = make_runner(tmp_path / "straight", params)
    try:
        iterate(runner, before)
        checkpoint = runner.checkpoint()
        expected_metrics = iterate(runner, 1)[0]
        expected_state = tensors(runner.agents["agent"].state_dict())
    finally:
        close(runner)
    assert expected_metrics, "the iteration after the checkpoint made gradient steps"
    session = Session(root=tmp_path / "straight", name="run", resume=True)
    resumed = from_checkpoint(session, Path(checkpoint), devices=DeviceChoice("cpu"), modes=("train",))
    try:
        assert iterate(resumed, 1)[0] == expected_metrics
        state = tensors(resumed.agents["agent"].state_dict())
        assert state.keys() == expected_state.keys()
        for key, value in expected_state.items():
            assert torch.equal(state[key], value), key
        return resumed
    finally:
        close(resumed)


def test_ppo_on_atari_trains_with_a_cnn_and_resumes_exactly(tmp_path: Path) -> None:
    params = atari_params()
    runner = make_runner(tmp_path / "probe", params)
    try:
        agent = runner.agents["agent"]
        assert isinstance(agent.policy.encoder, ObservationEncoder)
        chunk = runner.explorers["train"].update()
        assert chunk["/observations"].dtype == np.uint8 and chunk["/observations"].shape[2:] == (4, 84, 84)
        assert agent.obs.from_batch({"/observations": torch.from_numpy(chunk["/observations"])}).dtype == (
            torch.uint8
        )
    finally:
        close(runner)
    assert_resume_is_exact(tmp_path, params, before=2)


@pytest.mark.parametrize("agent", ["ppo", "sac"])
def test_dict_observations_train_and_resume_exactly(tmp_path: Path, agent: str) -> None:
    params = dict_params(agent)
    runner = make_runner(tmp_path / "probe", params)
    try:
        explorer = runner.explorers["train"]
        assert isinstance(explorer.observation_space, spaces.Dict)
        chunk = explorer.update()
        assert {"/observations/qpos", "/observations/qvel"} <= set(chunk)
        assert runner.agents["agent"].obs.dim == 4
    finally:
        close(runner)
    assert_resume_is_exact(tmp_path, params, before=3)


def test_mixed_dict_gets_a_cnn_beside_the_vector() -> None:
    space = spaces.Dict(
        {
            "pixels": spaces.Box(0, 255, (3, 64, 64), np.uint8),
            "state": spaces.Box(-1.0, 1.0, (5,), np.float32),
        }
    )
    agent = PPO("agent", None, space, spaces.Discrete(3), cnn_features=32, hidden_sizes=[16])
    assert agent.policy.encoder.out_dim == 32 + 5
    observations = {k: np.stack([s.sample() for _ in range(4)]) for k, s in space.spaces.items()}
    observations = {f"/{k}": v for k, v in observations.items()}
    out = agent.action_generator(observations, agent.initial_hidden_state(4), np.ones((4, 1), np.float32))
    assert out["actions"].shape == (4,) and np.isfinite(out["artifacts"]["values"]).all()
    # the uint8 image is scaled to [0, 1] inside a float32 (mixed) tensor as it is on its own
    flat = agent.obs.from_explorer(observations, torch.device("cpu"))
    assert flat.dtype == torch.float32 and flat.shape == (4, 3 * 64 * 64 + 5)
    encoder = agent.policy.encoder
    cnn_alone = encoder.cnns[0](torch.as_tensor(observations["/pixels"]))
    torch.testing.assert_close(encoder(flat)[:, :32], cnn_alone)


def test_images_are_refused_where_no_encoder_takes_them() -> None:
    image = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    box = spaces.Box(-1.0, 1.0, (2,), np.float32)
    with pytest.raises(UsageError, match="MLP policies") as error:
        SAC("agent", None, image, box)
    assert "\n" not in str(error.value)
    with pytest.raises(UsageError, match="ImageTranspose"):
        EncodedObservations(spaces.Box(0, 255, (84, 84, 3), np.uint8))
