"""DeepMind Control through shimmy: ids build on MuJoCo 4, observations, exact resume, bad input."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from gymnasium import spaces

from digideep.environment.make_environment import MakeEnvironment

from .conftest import assert_chunks_equal, random_agents, save_and_restore, weights_only_round_trip

pytest.importorskip("dm_control", reason="needs pip install 'digideep[dmc]'")
pytest.importorskip("shimmy")

CARTPOLE = "dm_control/cartpole-swingup-v0"


@pytest.mark.parametrize(
    "model_name",
    [CARTPOLE, "dm_control/walker-walk-v0", "dm_control/cheetah-run-v0", "dm_control/reacher-easy-v0"],
)
def test_suite_task_builds_and_steps_with_a_flat_observation(model_name: str) -> None:
    maker = MakeEnvironment(model_name)
    env = maker.make_env()
    try:
        observation, _ = env.reset(seed=0)
        assert (
            isinstance(env.observation_space, spaces.Box) and env.observation_space.shape == observation.shape
        )
        assert observation.ndim == 1 and np.all(np.isfinite(observation))
        observation, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        assert observation.ndim == 1 and 0.0 <= reward <= 1.0 and not (terminated or truncated)
    finally:
        env.close()


def test_flat_vector_is_the_dict_in_sorted_key_order() -> None:
    flat_env, dict_env = (
        MakeEnvironment(CARTPOLE).make_env(),
        MakeEnvironment(CARTPOLE, dm_control={"observation": "dict"}).make_env(),
    )
    try:
        flat, _ = flat_env.reset(seed=3)
        as_dict, _ = dict_env.reset(seed=3)
        assert set(as_dict) == {"position", "velocity"}
        np.testing.assert_array_equal(flat, np.concatenate([as_dict["position"], as_dict["velocity"]]))
    finally:
        flat_env.close()
        dict_env.close()


def test_the_seed_decides_the_initial_state() -> None:
    maker = MakeEnvironment(CARTPOLE)
    first, second = maker.make_env(), maker.make_env()
    try:
        np.testing.assert_array_equal(first.reset(seed=4)[0], second.reset(seed=4)[0])
        assert not np.array_equal(first.reset(seed=4)[0], second.reset(seed=5)[0])
    finally:
        first.close()
        second.close()


def test_episode_ends_as_a_truncation_after_the_suite_time_limit() -> None:
    env = MakeEnvironment(CARTPOLE).make_env()
    try:
        env.reset(seed=0)
        zero = np.zeros(env.action_space.shape, env.action_space.dtype)
        steps, terminated, truncated = 0, False, False
        while not (terminated or truncated or steps > 1000):
            _, _, terminated, truncated, info = env.step(zero)
            steps += 1
        assert (steps, terminated, truncated) == (1000, False, True)
        assert info["episode"]["l"] == 1000  # RecordEpisodeStatistics sees the episode end
    finally:
        env.close()


def test_pixel_observations_are_uint8_images() -> None:
    maker = MakeEnvironment(CARTPOLE, dm_control={"observation": "pixels", "width": 64, "height": 48})
    env = maker.make_env()
    try:
        observation, _ = env.reset(seed=0)
        assert observation.shape == (48, 64, 3) and observation.dtype == np.uint8
        assert observation.std() > 0  # a drawn scene, not a blank frame
        assert env.observation_space.contains(env.step(env.action_space.sample())[0])
    finally:
        env.close()


CASES = {
    # swing-up: a time limit inside the next chunk is not reached; state is physics + task RNG
    "cartpole": {"model_name": CARTPOLE},
    # contacts: plain get_state() (no solver warm start) drifts within these 300 steps; a Dict kept
    "walker": {"model_name": "dm_control/walker-walk-v0", "dm_control": {"observation": "dict"}},
    # the target position is a model field the task sets per episode
    "reacher": {"model_name": "dm_control/reacher-easy-v0"},
}


@pytest.mark.parametrize("case", list(CASES))
def test_restored_explorer_produces_the_same_next_chunk(make_explorer, case: str) -> None:
    _, restored, expected = save_and_restore(make_explorer, CASES[case], n_steps=300)
    assert_chunks_equal(restored.update(), expected)


def test_restore_across_an_episode_end_is_bit_identical(make_explorer) -> None:
    """The suite's own 1,000-step limit and the reset after it, inside the chunk after the restore."""
    env = {"model_name": "dm_control/cheetah-run-v0"}
    agents = random_agents(env, seed=1)
    original = make_explorer(env, agents=agents, seed=5, n_steps=990)
    original.update()
    saved = weights_only_round_trip(
        {"explorer": original.state_dict(), "agent": agents["agent"].state_dict()}
    )
    expected = original.update()
    assert np.nansum(expected["/truncations"]) == 2  # one per worker

    restored_agents = random_agents(env, seed=2)
    restored_agents["agent"].load_state_dict(saved["agent"])
    restored = make_explorer(env, agents=restored_agents, seed=8, n_steps=990)
    restored.load_state_dict(saved["explorer"])
    assert_chunks_equal(restored.update(), expected)


def test_bad_options_are_one_line_errors() -> None:
    with pytest.raises(
        ValueError, match=r"dm_control observation must be one of \('flat', 'dict', 'pixels'\)"
    ):
        MakeEnvironment(CARTPOLE, dm_control={"observation": "rgb"})
    with pytest.raises(ValueError, match=r"unknown dm_control option\(s\) \['size'\]"):
        MakeEnvironment(CARTPOLE, dm_control={"size": 84})
    with pytest.raises(ValueError, match=r"apply to dm_control/\.\.\. ids only"):
        MakeEnvironment("Pendulum-v1", dm_control={"observation": "dict"})


def test_missing_package_names_the_install_command(tmp_path) -> None:
    """Without dm_control (hidden by a stub that fails to import), the CLI prints one line with the fix."""
    stub = tmp_path / "dm_control"
    stub.mkdir()
    (stub / "__init__.py").write_text("raise ImportError('No module named dm_control')\n")
    result = subprocess.run(
        [sys.executable, "-m", "digideep.environment.play", "--model", CARTPOLE, "--n-step", "5"],
        env={**_environ(), "PYTHONPATH": f"{tmp_path}:{_environ().get('PYTHONPATH', '')}"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'digideep[dmc]'" in lines[0], result.stderr


def test_play_tool_runs_a_dm_control_id() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "digideep.environment.play", "--model", CARTPOLE, "--n-step", "20"],
        env=_environ(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "run 0: return" in result.stdout and "length 20" in result.stdout


def _environ() -> dict[str, str]:
    import os

    return dict(os.environ)
