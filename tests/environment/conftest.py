"""Fixtures and helpers of the environment tests: sessions, explorers with random agents."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from digideep.environment.explorer import Explorer
from digideep.environment.make_environment import MakeEnvironment
from digideep.environment.random_agent import RandomAgent
from digideep.storage.session import Session

TEST_ENVS = "tests.environment.envs"


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    session = Session(root=tmp_path, name="t")
    yield session
    session.close()


def random_agents(env: dict, seed: int = 0) -> dict[str, RandomAgent]:
    """One RandomAgent per agent of the env (seeded ``seed``, ``seed + 1``, ...)."""
    observation_space, action_space = MakeEnvironment(**env).spaces()
    return {
        name: RandomAgent(name, None, observation_space, space, seed=seed + i)
        for i, (name, space) in enumerate(action_space.spaces.items())
    }


@pytest.fixture
def make_explorer() -> Iterator[Callable[..., Explorer]]:
    """``make_explorer(env, **explorer_kwargs)``: an Explorer with random agents, closed after the test."""
    made: list[Explorer] = []

    def make(env: dict, agents: dict | None = None, agent_seed: int = 0, **kwargs: Any) -> Explorer:
        kwargs.setdefault("session", None)
        kwargs.setdefault("mode", "train")
        kwargs.setdefault("num_workers", 2)
        kwargs.setdefault("n_steps", 8)
        explorer = Explorer(agents=agents or random_agents(env, agent_seed), env=env, **kwargs)
        made.append(explorer)
        return explorer

    yield make
    for explorer in made:
        explorer.close()


def weights_only_round_trip(state: Any) -> Any:
    """What a checkpoint gives back: ``torch.save`` then ``torch.load(weights_only=True)``."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def assert_chunks_equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    """Same keys, dtypes and values (NaN placeholders compare equal)."""
    assert sorted(a) == sorted(b)
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def save_and_restore(make_explorer, env: dict, n_steps: int):
    """An explorer after one chunk, saved (weights_only round trip) and restored into a fresh one.

    The fresh explorer has another seed and fresh agents, so everything must come from the state.
    Returns ``(original, restored, expected)``: ``expected`` is the original's next chunk, which the
    restored explorer's next chunk must equal.
    """
    original_agents = random_agents(env, seed=1)
    original = make_explorer(env, agents=original_agents, seed=5, n_steps=n_steps)
    original.update()
    saved = weights_only_round_trip(
        {"explorer": original.state_dict(), "agents": {n: a.state_dict() for n, a in original_agents.items()}}
    )
    expected = original.update()
    restored_agents = random_agents(env, seed=99)
    for name, agent in restored_agents.items():
        agent.load_state_dict(saved["agents"][name])
    restored = make_explorer(env, agents=restored_agents, seed=123, n_steps=n_steps)
    restored.load_state_dict(saved["explorer"])
    return original, restored, expected
