"""Bases of agents and policies (shared helpers: :mod:`digideep.agents.utils`).

An agent (:class:`AgentBase`) owns a policy (:class:`PolicyBase`), its optimizers and a sampler. The
Explorer calls :meth:`AgentBase.action_generator` every step; the Runner calls
:meth:`AgentBase.sample` and :meth:`AgentBase.update` every iteration. See ``docs/architecture.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from digideep.agents.update_modes import check_update_mode, in_mode
from digideep.agents.utils import ObservationAdapter, Observations

__all__ = ["AgentBase", "AgentSession", "OnDevice", "PolicyBase"]

log = logging.getLogger(__name__)


class PolicyBase(nn.Module):
    """A policy: the networks that map observations to actions.

    Subclasses implement :meth:`generate_actions`. With several GPUs, :meth:`parallelize` wraps the
    named sub-networks in ``torch.nn.DataParallel``; :meth:`state_dict` still returns the plain
    names (no ``module.`` segments), so a checkpoint loads on a CPU-only machine.
    """

    def generate_actions(
        self,
        observations: torch.Tensor,
        hidden_state: torch.Tensor,
        masks: torch.Tensor,
        deterministic: bool,
    ) -> dict[str, Any]:
        """Actions for a batch of workers.

        Args:
            observations: ``(W, obs_dim) float32``.
            hidden_state: ``(W, h) float32``.
            masks: ``(W, 1) float32``, 0.0 where a new episode starts.
            deterministic: act greedily (no exploration noise).

        Returns:
            ``{"actions": (W, ...), "hidden_state": (W, h), "artifacts": {name: (W, ...)}}`` tensors.
        """
        raise NotImplementedError

    def parallelize(self, names: Iterable[str], force: bool = False) -> None:
        """Wrap the sub-networks ``names`` in ``torch.nn.DataParallel`` when several GPUs are visible.

        Args:
            names: attribute names of sub-networks whose first input and output are batch-first.
            force: wrap even with fewer than two GPUs (DataParallel then calls the module directly).
        """
        if not force and torch.cuda.device_count() < 2:
            return
        for name in names:
            module = getattr(self, name)
            if not isinstance(module, nn.DataParallel):
                setattr(self, name, nn.DataParallel(module))

    def unwrapped(self, name: str) -> nn.Module:
        """The sub-network ``name`` without its DataParallel wrapper."""
        module = getattr(self, name)
        return module.module if isinstance(module, nn.DataParallel) else module

    def _parallel_prefixes(self) -> list[str]:
        return [f"{name}." for name, m in self.named_children() if isinstance(m, nn.DataParallel)]

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        state = super().state_dict(*args, **kwargs)
        for prefix in self._parallel_prefixes():
            wrapped = prefix + "module."
            state = type(state)(
                (prefix + key[len(wrapped) :] if key.startswith(wrapped) else key, value)
                for key, value in state.items()
            )
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False):  # type: ignore[override]
        prefixes = self._parallel_prefixes()
        if prefixes:
            renamed = {}
            for key, value in state_dict.items():
                prefix = next((p for p in prefixes if key.startswith(p)), None)
                renamed[prefix + "module." + key[len(prefix) :] if prefix else key] = value
            state_dict = renamed
        return super().load_state_dict(state_dict, strict=strict, assign=assign)


class AgentSession(Protocol):
    """What an agent needs of its run: the device it runs on (a Runner hands its agents its
    :class:`~digideep.pipeline.devices.DeviceChoice`)."""

    def device_for(self, agent: AgentBase, observation_space: gym.Space) -> torch.device: ...


@dataclass
class OnDevice:
    """A session stand-in outside a run (tests, benchmarks, notebooks): every agent on ``device``, no
    videos (an Explorer reads ``videos_path``)."""

    device: torch.device | str = "cpu"
    videos_path: Path | None = None

    def device_for(self, agent: AgentBase, observation_space: gym.Space) -> torch.device:
        return torch.device(self.device)


class AgentBase:
    """An agent: acts for the Explorer, samples its memory and learns for the Runner.

    Args:
        name: the agent's name, used in trajectory keys (``/agents/<name>/actions``).
        session: what picks the agent's device (:class:`AgentSession`, its ``device_for(agent,
            observation_space)``): the run's :class:`~digideep.pipeline.devices.DeviceChoice` in a
            run, :class:`OnDevice` outside one, or None for the CPU.
        observation_space: the single-environment observation space.
        action_space: this agent's own action space.
        **params: the agent's slice of the params tree; subclasses take typed keywords.
    """

    hidden_size: int = 1
    auto_device: ClassVar[str | None] = None
    """The device ``device: auto`` gives this class on a machine with CUDA (``"cpu"`` or ``"cuda"``);
    None leaves it to :func:`digideep.pipeline.devices.auto_device`'s rule."""
    update_mode: str | None = None
    """How the update function runs (``eager``, ``compile``, ``cudagraphs``) once resolved by
    :meth:`update_function`; None for an agent that does not run one."""
    update_mode_reason: str = ""
    """Why :attr:`update_mode` runs (the rule ``auto`` applied, or that the params asked for it)."""

    def __init__(
        self,
        name: str,
        session: AgentSession | None,
        observation_space: gym.Space,
        action_space: gym.Space,
        **params: Any,
    ) -> None:
        if params:
            raise TypeError(
                f"agent '{name}' ({type(self).__name__}) got unknown parameters {sorted(params)}; "
                "check the agent's args in the params file"
            )
        self.name = name
        self.session = session
        self.observation_space = observation_space
        self.action_space = action_space
        self.device = torch.device("cpu") if session is None else session.device_for(self, observation_space)
        self.obs = self._observation_adapter(observation_space)
        self.updates = 0  # gradient steps made
        self.iterations = 0  # update() calls that made gradient steps

    @property
    def act_device(self) -> torch.device:
        """Where :meth:`_act` computes, and so where :meth:`_inputs` puts the Explorer's arrays: the
        agent's device, unless a subclass acts from a copy of its policy elsewhere (the off-policy
        agents on a GPU act from a copy on the host, :class:`~digideep.agents.off_policy.OffPolicyAgent`)."""
        return self.device

    def _observation_adapter(self, observation_space: gym.Space) -> ObservationAdapter:
        """Subclass hook: the adapter of this agent's observations (MLP agents refuse images)."""
        return ObservationAdapter(observation_space)

    # -- Explorer interface ----------------------------------------------------------------------
    def initial_hidden_state(self, num_workers: int) -> np.ndarray:
        """``(W, h) float32`` zeros: the recurrent state before the first step."""
        return np.zeros((num_workers, self.hidden_size), dtype=np.float32)

    def action_generator(
        self,
        observations: Observations,
        hidden_state: np.ndarray,
        masks: np.ndarray,
        deterministic: bool = False,
    ) -> dict[str, Any]:
        """Actions for one step of every worker.

        Args:
            observations: ``(W, *obs_shape)`` or a dict of such arrays keyed by path.
            hidden_state: ``(W, h) float32``.
            masks: ``(W, 1) float32``; 0.0 where the worker starts a new episode.
            deterministic: act greedily.

        Returns:
            ``{"actions": (W, *act_shape), "hidden_state": (W, h) float32, "artifacts": {k: (W, ...)}}``
            numpy arrays.
        """
        with torch.inference_mode():
            out = self._act(*self._inputs(observations, hidden_state, masks), deterministic)
        return _to_numpy(out)

    def random_action_generator(
        self, observations: Observations, hidden_state: np.ndarray, masks: np.ndarray
    ) -> dict[str, Any]:
        """Uniformly random actions (warm start), in the same format as :meth:`action_generator`."""
        num_workers = np.asarray(masks).shape[0]
        with torch.inference_mode():
            actions = _uniform_actions(self.action_space, num_workers, self.act_device)
            out = self._random_artifacts(*self._inputs(observations, hidden_state, masks), actions)
        return _to_numpy(out)

    def _inputs(
        self, observations: Observations, hidden_state: np.ndarray, masks: np.ndarray
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The Explorer's numpy inputs as float32 tensors on :attr:`act_device`: ``(obs, hidden, masks)``.

        ``hidden`` is a copy, never a view of ``hidden_state``: an agent without a recurrent state
        returns it as its next one, which the Explorer hands back at the next step, so a view would
        keep every earlier step's array alive through the tensor that wraps it (a chain one link
        longer each frame)."""
        device = self.act_device
        obs = self.obs.from_explorer(observations, device)
        hidden = torch.tensor(hidden_state, dtype=torch.float32, device=device)
        mask = torch.as_tensor(masks, dtype=torch.float32, device=device)
        return obs, hidden, mask

    def _act(
        self, obs: torch.Tensor, hidden: torch.Tensor, masks: torch.Tensor, deterministic: bool
    ) -> dict[str, Any]:
        """Subclass hook: tensors in, ``{"actions", "hidden_state", "artifacts"}`` tensors out."""
        raise NotImplementedError

    def _random_artifacts(
        self, obs: torch.Tensor, hidden: torch.Tensor, masks: torch.Tensor, actions: torch.Tensor
    ) -> dict[str, Any]:
        """Subclass hook: the outputs for given random actions (artifacts empty by default)."""
        del obs, masks
        return {"actions": actions, "hidden_state": hidden, "artifacts": {}}

    # -- Runner interface ------------------------------------------------------------------------
    def sample(self, memory: Any) -> Any:
        """This iteration's batches from ``memory`` (None when there is nothing to learn from yet)."""
        raise NotImplementedError

    def update(self, batches: Any) -> dict[str, float]:
        """Learn from ``batches``; returns metrics like ``{"losses/qf_loss": 0.3}``."""
        raise NotImplementedError

    # -- how the update runs ------------------------------------------------------------------------
    def update_function(
        self, fn: Callable[..., dict[str, torch.Tensor]], update_mode: str
    ) -> Callable[..., dict[str, torch.Tensor]]:
        """``fn``, this agent's update written once, transformed to run in ``update_mode``
        (:func:`~digideep.agents.update_modes.in_mode`: in ``eager``, ``fn`` itself). ``auto`` resolves through :meth:`auto_update_mode`; the
        mode that runs is kept in :attr:`update_mode` and its reason in ``update_mode_reason`` (the
        Runner logs both).

        Raises:
            UsageError: a mode that cannot run on this agent's device.
        """
        check_update_mode(update_mode, self.device, self.name)
        mode, why = self.auto_update_mode() if update_mode == "auto" else (update_mode, "as the params ask")
        self.update_mode, self.update_mode_reason = mode, why
        log.debug("agent '%s': the update runs %s (%s)", self.name, mode, why)
        return in_mode(fn, mode, f"agent '{self.name}'")

    def auto_update_mode(self) -> tuple[str, str]:
        """``(mode, why)``: the mode ``update_mode="auto"`` runs on this agent's device, and why.
        Agents override it with their own rule."""
        return "eager", "no benchmark shows another mode faster for this agent"

    def resolved_settings(self) -> dict[str, str]:
        """What this agent's params left to the machine, as it was decided: ``{"update_mode": "eager"}``
        (nothing for an agent without an update function); the Runner records each as
        ``agents/<name>/resolved/<setting>`` in ``runner.json`` and in MLflow's params."""
        return {} if self.update_mode is None else {"update_mode": self.update_mode}

    # -- state -----------------------------------------------------------------------------------
    def _stateful(self) -> dict[str, Any]:
        """Objects with ``state_dict()`` / ``load_state_dict()`` (policy, optimizers, noise)."""
        return {}

    def _counters(self) -> dict[str, str]:
        return {"updates": "updates", "iterations": "iterations"}

    def state_dict(self) -> dict[str, Any]:
        """Networks, targets, optimizers, noise, temperature and counters.

        Tensors are copied to CPU so the checkpoint loads anywhere with
        ``torch.load(path, weights_only=True)``.
        """
        state: dict[str, Any] = {
            name: _to_cpu(obj.state_dict()) for name, obj in self._stateful().items() if obj is not None
        }
        state["counters"] = {key: int(getattr(self, attr)) for key, attr in self._counters().items()}
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned, from tensors on any device (checkpoints load on the CPU).

        Modules copy each tensor into their parameters, wherever those live; torch's optimizers cast
        their state to the device of its parameter; noise processes move their state themselves.
        """
        for name, obj in self._stateful().items():
            if obj is None:
                continue
            if name not in state:
                raise ValueError(
                    f"agent '{self.name}' state has no '{name}' entry; was it saved by another agent type?"
                )
            obj.load_state_dict(state[name])
        for key, attr in self._counters().items():
            setattr(self, attr, int(state["counters"][key]))


def _uniform_actions(space: gym.Space, num_workers: int, device: torch.device) -> torch.Tensor:
    if isinstance(space, gym.spaces.Discrete):
        return torch.randint(int(space.start), int(space.start + space.n), (num_workers,), device=device)
    if isinstance(space, gym.spaces.Box):
        low = torch.as_tensor(space.low, dtype=torch.float32, device=device)
        high = torch.as_tensor(space.high, dtype=torch.float32, device=device)
        if not (torch.isfinite(low).all() and torch.isfinite(high).all()):
            raise ValueError(f"cannot draw uniform actions from the unbounded space {space}")
        return low + (high - low) * torch.rand((num_workers, *space.shape), device=device)
    raise TypeError(f"random actions for {space} are not supported; use a Box or Discrete action space")


def _to_numpy(out: Mapping[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in out.items():
        if isinstance(value, Mapping):
            result[key] = _to_numpy(value)
        else:
            array = value.numpy(force=True)  # detached, on the host
            result[key] = array.astype(np.float32) if array.dtype == np.float64 else array
    return result


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, Mapping):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_cpu(v) for v in value]
    return value
