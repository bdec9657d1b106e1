"""A Stable-Baselines3 reference cell: SB3's defaults under digideep's evaluation protocol.

A benchmark cell named ``sb3:SAC``, ``sb3:TD3`` or ``sb3:PPO`` trains that SB3 algorithm with its
own defaults (``MlpPolicy``, one environment), but for the knobs of :data:`SB3_KNOBS` the benchmark's
cpanel gives (``learning_starts``, ``batch_size``, ...), on the cell's environment and seed for
exactly the cell's frame budget, and evaluates its deterministic policy as digideep's runs are evaluated
(:mod:`digideep.pipeline.evaluation`): every ``frame_interval`` frames and at the budget, ``K``
episodes on a separate environment seeded ``seed + 10_000`` (as the test explorer), each evaluation
logged as ``eval/return`` at step = frames, with the three ``eval/*`` params. The run is tracked in
MLflow with the cell's tags, nested under the benchmark's parent run.

SB3 keeps no checkpoint here, so a cell that did not finish is trained again from the start: its
unfinished MLflow run is deleted first, so the benchmark still ends with one run per cell.
SB3 is an optional dependency (the ``bench`` extra), imported when a cell runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from digideep.errors import UsageError
from digideep.pipeline.evaluation import RETURN_METRIC, EvaluationProtocol

__all__ = ["PREFIX", "SB3_ALGORITHMS", "SB3_KNOBS", "check_sb3", "is_sb3", "sb3_arguments", "train_sb3_cell"]

log = logging.getLogger(__name__)

PREFIX = "sb3:"
SB3_ALGORITHMS = ("SAC", "TD3", "PPO")
TEST_SEED_OFFSET = 10_000  # as the test explorer of the shipped parameter files (params/_common.py)

_OFF_POLICY_KNOBS = {
    "learning_starts": "learning_starts",
    "buffer_size": "buffer_size",
    "batch_size": "batch_size",
    "lr": "learning_rate",
    "gamma": "gamma",
    "tau": "tau",
}
SB3_KNOBS: dict[str, dict[str, str]] = {
    "SAC": _OFF_POLICY_KNOBS,
    "TD3": _OFF_POLICY_KNOBS,
    "PPO": {
        "n_steps": "n_steps",
        "batch_size": "batch_size",
        "n_epochs": "n_epochs",
        "lr": "learning_rate",
        "gamma": "gamma",
        "gae_lambda": "gae_lambda",
    },
}
"""The cpanel knobs an SB3 cell takes, by algorithm, and the SB3 argument each sets: the knobs a
like-for-like comparison with the shipped parameter files needs (same name, same meaning)."""


def is_sb3(algorithm: str) -> bool:
    """Whether a benchmark's algorithm names an SB3 reference cell (``sb3:SAC``)."""
    return algorithm.startswith(PREFIX)


def check_sb3(algorithm: str) -> None:
    """Refuse an SB3 cell that cannot run here, in one line.

    Raises:
        UsageError: an algorithm SB3 cells do not offer, or SB3 is not installed.
    """
    name = algorithm[len(PREFIX) :]
    if name not in SB3_ALGORITHMS:
        choices = ", ".join(PREFIX + a for a in SB3_ALGORITHMS)
        raise UsageError(f"unknown reference algorithm '{algorithm}'; choose one of {choices}")
    try:
        import stable_baselines3  # noqa: F401
    except ModuleNotFoundError:
        raise UsageError(
            f"'{algorithm}' needs Stable-Baselines3: install digideep's bench extra "
            "(pip install 'digideep[bench]')"
        ) from None


