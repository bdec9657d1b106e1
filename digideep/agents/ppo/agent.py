"""Proximal Policy Optimization (Schulman et al. 2017).

The update follows CleanRL's ``ppo_continuous_action.py``: GAE over the latest chunk (bootstrapping
through truncations from the true final observation, never across an episode end), then ``n_epochs``
passes of shuffled minibatches with the clipped surrogate, the (optionally clipped) value loss and
the entropy bonus, gradient-norm clipping and optional linear annealing of the learning rate and clip
range. A recurrent policy trains on whole worker sequences, replaying its GRU from the stored state.

The minibatch step is written once, :meth:`PPO.minibatch_step`: the loss of :mod:`.losses`, autograd's
gradient, the gradient-norm clip and Adam's step, a function of tensors that eager mode,
``torch.compile`` and CUDA graphs run unchanged (:mod:`digideep.agents.update_modes`). An edit to a
loss in :mod:`.losses` trains as written in every mode.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from digideep.agents.base import AgentBase
from digideep.agents.encoders import EncodedObservations, ObservationEncoder
from digideep.agents.ppo import losses
from digideep.agents.ppo.batches import Minibatch, Sequences, advantage_chunk, minibatches
from digideep.agents.ppo.flat_parameters import FlatParameters
from digideep.agents.ppo.numpy_acting import NumpyGaussianActing
from digideep.agents.ppo.policy import ActorCriticPolicy
from digideep.agents.update_modes import compiler_missing
from digideep.agents.utils import (
    MetricAccumulator,
    ObservationAdapter,
    adam_step,
    make_adam,
    to_torch,
)
from digideep.memory import LastChunk

__all__ = ["PPO", "Minibatch", "Sequences"]

log = logging.getLogger(__name__)


class PPO(AgentBase):
    """PPO for Box or Discrete action spaces.

    Args:
        name: the agent's name (its key in the trajectory, ``/agents/<name>/...``).
        session: what picks the agent's device (:class:`~digideep.agents.base.AgentSession`).
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
        update_mode: how :meth:`minibatch_step` runs (:mod:`~digideep.agents.update_modes`):
            ``eager``, ``compile``, ``cudagraphs`` (CUDA only) or ``auto`` (:meth:`auto_update_mode`
            says what it picks and why). ``compile`` specializes on the minibatch shape: its first
            update compiles (tens of seconds on the CPU, less from inductor's on-disk cache), and a
            trailing minibatch of another size compiles once more.

    The encoder follows the observation space: an image (``(C, H, W)``, e.g. Atari's stacked frames)
    gets a Nature CNN shared by actor and critic; a Dict of vectors is concatenated into the MLPs; a
    Dict with images gets a CNN per image and the vectors beside its features.

    A recurrent policy computes its sequence features inside :meth:`minibatch_step` (the GRU replayed
    over each whole sequence), so that the loss's gradient reaches the GRU through the one function in
    every mode; ``compile`` then unrolls the GRU's ``T`` steps into its graph (a compile that grows
    with the chunk length), which is why ``auto`` runs recurrent policies eagerly.
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
        update_mode: str = "auto",
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
        # the minibatch step, written once, run in the update mode (the same function in each)
        self._minibatch = self.update_function(self.minibatch_step, update_mode)
        self.optimizer = make_adam(
            [self.flat.param], self.lr, self.device, eps=adam_eps, capturable=self.update_mode == "cudagraphs"
        )
        # the learning rate as a tensor that annealing fills in place: compiled code and CUDA graphs read
        # it without recompiling or recapturing (fused Adam takes a tensor learning rate)
        self._lr = torch.tensor(self.lr, device=self.device) if self.optimizer.defaults["fused"] else None
        # acting in NumPy on views of the parameters where it applies (numpy_acting.py says why), with
        # its own noise generator, seeded from torch's so that the run's seed fixes it
        self.acting_rng = np.random.Generator(np.random.PCG64(int(torch.randint(2**62, ()))))
        self._numpy_acting = NumpyGaussianActing.build(
            self.policy, [self.flat.param, *self.flat.params], self.acting_rng
        )
        self.sampler = LastChunk()

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
        self._set_lr(lr)

        data = self._prepare(batches)
        metrics = MetricAccumulator()
        clip_range = torch.tensor(clip, device=self.device)  # a tensor: annealing recompiles nothing
        for _ in range(self.n_epochs):
            log_ratios = [
                self._step(batch, clip_range, sequences, metrics)
                for batch, sequences in minibatches(
                    data, self.batch_size, self.policy.recurrent, self.normalize_advantage
                )
            ]
            if self._epoch_end(log_ratios, clip, metrics):
                break
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
        """:func:`~.batches.advantage_chunk` of the chunk ``{key: (W, T + 1, ...)}``."""
        missing = [k for k in self.batch_keys() if k not in batches]
        if missing:
            raise ValueError(f"agent '{self.name}': the chunk lacks {missing}; sample it with agent.sample()")
        tensors = to_torch({k: batches[k] for k in self.batch_keys()}, self.device)
        return advantage_chunk(tensors, self.obs, self.policy, self._key(""), self.gamma, self.gae_lambda)

    def _set_lr(self, lr: float) -> None:
        """The learning rate of the next steps; a tensor learning rate is filled in place."""
        if self._lr is not None:
            self._lr.fill_(lr)
        for group in self.optimizer.param_groups:  # a loaded optimizer state brings its own
            group["lr"] = lr if self._lr is None else self._lr

    def _step(
        self,
        batch: Minibatch,
        clip_range: torch.Tensor,
        sequences: Sequences | None,
        metrics: MetricAccumulator,
    ) -> torch.Tensor:
        """:meth:`minibatch_step` in the update mode; its metrics go to ``metrics``, its log-ratios back."""
        out = self._minibatch(batch, clip_range, sequences)
        self.updates += 1
        metrics.add(
            **{
                "losses/policy_loss": out["policy_loss"],
                "losses/value_loss": out["value_loss"],
                "losses/entropy": out["entropy"],
            }
        )
        return out["log_ratio"]

    def minibatch_step(
        self, batch: Minibatch, clip_range: torch.Tensor, sequences: Sequences | None = None
    ) -> dict[str, torch.Tensor]:
        """One minibatch gradient step (CleanRL's inner loop), the only derivation of PPO's gradients.

        The loss of :meth:`_loss` (the functions of :mod:`.losses`), its gradient by autograd with
        respect to every policy parameter, the global gradient-norm clip on the flat gradient, and
        Adam's step on the flat parameter. Eager mode, ``torch.compile`` and CUDA graphs run this same
        function (the agent calls it through ``self._minibatch``).

        Args:
            batch: the minibatch, ``B`` rows each (advantages already normalized).
            clip_range: 0-d float32 tensor on the agent's device, the current clip range (a tensor, so
                that annealing it recompiles and recaptures nothing).
            sequences: for a recurrent policy, the GRU state and masks its ``W`` sequences replay from
                (``batch`` holds their rows worker-major); None for a feed-forward one.

        Returns:
            0-d ``policy_loss``, ``value_loss`` and ``entropy`` (the minibatch mean), and ``log_ratio``
            ``(B,)``, for the epoch's clip fraction and approximate KL; all detached.
        """
        if sequences is None:
            features = self.policy.encode(batch.observations)  # the shared trunk (a CNN), or the observations
        else:
            observations = batch.observations.unflatten(0, (sequences.hidden.shape[0], -1))
            features = self.policy.sequence_features(observations, sequences.hidden, sequences.masks)
            features = features.flatten(0, 1)
        loss, pg_loss, v_loss, entropy, log_ratio = self._loss(features, batch, clip_range)
        # a parameter that an edited loss no longer reaches gets a zero gradient
        grads = torch.autograd.grad(loss, self.flat.params, allow_unused=True, materialize_grads=True)
        grad = torch.cat([g.reshape(-1) for g in grads])
        if self.max_grad_norm is not None:  # clip_grad_norm_'s formula on the one flat gradient
            grad = grad * (self.max_grad_norm / (torch.linalg.vector_norm(grad) + 1e-6)).clamp(max=1.0)
        adam_step(self.optimizer, [grad])  # outside compiled graphs (utils.adam_step says why)
        return {"policy_loss": pg_loss, "value_loss": v_loss, "entropy": entropy, "log_ratio": log_ratio}

    def _loss(
        self, features: torch.Tensor, batch: Minibatch, clip: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The minibatch loss of :mod:`.losses` at ``(B, F)`` policy inputs and, detached, its policy
        and value parts, the mean entropy and the ``(B,)`` log-ratios."""
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

    def auto_update_mode(self) -> tuple[str, str]:
        """What ``update_mode="auto"`` runs (see :meth:`AgentBase.auto_update_mode`).

        - a recurrent policy: eager (compile would unroll the GRU over every whole sequence);
        - a CNN policy (image observations), or heads in DataParallel: eager (no benchmark shows
          compile faster for them);
        - CUDA: compile (inductor fuses the step's many small kernels);
        - the CPU with a C++ compiler: compile, faster than eager in frames/s, updates included
          (``bench/bench_agents.py --only ppo``; docs/measurements.md gives the figures), after a
          first update that compiles for tens of seconds; without a compiler, eager;
        - anything else: eager.
        """
        if self.policy.recurrent:
            return "eager", "a recurrent policy: compile would unroll the GRU over each whole sequence"
        if self.policy.encoder is not None:
            return "eager", "a CNN policy: no benchmark shows compile faster for it"
        if any(isinstance(module, torch.nn.DataParallel) for module in self.policy.children()):
            return "eager", "DataParallel heads: no benchmark shows compile faster with them"
        if self.device.type == "cuda":
            return "compile", "CUDA: inductor fuses the step's small kernels; cudagraphs is opt-in"
        if self.device.type != "cpu":
            return "eager", f"no benchmark shows compile faster on {self.device.type}"
        if compiler_missing():
            return "eager", "compile would need a C++ compiler (set $CXX, or install g++ or clang++)"
        return "compile", (
            "CPU: compile runs PPO's small networks faster than eager (bench_agents.py); "
            "its first update compiles for tens of seconds"
        )

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
        """Restore :meth:`state_dict`."""
        super().load_state_dict(state)
        self.acting_rng.bit_generator.state = state["acting_rng"]
