"""A Stable-Baselines3 reference cell: SB3's defaults under digideep's evaluation protocol.

A benchmark cell named ``sb3:SAC``, ``sb3:TD3`` or ``sb3:PPO`` trains that SB3 algorithm with its
own defaults (``MlpPolicy``, one environment), but for the knobs of :data:`SB3_KNOBS` the benchmark's
cpanel gives (``learning_starts``, ``batch_size``, ...), on the cell's environment and seed for
exactly the cell's frame budget, and evaluates its deterministic policy as digideep's runs are evaluated
(:mod:`digideep.pipeline.evaluation`): every ``frame_interval`` frames and at the budget, ``K``
episodes on a separate environment seeded ``seed + 10_000`` (as the test explorer), each evaluation
logged as ``eval/return`` at step = frames, with the three ``eval/*`` params. The run is tracked in
MLflow with the cell's tags, nested under the benchmark's parent run.

After each evaluation the cell saves a checkpoint (:mod:`digideep.benchmark.sb3_checkpoint`: SB3's
model with its optimizers, its replay buffer, every generator), keeping only the newest. A cell that
did not finish continues from its checkpoint in the same MLflow run, to exactly the frame budget; no
``eval/return`` step is logged twice, as a step the run holds already is not logged again. The run's
tag ``digideep.resumes`` counts how often it continued, and ``digideep.machine.<n>`` names the machine
of each attempt (:func:`~digideep.tracking.tags.machine_tag`). The episode that was running at the
checkpoint starts over (SB3 cannot save an environment mid-episode), so a continued cell is not the
run an uninterrupted one would have been. A cell without a checkpoint is trained again from the
start, its unfinished MLflow run deleted first, so the benchmark still ends with one run per cell.
SB3 is an optional dependency (the ``bench`` extra), imported when a cell runs.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from digideep.benchmark import records
from digideep.errors import UsageError
from digideep.pipeline.evaluation import RETURN_METRIC, EvaluationProtocol
from digideep.tracking.tags import RESUMES_TAG, machine_tag
from digideep.utility.machine import describe

if TYPE_CHECKING:  # (importing it imports torch, which checking a matrix does not need)
    from digideep.benchmark.sb3_checkpoint import CellCheckpoints, SavedCell

__all__ = [
    "PREFIX",
    "SB3_ALGORITHMS",
    "SB3_KNOBS",
    "check_sb3",
    "is_sb3",
    "sb3_arguments",
    "silence",
    "train_sb3_cell",
]

log = logging.getLogger(__name__)

PREFIX = "sb3:"
SB3_ALGORITHMS = ("SAC", "TD3", "PPO")
TEST_SEED_OFFSET = 10_000  # as the test explorer of the shipped parameter files (params/_common.py)
NUM_TIMESTEPS_TAG = "sb3.num_timesteps"
N_UPDATES_TAG = "sb3.n_updates"
"""Tags of a finished SB3 cell's run: SB3's own counts of frames trained and of updates made."""

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
    checkpoints: CellCheckpoints | None = None,
) -> float:
    """Train one SB3 cell to its frame budget, tracked as an MLflow run; its score (last ``eval/return``).

    With ``checkpoints`` the cell saves one after each evaluation, and a cell whose unfinished MLflow
    run has a checkpoint continues that run from it (its ``digideep.resumes`` tag raised by one) up to
    the budget. Any other unfinished run of the cell is deleted first and the cell trains from the
    start in a new run (tagged ``digideep.resumes`` 0). A finished cell leaves no checkpoint.

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
        checkpoints: the cell's checkpoints (:func:`~digideep.benchmark.sb3_checkpoint.cell_folder`);
            None keeps none, and an unfinished run is always trained again from the start.
    """
    check_sb3(algorithm)
    import gymnasium as gym
    import stable_baselines3
    import torch

    torch.set_num_threads(torch_threads)
    model_class = getattr(stable_baselines3, algorithm[len(PREFIX) :])
    arguments, knobs = sb3_arguments(algorithm, cpanel or {})
    params = {
        **protocol.mlflow_params(),
        "sb3/version": stable_baselines3.__version__,
        "cpanel/seed": str(seed),
        **{f"cpanel/{key}": str(value) for key, value in knobs.items()},
    }
    saved = checkpoints.latest() if checkpoints is not None else None
    name = f"{algorithm} {env_id} seed {seed}"
    with contextlib.closing(_evaluation_env(env_id)) as eval_env:
        run_id, resumes = _open_run(client, experiment_id, name, tags, params, saved)
        try:
            if saved is not None and resumes:
                model = checkpoints.load(saved, model_class, gym.make(env_id), eval_env)
                log.info(
                    "%s continues MLflow run %s from %s (resume %d)", name, run_id, saved.location, resumes
                )
            else:
                if checkpoints is not None:
                    checkpoints.clear()  # none, or one of a run that is gone: the cell starts over
                eval_env.seed(seed + TEST_SEED_OFFSET)
                model = model_class("MlpPolicy", gym.make(env_id), seed=seed, verbose=0, **arguments)
            silence(model)
            callback = _evaluation_callback(protocol, eval_env, client, run_id, checkpoints)
            model.learn(
                total_timesteps=protocol.frame_budget - model.num_timesteps,
                callback=callback,
                reset_num_timesteps=not resumes,
            )
        except BaseException:
            client.set_terminated(run_id, "FAILED")
            raise
    frames = int(model.num_timesteps)
    if frames != protocol.frame_budget or callback.last_frames != protocol.frame_budget:
        client.set_terminated(run_id, "FAILED")
        raise RuntimeError(f"{algorithm} stopped at {frames} of {protocol.frame_budget} frames")
    from mlflow.entities import RunTag

    counters = {NUM_TIMESTEPS_TAG: str(frames), N_UPDATES_TAG: str(model._n_updates)}
    client.log_batch(run_id, tags=[RunTag(k, v) for k, v in counters.items()])
    client.set_terminated(run_id, "FINISHED")
    if checkpoints is not None:
        checkpoints.clear()
    log.info("%s: eval/return %.2f at %d frames", name, callback.last_return, frames)
    return callback.last_return


def silence(model: Any) -> None:
    """Give an SB3 ``model`` a logger that writes nowhere: SB3's own makes an empty ``SB3-<time>``
    folder in the temp dir at every ``learn()``, even with ``verbose=0``."""
    from stable_baselines3.common.logger import Logger

    model.set_logger(Logger(folder=None, output_formats=[]))


def _open_run(
    client: Any,
    experiment_id: str,
    name: str,
    tags: Mapping[str, str],
    params: Mapping[str, str],
    saved: SavedCell | None,
) -> tuple[str, int]:
    """The cell's MLflow run and its resumes: the unfinished run ``saved`` belongs to, reopened with
    its ``digideep.resumes`` tag raised by one, else a new run (resumes 0); the cell's other
    unfinished runs are deleted, so that it ends with one run."""
    from mlflow.entities import Param

    runs = records.cell_runs(client, tags[records.NAME_TAG], tags) if records.NAME_TAG in tags else []
    continued = next(
        (r for r in runs if saved and r.info.run_id == saved.run_id and r.info.status != "FINISHED"), None
    )
    records.delete_unfinished(client, [r for r in runs if r is not continued])
    if continued is not None:
        run_id = continued.info.run_id
        resumes = int(continued.data.tags.get(RESUMES_TAG, "0")) + 1
        client.set_tag(run_id, RESUMES_TAG, str(resumes))
        client.set_tag(run_id, machine_tag(resumes), describe())
        client.update_run(run_id, status="RUNNING")
        return run_id, resumes
    if saved is not None:
        log.info(
            "%s: checkpoint %s belongs to no unfinished run of the cell; starting over", name, saved.location
        )
    run = client.create_run(
        experiment_id, run_name=name, tags={**tags, RESUMES_TAG: "0", machine_tag(0): describe()}
    )
    client.log_batch(run.info.run_id, params=[Param(k, v) for k, v in params.items()])
    return run.info.run_id, 0


def _evaluation_env(env_id: str) -> Any:
    """The evaluation environment: one Gymnasium env in SB3's ``DummyVecEnv``, episodes monitored."""
    import gymnasium as gym
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    return DummyVecEnv([lambda: Monitor(gym.make(env_id))])


