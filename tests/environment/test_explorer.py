"""The Explorer's trajectory chunks: keys, shapes, dtypes, episode boundaries and agent outputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from digideep.utility.monitoring import monitor

from .conftest import TEST_ENVS, assert_chunks_equal

W, T = 2, 8

# env params -> (observation keys with (shape, dtype), {agent: (action shape, dtype)})
CASES = {
    "pendulum": ({"model_name": "Pendulum-v1"}, {"": ((3,), np.float32)}, {"agent": ((1,), np.float32)}),
    "cartpole": ({"model_name": "CartPole-v1"}, {"": ((4,), np.float32)}, {"agent": ((), np.int64)}),
    "halfcheetah": (
        {"model_name": "HalfCheetah-v5"},
        {"": ((17,), np.float32)},
        {"agent": ((6,), np.float32)},
    ),
    "dict_obs": (
        {"model_name": "DigiDictObs-v0", "from_module": TEST_ENVS},
        {
            "/position": ((2,), np.float32),
            "/sensors/velocity": ((2,), np.float32),
            "/sensors/count": ((1,), np.int64),
        },
        {"agent": ((2,), np.float32)},
    ),
    "two_agents": (
        {"model_name": "DigiTwoAgent-v0", "from_module": TEST_ENVS},
        {"": ((3,), np.float32)},
        {"mover": ((1,), np.float32), "switch": ((), np.int64)},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_chunk_keys_shapes_dtypes(make_explorer, case: str) -> None:
    env, observations, actions = CASES[case]
    chunk = make_explorer(env, num_workers=W, n_steps=T).update()

    expected = {"/masks", "/rewards", "/terminals", "/truncations"}
    for key, (shape, dtype) in observations.items():
        for prefix in ("/observations", "/next_observations"):
            expected.add(prefix + key)
            assert chunk[prefix + key].shape == (W, T + 1, *shape), prefix + key
            assert chunk[prefix + key].dtype == dtype, prefix + key
    for name, (shape, dtype) in actions.items():
        expected |= {f"/agents/{name}/actions", f"/agents/{name}/hidden_state"}
        assert chunk[f"/agents/{name}/actions"].shape == (W, T + 1, *shape)
        assert chunk[f"/agents/{name}/actions"].dtype == dtype
        assert chunk[f"/agents/{name}/hidden_state"].shape == (W, T + 1, 1)
        assert chunk[f"/agents/{name}/hidden_state"].dtype == np.float32
    infos = {k for k in chunk if k.startswith("/infos/")}
    assert set(chunk) - infos == expected
    for key in ("/masks", "/rewards", "/terminals", "/truncations"):
        assert chunk[key].shape == (W, T + 1, 1) and chunk[key].dtype == np.float32, key
    for key in infos:
        assert chunk[key].shape[:2] == (W, T + 1), key

    # row T is the final prestep: transition entries are NaN placeholders, the mask and the
    # observation are real, and (final_action=True) so are the actions
    for key in ("/rewards", "/terminals", "/truncations", *(k for k in chunk if k.startswith("/next_obs"))):
        values = chunk[key][:, T]
        assert np.all(
            np.isnan(values) if values.dtype.kind == "f" else values == np.iinfo(values.dtype).min
        ), key
    assert np.all(np.isfinite(chunk["/rewards"][:, :T]))
    assert np.all(np.isin(chunk["/masks"], [0.0, 1.0]))
    assert np.all(chunk["/masks"][:, 0] == 0.0), "the first row after a reset starts an episode"
    for name in actions:
        if chunk[f"/agents/{name}/actions"].dtype.kind == "f":
            assert np.all(np.isfinite(chunk[f"/agents/{name}/actions"]))


def test_dict_observations_match_nested_env_output(make_explorer) -> None:
    env = CASES["dict_obs"][0]
    chunk = make_explorer(env, n_steps=5).update()
    counts = chunk["/observations/sensors/count"][..., 0]
    # count is the step index inside the episode: it restarts where the mask is 0
    for w in range(W):
        for t in range(1, 6):
            expected = 0 if chunk["/masks"][w, t, 0] == 0 else counts[w, t - 1] + 1
            assert counts[w, t] == expected
    assert chunk["/infos/distance"].dtype == np.float64


def test_masks_and_flags_at_truncation(make_explorer) -> None:
    env = {"model_name": "Pendulum-v1", "max_episode_steps": 5}
    chunk = make_explorer(env, n_steps=12).update()
    ended = np.zeros((W, 12), bool)
    ended[:, [4, 9]] = True
    np.testing.assert_array_equal(chunk["/truncations"][:, :12, 0], ended.astype(np.float32))
    np.testing.assert_array_equal(chunk["/terminals"][:, :12, 0], 0.0)
    np.testing.assert_array_equal(chunk["/masks"][:, [0, 5, 10], 0], 0.0)
    np.testing.assert_array_equal(chunk["/masks"][:, [1, 2, 3, 4, 6, 9, 11, 12], 0], 1.0)
    obs, nxt = chunk["/observations"], chunk["/next_observations"]
    # next observation is the following row's observation inside an episode ...
    inside = [t for t in range(12) if t not in (4, 9)]
    np.testing.assert_array_equal(nxt[:, inside], obs[:, [t + 1 for t in inside]])
    # ... and the true last observation (not the reset one) where the time limit cut the episode:
    # Pendulum's observation is (cos, sin, velocity); the angle moves continuously
    for t in (4, 9):
        assert not np.allclose(nxt[:, t], obs[:, t + 1])
        np.testing.assert_allclose(np.hypot(nxt[:, t, 0], nxt[:, t, 1]), 1.0, atol=1e-5)
        step = np.abs(np.arctan2(nxt[:, t, 1], nxt[:, t, 0]) - np.arctan2(obs[:, t, 1], obs[:, t, 0]))
        assert np.all(np.minimum(step, 2 * np.pi - step) < 1.0)


def test_masks_and_flags_at_termination(make_explorer) -> None:
    chunk = make_explorer({"model_name": "CartPole-v1"}, n_steps=80, agent_seed=3).update()
    terminals, truncations = chunk["/terminals"][:, :80, 0], chunk["/truncations"][:, :80, 0]
    assert terminals.sum() >= 2, "random CartPole episodes end within 80 steps"
    assert truncations.sum() == 0
    for w, t in zip(*np.nonzero(terminals), strict=True):
        assert chunk["/masks"][w, t + 1, 0] == 0.0
        final = chunk["/next_observations"][w, t]
        # the true final observation is out of bounds (|x| > 2.4 or |theta| > 12 degrees) ...
        assert abs(final[0]) > 2.4 or abs(final[2]) > 0.2095
        # ... unlike the reset observation of the next row
        assert np.all(np.abs(chunk["/observations"][w, t + 1]) <= 0.05)
    np.testing.assert_array_equal(chunk["/masks"][:, 1:, 0], 1.0 - terminals)


def test_the_chunk_carries_the_returns_and_lengths_of_its_episodes(make_explorer) -> None:
    monitor.reset()
    explorer = make_explorer({"model_name": "Pendulum-v1", "max_episode_steps": 5}, mode="test", n_steps=10)
    chunk = explorer.update()
    np.testing.assert_array_equal(chunk.episodes.lengths, [5.0, 5.0, 5.0, 5.0])  # 2 workers x 2 episodes
    assert chunk.episodes.returns.shape == (4,) and chunk.episodes.returns.max() < 0.0
    # each return is the sum of its episode's rewards (worker 0's first episode: rows 0..4)
    assert chunk.episodes.returns[0] == pytest.approx(float(chunk["/rewards"][0, :5].sum()), rel=1e-5)
    assert isinstance(chunk, dict) and "/rewards" in chunk  # a memory stores it as the plain dict it is
    assert monitor.summary() == {}  # nothing goes through the process-wide Monitor
    assert explorer.update().episodes.returns.shape == (4,)  # the next chunk: only its own episodes


def test_counters_and_consecutive_chunks(make_explorer) -> None:
    explorer = make_explorer({"model_name": "Pendulum-v1", "max_episode_steps": 5}, n_steps=6)
    assert explorer.was_reset
    first, second = explorer.update(), explorer.update()
    assert not explorer.was_reset
    assert (explorer.steps, explorer.timesteps, explorer.n_episode) == (12, 24, 4)
    # the next chunk starts where the last one stopped: its first row is the final prestep row
    np.testing.assert_array_equal(second["/observations"][:, 0], first["/observations"][:, 6])
    np.testing.assert_array_equal(second["/masks"][:, 0], first["/masks"][:, 6])


def test_do_reset_starts_every_chunk_with_new_episodes(make_explorer) -> None:
    explorer = make_explorer({"model_name": "Pendulum-v1"}, n_steps=4, do_reset=True)
    for _ in range(2):
        chunk = explorer.update()
        np.testing.assert_array_equal(chunk["/masks"][:, 0], 0.0)
        np.testing.assert_array_equal(chunk["/masks"][:, 1:], 1.0)


def test_n_episodes_runs_until_enough_episodes_ended(make_explorer) -> None:
    env = {"model_name": "Pendulum-v1", "max_episode_steps": 5}
    explorer = make_explorer(env, mode="eval", n_steps=None, n_episodes=3)
    chunk = explorer.update()
    # both workers end episodes at t = 4 and t = 9: the third episode ends at t = 9
    assert chunk["/rewards"].shape == (W, 11, 1)
    assert np.nansum(chunk["/truncations"]) == 4
    # a wrong guess of the episode length makes the buffers grow; the result is the same
    explorer._max_episode_steps = 1
    explorer.do_reset = True
    grown = explorer.update()
    assert grown["/rewards"].shape == (W, 11, 1)
    assert np.nansum(grown["/truncations"]) == 4
    assert np.all(np.isfinite(grown["/agents/agent/actions"]))


def test_same_seed_same_chunk_other_seed_other_chunk(make_explorer) -> None:
    env = {"model_name": "HalfCheetah-v5", "max_episode_steps": 6}
    a = make_explorer(env, seed=3, n_steps=10).update()
    b = make_explorer(env, seed=3, n_steps=10).update()
    c = make_explorer(env, seed=4, n_steps=10).update()
    assert_chunks_equal(a, b)
    assert not np.array_equal(a["/observations"], c["/observations"])
    assert not np.array_equal(a["/observations"][0], a["/observations"][1]), "workers get different seeds"


class CountingAgent:
    """A recurrent test agent: its hidden state counts its calls; its action is that count."""

    def __init__(self, low: float = -2.0, high: float = 2.0) -> None:
        self.rng = np.random.default_rng(0)
        self.low, self.high = low, high
        self.random_calls = 0

    def initial_hidden_state(self, num_workers: int) -> np.ndarray:
        return np.zeros((num_workers, 2), np.float32)

    def action_generator(
        self, observations: Any, hidden_state: np.ndarray, masks: np.ndarray, deterministic: bool
    ):
        hidden = (hidden_state * masks) + np.array([1.0, 0.0], np.float32)  # reset at episode starts
        actions = np.clip(hidden[:, :1] / 10.0, self.low, self.high).astype(np.float32)
        return {"actions": actions, "hidden_state": hidden, "artifacts": {"value": hidden[:, :1] * 2.0}}

    def random_action_generator(self, observations: Any, hidden_state: np.ndarray, masks: np.ndarray):
        self.random_calls += 1
        actions = self.rng.uniform(self.low, self.high, (masks.shape[0], 1)).astype(np.float32)
        return {"actions": actions, "hidden_state": hidden_state, "artifacts": {}}


def test_hidden_state_artifacts_and_final_action(make_explorer) -> None:
    env = {"model_name": "Pendulum-v1", "max_episode_steps": 4}
    chunk = make_explorer(env, agents={"agent": CountingAgent()}, n_steps=6).update()
    hidden = chunk["/agents/agent/hidden_state"]
    assert hidden.shape == (W, 7, 2)
    # the hidden state *before* acting: 0 at the start, counting up, reset by the mask at t = 4
    np.testing.assert_array_equal(hidden[0, :, 0], [0, 1, 2, 3, 4, 1, 2])
    values = chunk["/agents/agent/artifacts/value"]
    assert values.shape == (W, 7, 1) and values.dtype == np.float32
    np.testing.assert_array_equal(values[0, :, 0], [2, 4, 6, 8, 2, 4, 6])
    np.testing.assert_allclose(chunk["/agents/agent/actions"][0, :, 0], [0.1, 0.2, 0.3, 0.4, 0.1, 0.2, 0.3])


def test_without_final_action_the_last_actions_are_placeholders(make_explorer) -> None:
    chunk = make_explorer({"model_name": "Pendulum-v1"}, final_action=False, n_steps=3).update()
    assert np.all(np.isnan(chunk["/agents/agent/actions"][:, 3]))
    assert np.all(np.isfinite(chunk["/agents/agent/actions"][:, :3]))


def test_warm_start_uses_random_actions_first(make_explorer) -> None:
    agent = CountingAgent()
    explorer = make_explorer({"model_name": "Pendulum-v1"}, agents={"agent": agent}, warm_start=5, n_steps=3)
    first = explorer.update()
    assert agent.random_calls == 4  # three steps and the final prestep
    assert "/agents/agent/artifacts/value" not in first
    second = explorer.update()
    assert agent.random_calls == 6  # steps 3 and 4 only
    assert np.all(np.isnan(second["/agents/agent/artifacts/value"][:, :2]))
    assert np.all(np.isfinite(second["/agents/agent/artifacts/value"][:, 2:]))


def test_deterministic_flag_reaches_the_agents(make_explorer) -> None:
    seen = []

    class Recorder(CountingAgent):
        def action_generator(self, observations, hidden_state, masks, deterministic):
            seen.append(deterministic)
            return super().action_generator(observations, hidden_state, masks, deterministic)

    make_explorer(
        {"model_name": "Pendulum-v1"}, agents={"agent": Recorder()}, deterministic=True, n_steps=2
    ).update()
    assert seen == [True, True, True]


def test_agents_must_match_the_env(make_explorer) -> None:
    with pytest.raises(ValueError, match=r"agents \['pilot'\] do not match the env's agents \['agent'\]"):
        make_explorer({"model_name": "Pendulum-v1"}, agents={"pilot": CountingAgent()})
    with pytest.raises(ValueError, match="needs n_steps"):
        make_explorer({"model_name": "Pendulum-v1"}, n_steps=None)
    with pytest.raises(ValueError, match="mode must be one of"):
        make_explorer({"model_name": "Pendulum-v1"}, mode="training")


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize(
    ("env", "worker", "key"),
    [
        ({"model_name": "DigiDictObs-v0", "from_module": TEST_ENVS}, 2, "/observations/sensors/velocity"),
        ({"model_name": "DigiTwoAgent-v0", "from_module": TEST_ENVS}, 1, "/observations'"),
    ],
)
def test_non_finite_observation_names_worker_and_key(make_explorer, env: dict, worker: int, key: str) -> None:
    env = {**env, "env_kwargs": {"nan_seed": 10 + worker, "nan_step": 3}}
    explorer = make_explorer(env, num_workers=3, seed=10, n_steps=10)
    with pytest.raises(ValueError, match=f"{key}.* of worker {worker} contains NaN or inf"):
        explorer.update()
