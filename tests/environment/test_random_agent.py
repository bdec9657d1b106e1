"""RandomAgent, space specs and the saveable encoding of live state."""

from __future__ import annotations

import json
from collections import deque

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.wrappers.utils import RunningMeanStd

from digideep.environment.random_agent import RandomAgent
from digideep.environment.spaces import buffer_dtype, flat_leaves, space_to_dict
from digideep.environment.wrappers.saveable import from_saveable, to_saveable

from .conftest import weights_only_round_trip


def _act(agent: RandomAgent, workers: int = 3) -> np.ndarray:
    hidden = agent.initial_hidden_state(workers)
    masks = np.ones((workers, 1), np.float32)
    out = agent.action_generator(None, hidden, masks, deterministic=True)
    assert out["hidden_state"].shape == (workers, 1) and out["hidden_state"].dtype == np.float32
    assert out["artifacts"] == {}
    return out["actions"]


def test_actions_are_uniform_within_the_space() -> None:
    box = spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 10.0], np.float32))
    actions = np.concatenate([_act(RandomAgent("a", None, None, box, seed=s), 200) for s in range(3)])
    assert actions.shape == (600, 2) and actions.dtype == np.float32
    assert np.all(actions >= box.low) and np.all(actions <= box.high)
    np.testing.assert_allclose(actions.mean(axis=0), [0.0, 5.0], atol=0.4)

    discrete = _act(RandomAgent("a", None, None, spaces.Discrete(4, start=1)), 400)
    assert discrete.shape == (400,) and discrete.dtype == np.int64
    assert set(np.unique(discrete)) == {1, 2, 3, 4}
    multi = _act(RandomAgent("a", None, None, spaces.MultiDiscrete([2, 5])), 50)
    assert multi.shape == (50, 2) and multi.max(axis=0).tolist() == [1, 4]
    unbounded = _act(RandomAgent("a", None, None, spaces.Box(0.0, np.inf, (3,), np.float32)), 50)
    assert np.all(unbounded >= 0.0)
    nested = _act(RandomAgent("a", None, None, spaces.Dict({"k": spaces.Discrete(2)})), 5)
    assert nested["k"].shape == (5,)


def test_random_action_generator_and_state_dict_round_trip() -> None:
    box = spaces.Box(-2.0, 2.0, (4,), np.float32)
    agent = RandomAgent("a", None, None, box, seed=7)
    _act(agent)
    state = weights_only_round_trip(agent.state_dict())
    expected = _act(agent)
    other = RandomAgent("a", None, None, box, seed=8)
    other.load_state_dict(state)
    np.testing.assert_array_equal(_act(other), expected)
    out = other.random_action_generator(None, other.initial_hidden_state(2), np.zeros((2, 1), np.float32))
    assert out["actions"].shape == (2, 4)
    assert other.sample(None) is None and other.update(None) == {}


def test_space_helpers() -> None:
    space = spaces.Dict(
        {
            "image": spaces.Box(0, 255, (2, 2, 3), np.uint8),
            "more": spaces.Dict({"bits": spaces.MultiBinary(3), "pair": spaces.Tuple([spaces.Discrete(2)])}),
        }
    )
    described = space_to_dict(space)
    assert json.loads(json.dumps(described)) == described
    assert described["spaces"]["more"]["spaces"]["bits"] == {"type": "MultiBinary", "n": 3, "dtype": "int8"}
    assert described["spaces"]["more"]["spaces"]["pair"]["type"] == "Tuple"
    assert list(flat_leaves(space)) == ["/image", "/more/bits", "/more/pair"]
    assert buffer_dtype(space["image"]) == np.uint8
    assert buffer_dtype(spaces.Box(-1, 1, (2,), np.float64)) == np.float32
    assert buffer_dtype(space["more"]["bits"]) == np.int64


def test_saveable_encoding_round_trips_through_weights_only_load() -> None:
    rng = np.random.default_rng(3)
    rms = RunningMeanStd(shape=(2,))
    rms.update(np.ones((4, 2)))
    value = {
        "array": np.arange(6, dtype=np.int32).reshape(2, 3),
        "scalar": np.float32(1.5),
        "float64": np.float64(2.5),
        "tuple": (1, "a", None),
        "deque": deque([np.zeros(2), np.ones(2)], maxlen=4),
        "rng": rng,
        "rms": rms,
        "flag": True,
    }
    encoded = weights_only_round_trip(to_saveable(value))
    assert isinstance(encoded["array"]["data"], torch.Tensor)  # the codec tags arrays; the data is a tensor
    decoded = from_saveable(encoded)
    np.testing.assert_array_equal(decoded["array"], value["array"])
    assert decoded["array"].dtype == np.int32
    assert type(decoded["scalar"]) is np.float32 and decoded["scalar"] == 1.5
    assert type(decoded["float64"]) is np.float64
    assert decoded["tuple"] == (1, "a", None)
    assert decoded["deque"].maxlen == 4 and len(decoded["deque"]) == 2
    assert decoded["rng"].random() == rng.random()
    np.testing.assert_array_equal(decoded["rms"].mean, rms.mean)
    assert decoded["rms"].count == rms.count
    assert decoded["flag"] is True
