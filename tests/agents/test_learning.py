"""Learning runs of the shipped parameter files (``-m slow``): every seed must reach the target.

Targets (mean return of 10 deterministic episodes at the end of the run): SAC on Pendulum-v1 >= -200
after 10,000 frames; TD3 and DDPG on Pendulum-v1 >= -250 after 20,000; PPO on CartPole-v1 >= 475
after 100,000; PPO on HalfCheetah-v5 (trained with the hand-written gradients) >= 1,400 after
1,003,520 (3.4 min a seed here; runs of the shipped file through the CLI scored 1,924 over 10
episodes on seed 0, and 1,859 and 1,723 over 5 on seeds 1 and 2; these Runners take the params'
``torch_threads`` as the CLI does: with the process's 2 threads seed 0 scored 4,406.9); SAC on dm_control/cartpole-swingup-v0 >= 700 after 100,000 (one seed; 100,000 gradient
steps: 38 min here beside the test suite; it scored 842.9); SAC on Hopper-v5, a task that terminates,
after 50,000 frames with learning_starts 10,000, >= 250 on the shipped schedule and on the chunked one
(seeds 0 and 1, figures beside ``HOPPER_TARGETS``). The quick tests at the bottom run a sliver of each to keep the
files importable and their trees buildable in CI.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.agents.runner_setup import close, iterate, make_runner, shipped_params

TARGETS = {
    "pendulum_sac": -200.0,
    "pendulum_td3": -250.0,
    "pendulum_ddpg": -250.0,
    "cartpole_ppo": 475.0,
    "mujoco_ppo": 1400.0,
}


def assert_reaches(
    tmp_path: Path, params: dict, label: str, target: float, frames: int | None = None
) -> None:
    """Train ``params`` to the end; the mean return of its last test (10 deterministic episodes in the
    Runner's own test stage) must reach ``target``."""
    runner = make_runner(tmp_path, params)
    try:
        assert runner.train() == "finished"
        assert frames is None or runner.counters.frames == frames
        returns = runner.monitor.window_values("/explore/test/episode_return")
    finally:
        close(runner)
    assert len(returns) == 10
    score = sum(returns) / len(returns)
    print(f"{label}: mean deterministic return {score:.1f} (target {target})")
    assert score >= target, f"{label}: mean return {score:.1f} < {target}"


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", sorted(TARGETS))
def test_reaches_the_target_return(tmp_path: Path, name: str, seed: int) -> None:
    epochs = shipped_params(name)["runner"]["number_epochs"]
    # the Runner's own test stage, once at the end, over 10 deterministic episodes
    params = shipped_params(name, seed=seed, test_interval=epochs, test_episodes=10, test_win_size=10)
    assert_reaches(tmp_path, params, f"{name} seed {seed}", TARGETS[name])


# CURL (Laskin, Srinivas, Abbeel 2020, arXiv:2004.04136), Table 1, "State SAC" on cartpole swingup:
# 835 +- 22 after 100k steps; the target leaves room for a 10-episode evaluation of one seed.
DMC_TARGET = 700.0


@pytest.mark.slow
def test_dmc_sac_swings_up_the_cartpole(tmp_path: Path) -> None:
    pytest.importorskip("dm_control", reason="needs pip install 'digideep[dmc]'")
    # 10 epochs x 10,000 iterations x 1 step = 100,000 frames, then 10 deterministic episodes
    params = shipped_params("dmc_sac", number_epochs=10, test_interval=10, test_episodes=10, test_win_size=10)
    assert_reaches(tmp_path, params, "dmc_sac cartpole-swingup", DMC_TARGET)


# Hopper ends an episode when it falls, so targets must stop at terminations. Measured on this protocol
# (bench/bench_learning.py): the shipped schedule (a frame, then a gradient step) 324.4 and 326.6 on
# seeds 0 and 1; the chunked one (n_steps 1,000) 495.1 on seed 0, and 2730.6 and 1098.4 while it still
# drew an action at each chunk's final prestep (another random stream: its outcomes are bimodal, a
# gait that hops or one that falls early); SB3 515.6 and 540.6; the former hand-written gradients
# (chunked) 419.2 and 355.3. The target asks for a gait that moves forward (a random policy scores
# 16.7); digideep's gap to SB3 is open (docs/benchmark.md, parity).
HOPPER_TARGETS = {1: 250.0, 1000: 250.0}


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("n_steps", sorted(HOPPER_TARGETS))
def test_sac_learns_hopper(tmp_path: Path, n_steps: int, seed: int) -> None:
    # 50 epochs of 1,000 frames = 50,000 frames (the first 10,000 random), then 10 deterministic
    # episodes in the Runner's test stage
    params = shipped_params(
        "mujoco_sac",
        model_name="Hopper-v5",
        seed=seed,
        learning_starts=10_000,
        n_steps=n_steps,
        epoch_size=1000 // n_steps,
        number_epochs=50,
        test_interval=50,
        test_episodes=10,
        test_win_size=10,
    )
    label = f"mujoco_sac Hopper-v5 n_steps {n_steps} seed {seed}"
    assert_reaches(tmp_path, params, label, HOPPER_TARGETS[n_steps], frames=50_000)


@pytest.mark.parametrize("name", [*sorted(TARGETS), "dmc_sac"])
def test_params_file_runs_a_few_iterations(tmp_path: Path, name: str) -> None:
    overrides = {"learning_starts": 64, "batch_size": 32} if "ppo" not in name else {"n_epochs": 1}
    runner = make_runner(tmp_path, shipped_params(name, n_steps=32, hidden_sizes=[16, 16], **overrides))
    try:
        metrics = iterate(runner, 3)
        assert metrics[-1] and all(math.isfinite(v) for v in metrics[-1].values())
    finally:
        close(runner)
