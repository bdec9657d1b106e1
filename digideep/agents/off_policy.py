"""What the off-policy agents (DDPG, TD3, SAC) share: replay sampling, batch preparation and the loop
of gradient steps.

Each iteration the Runner stores a chunk of ``n_steps x num_workers`` transitions; :meth:`sample`
then draws ``updates_per_iteration`` minibatches of ``batch_size`` transitions in one call of the
memory's sampler, and :meth:`update` moves them to the device once and makes one gradient step per
minibatch: a call of the agent's :meth:`~OffPolicyAgent.gradient_step` (its update, written once) in
the agent's ``update_mode``. Metric tensors are gathered on the device and read once at the end.

Where the replay is sampled (``replay_device``): on the host, the numpy sampler
(:class:`~digideep.memory.UniformTransitions`) gathers from the RAM ring and :meth:`prepare` copies
the minibatches to the device; on the device, :class:`~digideep.memory.DeviceUniformTransitions`
draws the indices there and gathers from the memory's device mirror, which the store stage keeps
equal to the ring, so nothing crosses from host to device per iteration but the stored rows.
``auto`` samples on the device when the agent's device is not the CPU; on the CPU the RAM ring is
the mirror already, and the numpy sampler draws from it.

Where actions are computed (``acting_device``): the Explorer asks for one batch of ``W`` actions per
step, a forward pass of a few small layers; on a GPU that is a dozen kernel launches and a copy back,
all waited for, every step (docs/measurements.md gives the cost). With ``host`` the agent acts from a copy
of its policy on the CPU (:attr:`OffPolicyAgent.acting_policy`), refreshed from the trained policy at
the first action after an update or a load, so every action comes from the weights of the last
update, as on the device. ``auto`` acts on the host; on the CPU both are the policy itself.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from digideep.agents.base import AgentBase, PolicyBase
from digideep.agents.noise import NoiseBase
from digideep.agents.utils import BoxScaler, MetricAccumulator, to_torch
from digideep.errors import UsageError
from digideep.memory import DeviceUniformTransitions, Sampler, UniformTransitions

__all__ = ["ACTING_DEVICES", "REPLAY_DEVICES", "OffPolicyAgent", "Transitions", "bfloat16_speed_note"]

REPLAY_DEVICES = ("auto", "host", "device")
ACTING_DEVICES = ("auto", "host", "device")

log = logging.getLogger(__name__)


class Transitions(NamedTuple):
    """Minibatches of transitions on the device; the leading axis indexes gradient steps.

    Attributes:
        observations: ``(N, B, obs_dim) float32``.
        actions: ``(N, B, act_dim) float32`` in normalized ``[-1, 1]`` units.
        rewards: ``(N, B) float32``.
        next_observations: ``(N, B, obs_dim) float32``, the true next observation (final observation
            of an episode that ended in the transition).
        terminals: ``(N, B) float32``, 1.0 where the transition terminated (no bootstrap); truncated
            transitions have 0.0 and bootstrap from ``next_observations``.
    """

    observations: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_observations: torch.Tensor
    terminals: torch.Tensor


class OffPolicyAgent(AgentBase):
    """Base of replay-based agents with a Box action space.

    Args:
        name: agent name.
        session: the running session (its ``device`` is used).
        observation_space: single-env observation space (Box or Dict of Boxes).
        action_space: this agent's Box action space (finite bounds).
        gamma: discount factor.
        tau: Polyak coefficient of the target networks.
        batch_size: transitions per gradient step.
        updates_per_iteration: gradient steps per ``update()`` call (per stored chunk); the params files
            set it to ``n_steps * num_workers * updates_per_step`` (SB3: ``gradient_steps`` per ``train_freq``).
        learning_starts: transitions the memory must hold (all workers together) before learning starts:
            the chunk that brings it there is followed by a full ``update()``.
        hidden_sizes: hidden widths of actor and critics.
        data_parallel: wrap networks in ``torch.nn.DataParallel`` when several GPUs are visible.
        seed: seed of the sampler's generator (which transitions are drawn).
        precision: ``"float32"``, or ``"bfloat16"`` to run the hidden layers of the update under
            ``torch.autocast`` (output layers, losses, weights and optimizer stay float32); slightly
            noisier numerics. Faster only where the hardware multiplies bfloat16 natively (CPUs with
            AMX, CUDA GPUs of compute capability 8.0 or newer); elsewhere it is usually slower and the
            agent warns in one line (:func:`bfloat16_speed_note`).
        update_mode: how :meth:`gradient_step` runs: ``eager``, ``compile``, ``cudagraphs`` (CUDA) or
            ``auto`` (:meth:`auto_update_mode`); :mod:`digideep.agents.update_modes` says what each does.
        replay_device: where minibatches are drawn and gathered: ``host`` (numpy, from the RAM ring,
            then copied to the device), ``device`` (torch, on the agent's device, from the memory's
            device mirror; on the CPU that is the RAM ring itself) or ``auto`` (``device`` unless the
            agent runs on the CPU). The choice is :attr:`replay_device`, recorded as
            ``agents/<name>/resolved/replay_device``. The two draw different random streams.
        acting_device: where the Explorer's and the tests' actions are computed: ``host`` (a copy of the
            policy on the CPU, refreshed after each update; the CPU's random generator draws the
            exploration noise), ``device`` (the policy on the agent's device) or ``auto`` (``host``).
            On a CPU agent both are the policy itself. The choice is :attr:`acting_device`, recorded as
            ``agents/<name>/resolved/acting_device``.
        **params: passed to :class:`AgentBase` (unknown names raise).

    Subclasses set ``policy_frequency`` (gradient steps per actor step), build their networks and
    optimizers into :attr:`policy` (whose ``generate_actions`` gives normalized actions, and whose
    exploration noise, if any, is a :class:`~digideep.agents.noise.NoiseBase` made on :attr:`act_device`),
    and end their constructor with
    ``self._update = self.update_function(self.gradient_step, self.requested_update_mode)``.
    """

    policy_frequency: int = 1
    policy: PolicyBase
    _update: Callable[..., dict[str, torch.Tensor]]

    def __init__(
        self,
        name: str,
        session: Any,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        gamma: float = 0.99,
        tau: float = 0.005,
        batch_size: int = 256,
        updates_per_iteration: int = 1,
        learning_starts: int = 1000,
        hidden_sizes: Sequence[int] = (256, 256),
        data_parallel: bool = False,
        seed: int = 0,
        precision: str = "float32",
        update_mode: str = "auto",
        replay_device: str = "auto",
        acting_device: str = "auto",
        **params: Any,
    ) -> None:
        super().__init__(name, session, observation_space, action_space, **params)
        self.acting_device = resolve_acting_device(acting_device, name)
        self._host_policy: PolicyBase | None = None  # acting_policy's copy, built at the first action
        self._host_policy_stale = True
        self.requested_update_mode = update_mode
        _check_positive(batch_size=batch_size, updates_per_iteration=updates_per_iteration)
        if not 0.0 <= gamma <= 1.0 or not 0.0 < tau <= 1.0:
            raise ValueError(f"need 0 <= gamma <= 1 and 0 < tau <= 1, got gamma={gamma}, tau={tau}")
        self.scaler = BoxScaler(action_space, self.device)
        self._acting_scaler = (
            BoxScaler(action_space, self.act_device) if self._acts_from_copy else self.scaler
        )
        self.gamma = float(gamma)
        self.tau = float(tau)
        self.batch_size = int(batch_size)
        self.updates_per_iteration = int(updates_per_iteration)
        self.learning_starts = int(learning_starts)
        self.hidden_sizes = [int(h) for h in hidden_sizes]
        self.data_parallel = bool(data_parallel)
        if precision not in ("float32", "bfloat16"):
            raise ValueError(f"precision must be 'float32' or 'bfloat16', got {precision!r}")
        self.precision = precision
        if precision == "bfloat16":
            note = bfloat16_speed_note(self.device)
            if note:
                log.warning("agent '%s': %s", name, note)
        self.replay_device = resolve_replay_device(replay_device, self.device, name)
        self._batch_keys = self.batch_keys()
        self.sampler: Sampler = self.make_sampler(seed)

    def make_sampler(self, seed: int) -> Sampler:
        """The sampler of :attr:`replay_device`: ``updates_per_iteration`` minibatches of ``batch_size``
        transitions of :meth:`batch_keys` per call, drawn uniformly."""
        sizes = (self.batch_size, self.updates_per_iteration)
        if self.replay_device == "device":
            return DeviceUniformTransitions(*sizes, keys=self._batch_keys, seed=seed, device=self.device)
        return UniformTransitions(*sizes, keys=self._batch_keys, seed=seed)

    def resolved_settings(self) -> dict[str, str]:
        """The update mode, :attr:`replay_device` and :attr:`acting_device` (each ``host`` or
        ``device``) as they were decided."""
        return {
            **super().resolved_settings(),
            "replay_device": self.replay_device,
            "acting_device": self.acting_device,
        }

    # -- acting ----------------------------------------------------------------------------------
    @property
    def _acts_from_copy(self) -> bool:
        return self.acting_device == "host" and self.device.type != "cpu"

    @property
    def act_device(self) -> torch.device:
        """The CPU with ``acting_device: host``, else the agent's device."""
        return torch.device("cpu") if self.acting_device == "host" else self.device

    @property
    def acting_policy(self) -> PolicyBase:
        """The policy that acts: :attr:`policy`, or (``acting_device: host`` on a GPU) its copy on the CPU.

        The copy is made at the first action and refreshed from :attr:`policy` at the first action after
        an :meth:`update` or a :meth:`load_state_dict`, one copy of the policy's state from the device
        per iteration. A policy's noise process is shared with the copy, not copied (one state, the one
        checkpointed). Code that changes :attr:`policy`'s weights outside :meth:`update` calls
        :meth:`policy_changed`.
        """
        if not self._acts_from_copy:
            return self.policy
        if self._host_policy is None or self._host_policy_stale:
            # plain tensors, though the Explorer asks in inference mode: the copy outlives the request
            with torch.inference_mode(False), torch.no_grad():
                if self._host_policy is None:
                    self._host_policy = host_copy(self.policy)
                else:
                    self._host_policy.load_state_dict(self.policy.state_dict())
            self._host_policy_stale = False
        return self._host_policy

    def policy_changed(self) -> None:
        """Make the next action read :attr:`policy`'s weights again (a no-op unless acting from a copy)."""
        self._host_policy_stale = True

    def _act(
        self, obs: torch.Tensor, hidden: torch.Tensor, masks: torch.Tensor, deterministic: bool
    ) -> dict[str, Any]:
        out = self.acting_policy.generate_actions(obs, hidden, masks, deterministic)
        out["actions"] = self._acting_scaler.to_env(out["actions"]).reshape(-1, *self.scaler.shape)
        return out

    # -- keys ------------------------------------------------------------------------------------
    @property
    def action_key(self) -> str:
        return f"/agents/{self.name}/actions"

    def batch_keys(self) -> list[str]:
        """Trajectory keys a minibatch needs."""
        return [
            *self.obs.keys("/observations"),
            self.action_key,
            "/rewards",
            *self.obs.keys("/next_observations"),
            "/terminals",
        ]

    # -- Runner interface ------------------------------------------------------------------------
    def sample(self, memory: Any) -> dict[str, np.ndarray | torch.Tensor] | None:
        """``updates_per_iteration`` minibatches of ``batch_size`` transitions drawn uniformly.

        Returns:
            ``{key: (N, B, ...)}`` (plus ``/indices``): numpy arrays (``replay_device`` host) or tensors
            on the agent's device (``device``); None while the memory holds fewer than
            ``learning_starts`` transitions.
        """
        if int(memory.size) * int(memory.num_workers) < max(self.learning_starts, 1):
            return None
        return self.sampler(memory)

    def update(self, batches: Mapping[str, np.ndarray | torch.Tensor] | None) -> dict[str, float]:
        """One gradient step per minibatch of ``batches`` (``{key: (N, B, ...)}``); ``{}`` when None."""
        if batches is None:
            return {}
        data = self.prepare(batches)
        metrics = self.learn(data)
        self.iterations += 1
        self.policy_changed()
        return metrics

    def prepare(self, batches: Mapping[str, np.ndarray | torch.Tensor]) -> Transitions:
        """A sampled ``{key: (N, B, ...)}`` dict as :class:`Transitions` on the device: numpy arrays are
        copied there (:func:`~digideep.agents.utils.to_torch`), tensors already there are used as they are."""
        missing = [k for k in self._batch_keys if k not in batches]
        if missing:
            raise ValueError(f"agent '{self.name}': the batch lacks {missing}; sample it with agent.sample()")
        tensors = to_torch({k: batches[k] for k in self._batch_keys}, self.device)
        observations = self.obs.from_batch(tensors, "/observations")
        lead = observations.shape[:2]
        return Transitions(
            observations=observations,
            actions=self.scaler.to_normalized(tensors[self.action_key].reshape(*lead, -1).float()),
            rewards=tensors["/rewards"].reshape(lead).float(),
            next_observations=self.obs.from_batch(tensors, "/next_observations"),
            terminals=tensors["/terminals"].reshape(lead).float(),
        )

    def _stateful(self) -> dict[str, Any]:
        return {"sampler": self.sampler}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.policy_changed()

    def mixed_precision(self) -> contextlib.AbstractContextManager:
        """The autocast context of the update's forward passes (a no-op in float32)."""
        if self.precision == "float32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def learn(self, data: Transitions) -> dict[str, float]:
        """One gradient step per minibatch of ``data`` (its leading axis ``N``), in order.

        Returns:
            The mean of every metric over the steps that recorded it, read from the device once.
        """
        noise = self.step_noise(data)
        metrics = MetricAccumulator()
        for i in range(data.actions.shape[0]):
            batch = Transitions(*(field[i] for field in data))
            actor_step = self.updates % self.policy_frequency == 0
            metrics.add(**self._update(batch, None if noise is None else noise[i], actor_step=actor_step))
            self.updates += 1
        metrics.add(**self.learn_metrics())
        return metrics.result()

    def step_noise(self, data: Transitions) -> torch.Tensor | None:
        """``(N, ...)`` random draws of the ``N`` steps, drawn at once (None: the update draws none)."""
        del data
        return None

    def gradient_step(
        self, batch: Transitions, noise: torch.Tensor | None, *, actor_step: bool
    ) -> dict[str, torch.Tensor]:
        """One gradient step on one minibatch: the agent's update, written once (subclasses).

        Args:
            batch: ``(B, ...)`` tensors.
            noise: this step's slice of :meth:`step_noise`.
            actor_step: also step the actor (every ``policy_frequency`` gradient steps).

        Returns:
            ``{name: 0-d tensor}`` metrics, detached.
        """
        raise NotImplementedError

    def learn_metrics(self) -> dict[str, torch.Tensor]:
        """Metrics recorded once per :meth:`learn`, after its steps."""
        return {}

    def auto_update_mode(self) -> tuple[str, str]:
        """``("eager", why)`` on the CPU, ``("compile", why)`` on CUDA (docs/measurements.md gives the
        figures behind the rule). ``cudagraphs`` is never chosen: a capture fails on an update that
        reads a value to the host (``.item()``, a branch on a tensor), which an edit to a loss may add."""
        if self.device.type == "cuda":
            return "compile", "CUDA: compile fuses the step's small kernels; cudagraphs is opt-in"
        return "eager", "CPU: the step is bound by its matrix products, which compile runs slower than eager"


def bfloat16_speed_note(device: torch.device) -> str | None:
    """Why ``precision="bfloat16"`` will be slower than float32 on ``device``, or None if it should not.

    CUDA: bfloat16 tensor cores from compute capability 8.0 (Ampere). CPU: only AMX (``amx_bf16``)
    gives oneDNN a bfloat16 matmul that reliably beats float32 at these sizes; with ``avx512_bf16``
    alone it is likely slower (docs/measurements.md); without either, bfloat16 is emulated.
    """
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        if major >= 8:
            return None
        return f"bfloat16 will be slower than float32 on this GPU (compute capability {major}.{minor} < 8.0)"
    if device.type != "cpu":
        return None
    if torch.cpu._is_amx_tile_supported():
        return None
    capability = torch.backends.cpu.get_cpu_capability()
    if not torch.cpu._is_avx512_bf16_supported():
        return f"bfloat16 will be slower than float32 on this CPU ({capability}, no avx512_bf16 or amx_bf16: emulated)"
    return (
        f"bfloat16 is likely slower than float32 on this CPU ({capability}, avx512_bf16 but no amx_bf16); "
        "prefer precision='float32'"
    )


def resolve_replay_device(replay_device: str, device: torch.device, agent: str) -> str:
    """``host`` or ``device``: where an agent on ``device`` samples its replay (``auto``: ``device``
    unless ``device`` is the CPU, whose RAM ring is the mirror, drawn by the numpy sampler).

    Raises:
        UsageError: an unknown value.
    """
    _check_choice(agent, "replay_device", replay_device, REPLAY_DEVICES)
    if replay_device == "auto":
        return "host" if device.type == "cpu" else "device"
    return replay_device


def resolve_acting_device(acting_device: str, agent: str) -> str:
    """``host`` or ``device``: where an agent computes its actions (``auto``: ``host``, module doc).

    Raises:
        UsageError: an unknown value.
    """
    _check_choice(agent, "acting_device", acting_device, ACTING_DEVICES)
    return "host" if acting_device == "auto" else acting_device


def _check_choice(agent: str, name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise UsageError(
            f"agent '{agent}': {name} {value!r} is not one of {', '.join(choices)}; "
            "fix the agent's args in the params file"
        )


def host_copy(policy: PolicyBase) -> PolicyBase:
    """A copy of ``policy`` on the CPU for acting alone: no gradients, ``DataParallel`` unwrapped, and
    its :class:`~digideep.agents.noise.NoiseBase` attributes shared with ``policy`` rather than copied."""
    shared = {id(value): value for value in vars(policy).values() if isinstance(value, NoiseBase)}
    clone = copy.deepcopy(policy, shared)
    for module in list(clone.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.DataParallel):
                setattr(module, name, child.module)
    return clone.to("cpu").requires_grad_(False)


def _check_positive(**values: int) -> None:
    for key, value in values.items():
        if int(value) < 1:
            raise ValueError(f"{key} must be >= 1, got {value}")
