"""Proximal Policy Optimization (Schulman et al. 2017).

The update follows CleanRL's ``ppo_continuous_action.py``: GAE over the latest chunk (bootstrapping
through truncations from the true final observation, never across an episode end), then ``n_epochs``
passes of shuffled minibatches with the clipped surrogate, the (optionally clipped) value loss and
the entropy bonus, gradient-norm clipping and optional linear annealing of the learning rate and clip
range. A recurrent policy trains on whole worker sequences, replaying its GRU from the stored state.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from digideep.agents.base import AgentBase
from digideep.agents.networks import EncodedObservations, ObservationEncoder
from digideep.agents.ppo import losses
from digideep.agents.ppo.analytic_gradients import AnalyticGaussianStep
from digideep.agents.ppo.flat_parameters import FlatParameters, merge_optimizer_state
from digideep.agents.ppo.numpy_acting import NumpyGaussianActing
from digideep.agents.ppo.policy import ActorCriticPolicy
from digideep.agents.utils import (
    MetricAccumulator,
    ObservationAdapter,
    adam_step,
    make_adam,
    overrides,
    to_torch,
)
from digideep.memory import LastChunk

__all__ = ["PPO", "Minibatch"]

log = logging.getLogger(__name__)


class Minibatch(NamedTuple):
    """Transitions of a PPO minibatch (or, stacked, of a whole chunk), ``B`` rows each.

    Attributes:
        observations: ``(B, obs_dim)`` float32, or uint8 for images (scaled on the device by the CNN).
        actions: ``(B, *act_shape)`` float32 (Box) or ``(B,)`` int64 (Discrete).
        log_probs: ``(B,)`` log-probabilities of the actions when they were taken.
        values: ``(B,)`` value estimates when they were taken.
        advantages: ``(B,)`` GAE advantages.
        returns: ``(B,)`` ``advantages + values``, the value targets.
    """

    observations: torch.Tensor
    actions: torch.Tensor
    log_probs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor


class PPO(AgentBase):
    """PPO for Box or Discrete action spaces.

    Args:
        name: the agent's name (its key in the trajectory, ``/agents/<name>/...``).
        session: the run's Session (device, paths).
        observation_space: the single-environment observation space.
        action_space: this agent's action space.
        lr: Adam learning rate (3e-4 in SB3 and CleanRL).
        n_epochs: passes over each chunk (10).
        batch_size: transitions per minibatch (64); recurrent policies round it to whole sequences.
        gamma: discount (0.99).
        gae_lambda: GAE lambda (0.95).
        clip_range: surrogate clip (0.2).
        clip_value_loss: clip the value loss with ``clip_range`` (CleanRL: True; SB3: no clipping).
        ent_coef: entropy bonus coefficient (0.0).
        vf_coef: value loss coefficient on ``0.5 mean((V - R)^2)`` (CleanRL 0.5; SB3's ``vf_coef`` 0.5 on
            ``mean((V - R)^2)`` equals 1.0 here).
        max_grad_norm: global gradient-norm clip (0.5).
        normalize_advantage: normalize advantages per minibatch.
        target_kl: stop the epochs early once an epoch's approximate KL exceeds it (None: never).
        anneal_lr: decay the learning rate linearly to 0 over ``total_iterations`` updates.
        anneal_clip: decay the clip range likewise (SB3 zoo ``clip_range: lin_0.2``).
        total_iterations: ``update()`` calls in the whole run, for annealing.
        hidden_sizes: widths of actor and critic (64, 64); after a CNN trunk, ``[]`` gives CleanRL's
            linear heads.
        activation: hidden activation (tanh).
        log_std_init: initial Gaussian log-std.
        ortho_init: orthogonal initialization.
        recurrent: use a GRU policy.
        recurrent_size: GRU state size.
        adam_eps: Adam epsilon (1e-5 in SB3 and CleanRL).
        data_parallel: wrap the heads in ``torch.nn.DataParallel`` when several GPUs are visible.
        cnn_features: features of the Nature CNN that image observations get (512).
        torch_compile: compile the minibatch loss, forward and backward, with ``torch.compile``, and
            train it with autograd. Off by default: the compiled kernels are not bit-identical to
            eager ones. At HalfCheetah sizes on one CPU thread PPO's frames/s rose 1.24x to 1.32x over
            eager autograd, after a first update that compiles for about 16 s (7 s from inductor's
            on-disk cache), but stayed below the analytic gradients (about 0.75x), which it turns
            off. On the CPU it needs a C++ compiler (``$CXX``, ``g++`` or ``clang++``).
        analytic_gradients: on the CPU, step feed-forward Gaussian MLP policies with the loss's
            gradients written out by hand (:mod:`.analytic_gradients`) instead of autograd: the same
            loss and gradients up to float rounding, and an update 2.4x faster at HalfCheetah sizes.
            Other policies, and a subclass that overrides ``_loss``, train with autograd.

    The encoder follows the observation space: an image (``(C, H, W)``, e.g. Atari's stacked frames)
    gets a Nature CNN shared by actor and critic; a Dict of vectors is concatenated into the MLPs; a
    Dict with images gets a CNN per image and the vectors beside its features.
    """

    def __init__(
        self,
        name: str,
        session: Any,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        lr: float = 3e-4,
        n_epochs: int = 10,
        batch_size: int = 64,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        clip_range: float = 0.2,
        clip_value_loss: bool = True,
        ent_coef: float = 0.0,
        vf_coef: float = 0.5,
        max_grad_norm: float | None = 0.5,
        normalize_advantage: bool = True,
        target_kl: float | None = None,
        anneal_lr: bool = False,
        anneal_clip: bool = False,
        total_iterations: int | None = None,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "tanh",
        log_std_init: float = 0.0,
        ortho_init: bool = True,
        recurrent: bool = False,
        recurrent_size: int = 64,
        adam_eps: float = 1e-5,
        data_parallel: bool = False,
        cnn_features: int = 512,
        torch_compile: bool = False,
        analytic_gradients: bool = True,
    ) -> None:
        super().__init__(name, session, observation_space, action_space)
        if n_epochs < 1 or batch_size < 1:
            raise ValueError(f"n_epochs and batch_size must be >= 1, got {n_epochs} and {batch_size}")
        if (anneal_lr or anneal_clip) and not total_iterations:
            raise ValueError("anneal_lr / anneal_clip need total_iterations (the number of update() calls)")
        self.lr, self.n_epochs, self.batch_size = float(lr), int(n_epochs), int(batch_size)
        self.gamma, self.gae_lambda = float(gamma), float(gae_lambda)
        self.clip_range, self.clip_value_loss = float(clip_range), bool(clip_value_loss)
        self.ent_coef, self.vf_coef = float(ent_coef), float(vf_coef)
        self.max_grad_norm = max_grad_norm
        self.normalize_advantage = bool(normalize_advantage)
        self.target_kl = target_kl
        self.anneal_lr, self.anneal_clip = bool(anneal_lr), bool(anneal_clip)
        self.total_iterations = int(total_iterations or 0)
        encoder = (
            ObservationEncoder(self.obs, cnn_features) if isinstance(self.obs, EncodedObservations) else None
        )
        self.policy = ActorCriticPolicy(
            self.obs.dim,
            action_space,
            hidden_sizes,
            activation,
            log_std_init,
            ortho_init,
            recurrent,
            recurrent_size,
            encoder,
        ).to(self.device)
        if data_parallel and not recurrent:
            self.policy.parallelize(
                ["actor", "critic"] if encoder is None else ["encoder", "actor", "critic"]
            )
        self.hidden_size = self.policy.recurrent_size
        # one flat tensor for Adam and the gradient clip (flat_parameters.py says why)
        self.flat = FlatParameters(self.policy)
        self.optimizer = make_adam([self.flat.param], self.lr, self.device, eps=adam_eps)
        # acting in NumPy on views of the parameters where it applies (numpy_acting.py says why), with
        # its own noise generator, seeded from torch's so that the run's seed fixes it
        self.acting_rng = np.random.Generator(np.random.PCG64(int(torch.randint(2**62, ()))))
        self._numpy_acting = NumpyGaussianActing.build(
            self.policy, [self.flat.param, *self.flat.params], self.acting_rng
        )
        self.sampler = LastChunk()
        self.torch_compile = bool(torch_compile)
        self._minibatch_loss: Callable[..., tuple[torch.Tensor, ...]] = self._loss
        if self.torch_compile:
            _check_compiler(self.device)
            # a fixed minibatch shape; the clip range comes as a tensor so that annealing it recompiles nothing
            self._minibatch_loss = torch.compile(self._loss, dynamic=False)
        # the hand-written gradients of _loss, where they apply (analytic_gradients.py says why)
        self._analytic = None
        if (
            analytic_gradients
            and not self.torch_compile
            and self.device.type == "cpu"
            and not overrides(type(self), PPO, "_loss")
        ):
            self._analytic = AnalyticGaussianStep.build(
                self.policy, self.vf_coef, self.ent_coef, self.clip_value_loss
            )

    def _observation_adapter(self, observation_space: gym.Space) -> ObservationAdapter:
        """Images get a CNN encoder (:class:`EncodedObservations`); vectors the plain adapter."""
        if ObservationEncoder.needed(observation_space):
            return EncodedObservations(observation_space)
        return ObservationAdapter(observation_space)

    # -- keys ------------------------------------------------------------------------------------
    def _key(self, leaf: str) -> str:
        return f"/agents/{self.name}/{leaf}"

    def batch_keys(self) -> list[str]:
        """Trajectory keys the update reads from a chunk."""
        return [
            *self.obs.keys("/observations"),
            *self.obs.keys("/next_observations"),
            "/masks",
            "/rewards",
            "/terminals",
            "/truncations",
            self._key("actions"),
            self._key("hidden_state"),
            self._key("artifacts/values"),
            self._key("artifacts/action_log_probs"),
        ]

    # -- acting ----------------------------------------------------------------------------------
    def action_generator(
        self,
        observations: Any,
        hidden_state: np.ndarray,
        masks: np.ndarray,
        deterministic: bool = False,
    ) -> dict[str, Any]:
        """Actions for one step of every worker (see :meth:`AgentBase.action_generator`).

        A feed-forward Gaussian policy on the CPU acts in NumPy (:mod:`.numpy_acting`); the others in torch.
        """
        if self._numpy_acting is None or isinstance(observations, Mapping):
            return super().action_generator(observations, hidden_state, masks, deterministic)
        artifacts = self._numpy_acting(observations, deterministic)
        return {"actions": artifacts.pop("actions"), "hidden_state": hidden_state, "artifacts": artifacts}

    def _act(
        self, obs: torch.Tensor, hidden: torch.Tensor, masks: torch.Tensor, deterministic: bool
    ) -> dict[str, Any]:
        return self.policy.generate_actions(obs, hidden, masks, deterministic)

    def _random_artifacts(
        self, obs: torch.Tensor, hidden: torch.Tensor, masks: torch.Tensor, actions: torch.Tensor
    ) -> dict[str, Any]:
        features, next_hidden = self.policy.features(obs, hidden, masks)
        log_prob, _ = self.policy.log_prob_entropy(self.policy.distribution(features), actions)
        values = self.policy.value(features)
        artifacts = {"values": values.unsqueeze(-1), "action_log_probs": log_prob.unsqueeze(-1)}
        return {"actions": actions, "hidden_state": next_hidden, "artifacts": artifacts}

    # -- learning --------------------------------------------------------------------------------
    def sample(self, memory: Any) -> dict[str, np.ndarray]:
        """The latest chunk of a :class:`~digideep.memory.RolloutMemory`: ``{key: (W, T + 1, ...)}``."""
        return self.sampler(memory)

    def update(self, batches: Mapping[str, np.ndarray] | None) -> dict[str, float]:
        """GAE on the chunk ``{key: (W, T + 1, ...)}``, then epochs of minibatch steps."""
        if batches is None:
            return {}
        progress_left = 1.0
        if self.total_iterations:
            progress_left = max(0.0, 1.0 - self.iterations / self.total_iterations)
        lr = self.lr * progress_left if self.anneal_lr else self.lr
        clip = self.clip_range * progress_left if self.anneal_clip else self.clip_range
        for group in self.optimizer.param_groups:
            group["lr"] = lr

        data = self._prepare(batches)
        metrics = MetricAccumulator()
        if self.policy.recurrent:
            self._epochs_recurrent(data, clip, metrics)
        else:
            self._epochs_flat(data, clip, metrics)
        if self._numpy_acting is not None:
            self._numpy_acting.parameters_changed()
        returns, old_values = data["returns"], data["values"]
        explained = 1.0 - (returns - old_values).var() / returns.var().clamp_min(1e-8)
        metrics.add(
            **{
                "losses/explained_variance": explained,
                "charts/learning_rate": torch.tensor(lr, device=self.device),
            }
        )
        if not self.policy.discrete:
            metrics.add(**{"charts/action_std": self.policy.log_std.detach().exp().mean()})
        self.iterations += 1
        return metrics.result()

    def _prepare(self, batches: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
        """Tensors of the chunk (rows ``:T``) with advantages and returns, all ``(W, T, ...)``."""
        missing = [k for k in self.batch_keys() if k not in batches]
        if missing:
            raise ValueError(f"agent '{self.name}': the chunk lacks {missing}; sample it with agent.sample()")
        t = to_torch({k: batches[k] for k in self.batch_keys()}, self.device)
        obs = self.obs.from_batch(t, "/observations")
        num_steps = obs.shape[1] - 1
        if num_steps < 1:
            raise ValueError("PPO needs a chunk of at least one step plus the final prestep")
        masks = t["/masks"].float().reshape(*obs.shape[:2], 1)
        hidden = t[self._key("hidden_state")].float()
        values = t[self._key("artifacts/values")].float().reshape(obs.shape[:2])
        flags = {
            k: t[f"/{k}"][:, :num_steps].float().reshape(-1, num_steps)
            for k in ("rewards", "terminals", "truncations")
        }
        with torch.no_grad():
            if torch.isnan(values[:, -1]).any():  # no final action: evaluate the final prestep here
                features, _ = self.policy.features(obs[:, -1], hidden[:, -1], masks[:, -1])
                values = torch.cat([values[:, :-1], self.policy.value(features).unsqueeze(-1)], dim=1)
            next_values = torch.zeros_like(flags["rewards"])
            truncated = flags["truncations"] > 0
            if truncated.any():
                next_obs = self.obs.from_batch(t, "/next_observations")[:, :num_steps][truncated]
                # the state after acting at row t is the one stored at row t + 1 (no reset: mask 1)
                after = hidden[:, 1:][truncated]
                features, _ = self.policy.features(next_obs, after, torch.ones_like(after[:, :1]))
                next_values[truncated] = self.policy.value(features)
            advantages, returns = losses.gae(
                flags["rewards"],
                values,
                next_values,
                flags["terminals"],
                flags["truncations"],
                masks[:, 1:, 0],
                self.gamma,
                self.gae_lambda,
            )
        actions = t[self._key("actions")][:, :num_steps]
        return {
            "observations": obs[:, :num_steps],
            "masks": masks[:, :num_steps],
            "hidden": hidden[:, 0],
            "actions": actions if self.policy.discrete else actions.float(),
            "log_probs": t[self._key("artifacts/action_log_probs")][:, :num_steps]
            .float()
            .reshape(-1, num_steps),
            "values": values[:, :num_steps],
            "advantages": advantages,
            "returns": returns,
        }

    def _epochs_flat(self, data: dict[str, torch.Tensor], clip: float, metrics: MetricAccumulator) -> None:
        flat = Minibatch(*(data[k].reshape(-1, *data[k].shape[2:]) for k in Minibatch._fields))
        size, batch_size = flat.observations.shape[0], self.batch_size
        for _ in range(self.n_epochs):
            order = torch.randperm(size, device=self.device)
            shuffled = Minibatch(*(x[order] for x in flat))
            if self.normalize_advantage:
                advantages = losses.normalize_per_minibatch(shuffled.advantages, batch_size)
                shuffled = shuffled._replace(advantages=advantages)
            log_ratios = []
            for parts in zip(*(x.split(batch_size) for x in shuffled), strict=True):
                batch = Minibatch(*parts)
                features = self.policy.encode(batch.observations)  # the shared trunk, once per minibatch
                log_ratios.append(self._step(features, batch, clip, metrics))
            if self._epoch_end(log_ratios, clip, metrics):
                break

    def _epochs_recurrent(
        self, data: dict[str, torch.Tensor], clip: float, metrics: MetricAccumulator
    ) -> None:
        num_workers, num_steps = data["masks"].shape[:2]
        per_batch = min(num_workers, max(1, self.batch_size // num_steps))
        for _ in range(self.n_epochs):
            order = torch.randperm(num_workers, device=self.device)
            log_ratios = []
            for start in range(0, num_workers, per_batch):
                rows = order[start : start + per_batch]
                features = self.policy.sequence_features(
                    data["observations"][rows], data["hidden"][rows], data["masks"][rows]
                )
                batch = Minibatch(*(data[k][rows].reshape(-1, *data[k].shape[2:]) for k in Minibatch._fields))
                if self.normalize_advantage:
                    advantages = losses.normalize_per_minibatch(batch.advantages, batch.advantages.shape[0])
                    batch = batch._replace(advantages=advantages)
                log_ratios.append(self._step(features.reshape(-1, features.shape[-1]), batch, clip, metrics))
            if self._epoch_end(log_ratios, clip, metrics):
                break

    def _step(
        self, features: torch.Tensor, batch: Minibatch, clip: float, metrics: MetricAccumulator
    ) -> torch.Tensor:
        """One minibatch gradient step (CleanRL's inner loop); advantages already normalized.

        Args:
            features: ``(B, F)`` policy inputs (the observations, or the GRU's outputs).
            batch: the minibatch, ``(B, ...)`` each.
            clip: the current clip range.
            metrics: where the losses go.

        Returns:
            ``(B,)`` detached log-ratios, for the epoch's clip fraction and approximate KL.
        """
        if self._analytic is not None:  # writes the gradients itself
            _, pg_loss, v_loss, entropy, log_ratio = self._analytic(features, batch, clip)
        else:
            clip_range = torch.tensor(clip, device=self.device) if self.torch_compile else clip
            loss, pg_loss, v_loss, entropy, log_ratio = self._minibatch_loss(features, batch, clip_range)
            self.flat.zero_grad()
            loss.backward()
        if self.max_grad_norm is not None:  # clip_grad_norm_'s formula on the one flat gradient (3x cheaper)
            grad = self.flat.param.grad
            grad.mul_((self.max_grad_norm / (torch.linalg.vector_norm(grad) + 1e-6)).clamp_(max=1.0))
        adam_step(self.optimizer, [self.flat.param.grad])
        self.updates += 1
        metrics.add(**{"losses/policy_loss": pg_loss, "losses/value_loss": v_loss, "losses/entropy": entropy})
        return log_ratio

    def _loss(
        self, features: torch.Tensor, batch: Minibatch, clip: float | torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The minibatch loss and, detached, its policy and value parts, the mean entropy and the
        ``(B,)`` log-ratios (what ``torch_compile`` compiles)."""
        log_probs, entropy = self.policy.log_prob_entropy(self.policy.distribution(features), batch.actions)
        values = self.policy.value(features)
        pg_loss, log_ratio = losses.policy_loss(log_probs, batch.log_probs, batch.advantages, clip)
        v_loss = losses.value_loss(
            values, batch.values, batch.returns, clip if self.clip_value_loss else None
        )
        loss = pg_loss + self.vf_coef * v_loss
        if self.ent_coef:
            loss = loss + self.ent_coef * losses.entropy_loss(entropy)
        return loss, pg_loss.detach(), v_loss.detach(), entropy.detach().mean(), log_ratio

    def _epoch_end(self, log_ratios: list[torch.Tensor], clip: float, metrics: MetricAccumulator) -> bool:
        """Record the epoch's clip fraction and approximate KL; True to stop early (``target_kl``).

        Reads one number from the device per epoch, and only with ``target_kl`` set.
        """
        clip_fraction, approx_kl = losses.ratio_stats(torch.cat(log_ratios), clip)
        metrics.add(**{"losses/clipfrac": clip_fraction, "losses/approx_kl": approx_kl})
        return self.target_kl is not None and float(approx_kl) > self.target_kl

    # -- state -----------------------------------------------------------------------------------
    def _stateful(self) -> dict[str, Any]:
        return {"policy": self.policy, "optimizer": self.optimizer}

    def state_dict(self) -> dict[str, Any]:
        """Networks, optimizer, counters and the state of the acting noise generator."""
        return {**super().state_dict(), "acting_rng": self.acting_rng.bit_generator.state}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`.

        Checkpoints from before the flat parameter buffer (optimizer state per parameter) and before
        the acting generator (no ``acting_rng``: the generator keeps its seed) load too.
        """
        state = dict(state)
        if "optimizer" in state:
            state["optimizer"] = merge_optimizer_state(state["optimizer"], self.flat.params)
        super().load_state_dict(state)
        if "acting_rng" in state:
            self.acting_rng.bit_generator.state = state["acting_rng"]


def _check_compiler(device: torch.device) -> None:
    """Refuse ``torch_compile`` in one line where inductor cannot build its CPU kernels."""
    if device.type != "cpu":
        return
    if not any(shutil.which(c) for c in (os.environ.get("CXX", ""), "g++", "clang++") if c):
        raise ValueError(
            "PPO torch_compile=True needs a C++ compiler on the CPU (set $CXX, or install g++ or clang++); "
            "or set torch_compile to false"
        )
