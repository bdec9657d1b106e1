"""Atari through ale-py: the preprocessing, train-only life loss and reward clipping, full-game
returns, exact resume of the emulator, and the one-line errors."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from gymnasium import spaces

from digideep.agents.base import OnDevice
from digideep.agents.ppo import PPO
from digideep.environment import atari
from digideep.environment.make_environment import MakeEnvironment
from digideep.memory import RolloutMemory

from .conftest import assert_chunks_equal, save_and_restore

pytest.importorskip("ale_py", reason="needs pip install 'digideep[atari]'")

BREAKOUT = {"model_name": "ALE/Breakout-v5", "env_kwargs": {"repeat_action_probability": 0.0}}


@pytest.mark.parametrize("model_name", ["ALE/Pong-v5", "ALE/Breakout-v5", "PongNoFrameskip-v4"])
def test_game_builds_with_stacked_84x84_grayscale_frames(model_name: str) -> None:
    maker = MakeEnvironment(model_name)
    observation_space, action_space = maker.spaces()
    assert observation_space == spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert isinstance(action_space["agent"], spaces.Discrete)
    env = maker.make_env()
    try:
        observation, _ = env.reset(seed=0)
        assert observation.shape == (4, 84, 84) and observation.dtype == np.uint8 and observation.any()
        observation, *_ = env.step(0)
        assert observation_space.contains(observation)
    finally:
        env.close()


def _play_until_done(env, rng: np.random.Generator) -> tuple[list[float], bool]:
    rewards = []
    while True:
        _, reward, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
        rewards.append(reward)
        if terminated or truncated:
            return rewards, terminated


def test_train_mode_ends_the_episode_at_a_lost_life_and_continues_the_game() -> None:
    env = MakeEnvironment(**BREAKOUT).make_env(mode="train")
    rng = np.random.default_rng(0)
    try:
        env.reset(seed=0)
        ale = env.unwrapped.ale
        assert ale.lives() == 5
        _play_until_done(env, rng)
        assert ale.lives() == 4, "the episode ended at the lost life"
        frame = ale.getEpisodeFrameNumber()
        env.reset()
        assert ale.lives() == 4 and ale.getEpisodeFrameNumber() > frame, "reset continued the same game"
    finally:
        env.close()


def test_test_mode_plays_the_whole_game_on_the_real_score() -> None:
    env = MakeEnvironment(**BREAKOUT).make_env(mode="test")
    rng = np.random.default_rng(1)
    try:
        env.reset(seed=1)
        rewards, terminated = _play_until_done(env, rng)
        assert terminated and env.unwrapped.ale.lives() == 0
        assert sum(rewards) == env.get_wrapper_attr("episode_returns")  # RecordEpisodeStatistics' sum
    finally:
        env.close()


def test_train_returns_are_whole_games_unclipped(make_explorer) -> None:
    """Lives end the agent's episodes (terminals), but the logged return is the whole game's score."""
    explorer = make_explorer({**BREAKOUT}, num_workers=1, n_steps=None, n_episodes=5, seed=2)
    chunk = explorer.update()
    terminals = int(np.nansum(chunk["/terminals"]))
    assert terminals == 5, "five lives, five agent episodes"
    assert len(chunk.episodes.returns) == 1, "one game logged"
    rewards = chunk["/rewards"][0, :-1, 0]
    assert set(np.unique(rewards)) <= {0.0, 1.0}, "train rewards are clipped to their sign"
    assert chunk.episodes.returns[0] >= rewards.sum()  # Breakout scores 1, 4 or 7 a brick
    assert chunk.episodes.lengths[0] >= 4 * (len(rewards) - 5), "lengths count emulator frames"


def test_resume_repeats_the_next_chunk_bit_for_bit(make_explorer) -> None:
    env = {**BREAKOUT, "env_kwargs": {"repeat_action_probability": 0.25}}  # sticky: the emulator's RNG too
    _, restored, expected = save_and_restore(make_explorer, env, n_steps=64)
    assert_chunks_equal(expected, restored.update())


def test_rollout_memory_holds_each_frame_once_and_gives_the_chunk_back_bit_for_bit(make_explorer) -> None:
    """Lives end episodes often in Breakout: resets and final observations land inside the chunk."""
    explorer = make_explorer({**BREAKOUT}, num_workers=2, n_steps=300, seed=0)
    chunk = explorer.update()
    assert np.nansum(chunk["/terminals"]) >= 2, "the chunk crosses episode ends"
    memory = RolloutMemory(2)
    memory.store(chunk)
    assert_chunks_equal(memory.last_chunk(), dict(chunk))
    rng = np.random.default_rng(0)
    workers, rows = rng.integers(0, 2, 256), rng.integers(0, 301, 256)
    for key in ("/observations", "/next_observations"):
        np.testing.assert_array_equal(memory.gather(key, workers, rows), chunk[key][workers, rows])
    frame = 84 * 84
    per_transition = (
        memory.nbytes - sum(v.nbytes for k, v in chunk.items() if "observations" not in k)
    ) / 602
    # one frame a row, plus whole stacks where a (random, short) life ended: far from eight frames
    assert per_transition < 2 * frame


def test_ppo_learns_the_same_from_frames_held_once(make_explorer) -> None:
    """The frame codec changes nothing in training: the same update, bit for bit, as from plain arrays."""
    observation_space, action_space = MakeEnvironment(**BREAKOUT).spaces()
    session = OnDevice(torch.device("cpu"))

    def agent() -> PPO:
        torch.manual_seed(0)
        return PPO("agent", session, observation_space, action_space["agent"], n_epochs=1, batch_size=64)

    # random actions (warm start; the policy still gives values and log-probs) lose lives sooner
    explorer = make_explorer({**BREAKOUT}, agents={"agent": agent()}, n_steps=100, seed=3, warm_start=10**6)
    chunk = explorer.update()
    assert np.nansum(chunk["/terminals"]) >= 1, "the chunk crosses an episode end"
    states = []
    for frames in (True, False):
        learner = agent()
        memory = RolloutMemory(2, frames=frames)
        memory.store(chunk)
        torch.manual_seed(1)
        learner.update(learner.sample(memory))
        states.append(learner.policy.state_dict())
    for key, value in states[0].items():
        assert torch.equal(value, states[1][key]), key


def test_resize_is_the_area_average() -> None:
    env = MakeEnvironment(**BREAKOUT).make_env()
    try:
        preprocessing = env.env  # EnvState -> AtariPreprocessing
        frame = np.random.default_rng(0).integers(0, 256, (210, 160), dtype=np.uint8)
        resized = preprocessing._resize(frame)
        # pixel (0, 0) covers rows [0, 2.5) and columns [0, 160/84) of the frame
        rows, cols = np.array([1.0, 1.0, 0.5]), np.array([1.0, 160 / 84 - 1.0])
        exact = (rows[:, None] * cols[None, :] * frame[:3, :2]).sum() / (2.5 * 160 / 84)
        assert resized[0, 0] == np.rint(exact)
        flat = np.full((210, 160), 77, np.uint8)
        assert (preprocessing._resize(flat) == 77).all()
    finally:
        env.close()


def test_bad_input_fails_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="frameskip=1"):
        MakeEnvironment("ALE/Pong-v5", env_kwargs={"frameskip": 4}).make_env()
    with pytest.raises(ValueError, match="unknown atari option"):
        MakeEnvironment("ALE/Pong-v5", atari={"framestack": 4})
    with pytest.raises(ValueError, match="apply to ale-py ids"):
        MakeEnvironment("CartPole-v1", atari={"frame_stack": 2})
    monkeypatch.setattr(atari, "_registered", False)
    monkeypatch.setitem(sys.modules, "ale_py", None)  # as if not installed
    with pytest.raises(atari.AtariUnavailableError, match=r"pip install 'digideep\[atari\]'") as error:
        atari.register("ALE/NotRegisteredYet-v5")
    assert "\n" not in str(error.value)
