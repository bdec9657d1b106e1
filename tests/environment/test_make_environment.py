"""MakeEnvironment: specs, spaces, wrapper stacks from params, vectorisation and errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from digideep.environment.make_environment import MakeEnvironment
from digideep.environment.wrappers import SingleAgentAdapter

from .conftest import TEST_ENVS


def test_spec_of_a_box_env_is_plain_json() -> None:
    spec = MakeEnvironment("Pendulum-v1").get_spec()
    assert json.loads(json.dumps(spec)) == spec
    assert spec["model_name"] == "Pendulum-v1"
    assert spec["max_episode_steps"] == 200
    assert spec["agents"] == ["agent"]
    assert spec["observation_space"] == {
        "type": "Box",
        "shape": [3],
        "dtype": "float32",
        "low": [-1.0, -1.0, -8.0],
        "high": [1.0, 1.0, 8.0],
    }
    assert spec["action_space"] == {
        "type": "Dict",
        "spaces": {"agent": {"type": "Box", "shape": [1], "dtype": "float32", "low": -2.0, "high": 2.0}},
    }


def test_spec_of_nested_dict_and_multi_agent_envs() -> None:
    spec = MakeEnvironment("DigiDictObs-v0", from_module=TEST_ENVS, max_episode_steps=7).get_spec()
    assert spec["max_episode_steps"] == 7
    sensors = spec["observation_space"]["spaces"]["sensors"]
    assert sensors["type"] == "Dict"
    assert sensors["spaces"]["count"]["dtype"] == "int64"
    two = MakeEnvironment("DigiTwoAgent-v0", from_module=TEST_ENVS).get_spec()
    assert two["agents"] == ["mover", "switch"]
    assert two["action_space"]["spaces"]["switch"] == {
        "type": "Discrete",
        "n": 3,
        "start": 0,
        "dtype": "int64",
    }


@pytest.mark.filterwarnings("ignore:.*precision lowered by casting to float32")
def test_wrapper_stacks_from_params() -> None:
    make = MakeEnvironment(
        "Pendulum-v1",
        wrappers=[
            {"name": "gymnasium.wrappers.RescaleAction", "args": {"min_action": -1.0, "max_action": 1.0}},
            {"name": "gymnasium.wrappers.FrameStackObservation", "args": {"stack_size": 4}},
            {"name": "gymnasium.wrappers.ClipAction", "enabled": False},
        ],
        vector_wrappers=[
            {"name": "digideep.environment.wrappers.SingleAgentAdapter", "args": {"agent_name": "pilot"}}
        ],
    )
    observation_space, action_space = make.spaces()
    assert observation_space.shape == (4, 3)
    assert list(action_space.spaces) == ["pilot"]
    np.testing.assert_array_equal(action_space["pilot"].low, [-1.0])
    np.testing.assert_array_equal(action_space["pilot"].high, [1.0])


def test_vector_env_runs_in_same_step_autoreset_mode() -> None:
    make = MakeEnvironment("CartPole-v1", vectorization="auto")
    for workers, cls in ((1, SyncVectorEnv), (2, AsyncVectorEnv)):
        envs = make.create_envs(workers, "train", seed=0)
        try:
            assert isinstance(envs, SingleAgentAdapter)
            assert isinstance(envs.unwrapped, cls)
            assert envs.unwrapped.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
            obs, _ = envs.reset(seed=0)
            assert obs.shape == (workers, 4)
            obs, *_ = envs.step({"agent": np.zeros(workers, np.int64)})
            assert obs.shape == (workers, 4)
        finally:
            envs.close()


def test_normalisers_are_frozen_outside_train_mode() -> None:
    make = MakeEnvironment(
        "Pendulum-v1",
        wrappers=[{"name": "gymnasium.wrappers.NormalizeObservation"}],
        vector_wrappers=[
            {"name": "digideep.environment.wrappers.NormalizeObservation"},
            {"name": "digideep.environment.wrappers.NormalizeReward"},
        ],
    )
    for mode, frozen in (("train", False), ("test", True), ("eval", True)):
        envs = make.create_envs(1, mode, seed=0)
        reward_norm, obs_norm = envs.env, envs.env.env
        assert reward_norm.frozen is frozen and obs_norm.frozen is frozen
        assert envs.unwrapped.envs[0].get_wrapper_attr("update_running_mean") is not frozen
        envs.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model_name": "NoSuchEnv-v0"}, "unknown Gymnasium environment 'NoSuchEnv-v0'; set from_module"),
        (
            {"model_name": "NoSuchEnv-v0", "from_module": TEST_ENVS},
            "'tests.environment.envs' did not register it",
        ),
        (
            {"model_name": "Pendulum-v1", "from_module": "no_such_module"},
            "cannot import from_module 'no_such_module'",
        ),
        ({"model_name": "Pendulum-v1", "vectorization": "threads"}, "vectorization must be one of"),
        (
            {"model_name": "Pendulum-v1", "wrappers": ["gymnasium.wrappers.ClipAction"]},
            r"wrappers\[0\] must be a dict",
        ),
        ({"model_name": "Pendulum-v1", "wrappers": [{"name": "x.Y", "kwargs": {}}]}, "unknown keys"),
    ],
)
def test_bad_params_are_reported_clearly(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MakeEnvironment(**kwargs)


def test_bad_wrapper_paths_and_args_are_reported_clearly() -> None:
    make = MakeEnvironment("Pendulum-v1", wrappers=[{"name": "gymnasium.wrappers.NoSuchWrapper"}])
    with pytest.raises(ValueError, match=r"module 'gymnasium\.wrappers' has no 'NoSuchWrapper'"):
        make.spaces()
    make = MakeEnvironment(
        "Pendulum-v1", wrappers=[{"name": "gymnasium.wrappers.ClipAction", "args": {"bad": 1}}]
    )
    with pytest.raises(ValueError, match=r"wrapper 'gymnasium\.wrappers\.ClipAction' rejected args"):
        make.spaces()


def test_image_and_dict_wrappers() -> None:
    image = MakeEnvironment(
        "DigiImage-v0",
        from_module=TEST_ENVS,
        wrappers=[{"name": "digideep.environment.wrappers.ImageTranspose"}],
    )
    observation_space, _ = image.spaces()
    assert observation_space.shape == (3, 8, 6) and observation_space.dtype == np.uint8
    envs = image.create_envs(1, "train", seed=0)
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (1, 3, 8, 6) and obs[0, 1, 0, 0] == 7
    envs.close()

    flat = MakeEnvironment(
        "DigiDictObs-v0",
        from_module=TEST_ENVS,
        wrappers=[{"name": "digideep.environment.wrappers.FlattenDictObservation"}],
        vector_wrappers=[{"name": "digideep.environment.wrappers.NormalizeObservation"}],
    )
    observation_space, _ = flat.spaces()
    assert isinstance(observation_space, spaces.Dict)
    assert list(observation_space.spaces) == ["/position", "/sensors/count", "/sensors/velocity"]
    # the normaliser takes the floating entries and leaves the integer counter alone
    assert observation_space["/position"].dtype == np.float32
    assert observation_space["/sensors/count"].dtype == np.int64