def _evaluation_callback(
    protocol: EvaluationProtocol,
    eval_env: Any,
    client: Any,
    run_id: str,
    checkpoints: CellCheckpoints | None,
) -> Any:
    """An SB3 callback that evaluates at the protocol's frames, checkpoints after each evaluation
    and stops training at the budget."""
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy

    logged = {m.step: m.value for m in client.get_metric_history(run_id, RETURN_METRIC)}

    class EvaluateAtFrames(BaseCallback):
        """Evaluate every ``frame_interval`` frames and at the budget; end ``learn`` at the budget.

        SB3 counts ``num_timesteps`` per environment step (one environment), so the frames match
        digideep's. PPO collects ``n_steps`` per rollout and would pass the budget: returning False
        at the budget stops it there. A step the run holds already (logged before a crash, by the
        attempt this one continues) is evaluated but not logged again, and keeps its logged value.

        The checkpoint after an evaluation waits for the next rollout's start: SB3 calls the step's
        callback before it stores the step's transition and makes its gradient steps, and by the
        next rollout both are done.
        """

        def __init__(self) -> None:
            super().__init__()
            self.last_frames = 0
            self.last_return = float("nan")
            self.checkpoint_due = False

        def _on_training_start(self) -> None:
            self.last_frames = self.num_timesteps  # a continued cell evaluated up to its checkpoint

        def _on_step(self) -> bool:
            frames = self.num_timesteps
            at_budget = frames >= protocol.frame_budget
            due = protocol.frame_interval > 0 and frames % protocol.frame_interval == 0
            if (due or at_budget) and frames > self.last_frames:
                returns, _ = evaluate_policy(
                    self.model,
                    eval_env,
                    n_eval_episodes=protocol.episodes,
                    deterministic=True,
                    return_episode_rewards=True,
                )
                self.last_frames, self.last_return = frames, float(sum(returns) / len(returns))
                if frames in logged:
                    self.last_return = logged[frames]
                else:
                    client.log_metric(
                        run_id, RETURN_METRIC, self.last_return, int(time.time() * 1000), frames
                    )
                self.checkpoint_due = checkpoints is not None and not at_budget
            return not at_budget

        def _on_rollout_start(self) -> None:
            if self.checkpoint_due:
                checkpoints.save(self.model, eval_env, run_id)
                self.checkpoint_due = False

    return EvaluateAtFrames()