def sb3_arguments(algorithm: str, cpanel: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The SB3 keyword arguments that ``cpanel``'s knobs of :data:`SB3_KNOBS` give an ``sb3:<ALGO>``
    cell, and those knobs as the cpanel names them (the other keys are the parameter files')."""
    names = SB3_KNOBS[algorithm[len(PREFIX) :]]
    taken = {key: value for key, value in cpanel.items() if key in names}
    return {names[key]: value for key, value in taken.items()}, taken


def train_sb3_cell(
    algorithm: str,
    env_id: str,
    seed: int,
    protocol: EvaluationProtocol,
    client: Any,
    experiment_id: str,
    tags: Mapping[str, str],
    torch_threads: int = 1,
    cpanel: Mapping[str, Any] | None = None,
) -> float:
    """Train one SB3 cell to its frame budget, tracked as an MLflow run; its score (last ``eval/return``).

    Args:
        algorithm: ``sb3:SAC``, ``sb3:TD3`` or ``sb3:PPO``.
        env_id: a Gymnasium id.
        seed: SB3's seed (model, environment); evaluation uses ``seed + 10_000``.
        protocol: frame budget, evaluation interval and episodes (the interval divides the budget).
        client: an ``MlflowClient`` of the benchmark's store.
        experiment_id: the experiment the run goes to.
        tags: the cell's tags (:func:`~digideep.tracking.trials.benchmark_tags`).
        torch_threads: ``torch.set_num_threads`` for the cell (digideep's shipped files use 1).
        cpanel: knobs of :data:`SB3_KNOBS` that replace SB3's defaults (``learning_starts``, ...);
            logged as the run's ``cpanel/<knob>`` params.
    """
    check_sb3(algorithm)
    import gymnasium as gym
    import stable_baselines3
    import torch
    from mlflow.entities import Param

    torch.set_num_threads(torch_threads)
    model_class = getattr(stable_baselines3, algorithm[len(PREFIX) :])
    run = client.create_run(experiment_id, run_name=f"{algorithm} {env_id} seed {seed}", tags=dict(tags))
    run_id = run.info.run_id
    arguments, knobs = sb3_arguments(algorithm, cpanel or {})
    params = {
        **protocol.mlflow_params(),
        "sb3/version": stable_baselines3.__version__,
        "cpanel/seed": str(seed),
        **{f"cpanel/{key}": str(value) for key, value in knobs.items()},
    }
    client.log_batch(run_id, params=[Param(k, v) for k, v in params.items()])
    try:
        model = model_class("MlpPolicy", gym.make(env_id), seed=seed, verbose=0, **arguments)
        callback = _evaluation_callback(protocol, env_id, seed + TEST_SEED_OFFSET, client, run_id)
        model.learn(total_timesteps=protocol.frame_budget, callback=callback)
    except BaseException:
        client.set_terminated(run_id, "FAILED")
        raise
    if callback.last_frames != protocol.frame_budget:
        client.set_terminated(run_id, "FAILED")
        raise RuntimeError(f"{algorithm} stopped at {callback.last_frames} of {protocol.frame_budget} frames")
    client.set_terminated(run_id, "FINISHED")
    log.info(
        "%s on %s, seed %d: eval/return %.2f at %d frames",
        algorithm,
        env_id,
        seed,
        callback.last_return,
        protocol.frame_budget,
    )
    return callback.last_return


def _evaluation_callback(
    protocol: EvaluationProtocol, env_id: str, seed: int, client: Any, run_id: str
) -> Any:
    """An SB3 callback that evaluates at the protocol's frames and stops training at its budget."""
    import gymnasium as gym
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    class EvaluateAtFrames(BaseCallback):
        """Evaluate every ``frame_interval`` frames and at the budget; end ``learn`` at the budget.

        SB3 counts ``num_timesteps`` per environment step (one environment), so the frames match
        digideep's. PPO collects ``n_steps`` per rollout and would pass the budget: returning False
        at the budget stops it there.
        """

        def __init__(self) -> None:
            super().__init__()
            self.env = DummyVecEnv([lambda: Monitor(gym.make(env_id))])
            self.env.seed(seed)
            self.last_frames = 0
            self.last_return = float("nan")

        def _on_step(self) -> bool:
            frames = self.num_timesteps
            at_budget = frames >= protocol.frame_budget
            due = protocol.frame_interval > 0 and frames % protocol.frame_interval == 0
            if (due or at_budget) and frames > self.last_frames:
                returns, _ = evaluate_policy(
                    self.model,
                    self.env,
                    n_eval_episodes=protocol.episodes,
                    deterministic=True,
                    return_episode_rewards=True,
                )
                self.last_frames, self.last_return = frames, float(sum(returns) / len(returns))
                client.log_metric(run_id, RETURN_METRIC, self.last_return, int(time.time() * 1000), frames)
            return not at_budget

        def _on_training_end(self) -> None:
            self.env.close()

    return EvaluateAtFrames()
