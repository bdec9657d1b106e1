"""Which device each agent trains on, the checks of a requested device, and deterministic mode.

A run asks for a device in one of three places, the first found wins:

1. ``--device`` on the command line (``digideep train/resume/play``, ``python -m digideep.main``),
   handed to the run as an argument (``device`` of :func:`~digideep.pipeline.training.open_run`,
   of :class:`DeviceChoice` and of the ``train`` flow);
2. ``session.device`` in the params tree (the shipped files take it from a ``device`` cpanel knob
   when they declare one);
3. ``"auto"``.

``cpu``, ``cuda`` and ``cuda:N`` put every agent there. ``auto`` decides per agent
(:func:`auto_device`), because a GPU does not help every agent: a few small matrix products a step
cost more in kernel launches and copies than they save, while hundreds of batched updates an
iteration gain (docs/gpu.md gives the figures behind the rule). Under ``auto``, with CUDA present:

- an agent class that sets ``auto_device = "cpu"`` or ``"cuda"`` gets that;
- an agent with image observations (a CNN policy) gets CUDA;
- an off-policy agent (SAC, TD3, DDPG: :class:`~digideep.agents.off_policy.OffPolicyAgent`) gets CUDA;
- an on-policy agent with vector observations (PPO with an MLP) gets the CPU.

Without CUDA every agent gets the CPU. The log says which device each agent got and why. Ask for
``--device cuda`` for an on-policy agent with wide networks, where the GPU may win.

Deterministic mode (``session.deterministic: true`` or ``--deterministic``, the ``deterministic``
argument of the same functions: either one turns it on) makes a run on one GPU repeatable:
:func:`configure_determinism`.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

import gymnasium as gym
import torch

from digideep.agents.base import AgentBase
from digideep.environment.spaces import is_image
from digideep.errors import UsageError

__all__ = [
    "DeviceChoice",
    "auto_device",
    "available_devices",
    "check_device",
    "configure_determinism",
    "requested_determinism",
    "set_torch_threads",
]

log = logging.getLogger(__name__)

_FORMAT = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def available_devices() -> list[str]:
    """The devices of this machine, e.g. ``["cpu", "cuda:0"]``."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return ["cpu", *(f"cuda:{i}" for i in range(count))]


def check_device(device: str) -> str:
    """Check that ``device`` is ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` and exists here; return it.

    Raises:
        UsageError: a malformed name, or a CUDA device this machine lacks (the message lists the
            devices that exist).
    """
    if not isinstance(device, str) or not _FORMAT.match(device):
        raise UsageError(f"device '{device}' is not one of auto, cpu, cuda, cuda:N")
    if not device.startswith("cuda"):
        return device
    here = available_devices()
    if len(here) == 1:
        raise UsageError(
            f"device '{device}' requested but this machine has no usable CUDA device (torch "
            f"{torch.__version__}); devices here: cpu; use --device cpu or auto"
        )
    if ":" in device and device not in here:
        raise UsageError(
            f"device '{device}' does not exist; devices here: {', '.join(here)}; use one of them or auto"
        )
    return device


def requested_device(explicit: str | None, params_device: str | None) -> str:
    """The device request that applies: ``explicit`` (``--device``), then params, then auto."""
    return check_device(explicit or params_device or "auto")


def default_device(request: str) -> torch.device:
    """The device of a request for GPU-preferring work: the named one, or under auto CUDA when present."""
    if request == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(request)


def auto_device(
    agent: AgentBase, observation_space: gym.Space, cuda_available: bool
) -> tuple[torch.device, str]:
    """The device ``auto`` gives ``agent`` and the reason, by the rule in this module's docstring.

    Args:
        agent: the agent (its class decides: ``auto_device`` attribute, off-policy or not).
        observation_space: the agent's observation space (images mean a CNN policy).
        cuda_available: whether this machine has a CUDA device.
    """
    if not cuda_available:
        return torch.device("cpu"), "no CUDA device here"
    preference = type(agent).auto_device
    if preference in ("cpu", "cuda"):
        return torch.device(preference), f"{type(agent).__name__}.auto_device = '{preference}'"
    if _has_images(observation_space):
        return torch.device("cuda"), "image observations (CNN policy) gain from the GPU"
    from digideep.agents.off_policy import OffPolicyAgent

    if isinstance(agent, OffPolicyAgent):
        return torch.device("cuda"), "off-policy agents make many batched gradient steps per iteration"
    return torch.device("cpu"), (
        "on-policy agent with vector observations (small MLP): the CPU is faster; --device cuda overrides"
    )


def agent_device(agent: AgentBase, observation_space: gym.Space, request: str) -> torch.device:
    """The device of ``agent`` under ``request``; logs the choice and why."""
    if request == "auto":
        device, why = auto_device(agent, observation_space, torch.cuda.is_available())
        why = f"auto: {why}"
    else:
        device, why = torch.device(request), f"requested '{request}'"
    log.info("agent '%s' (%s) on %s: %s", agent.name, type(agent).__name__, device, why)
    return device


class DeviceChoice:
    """Which device each agent of a run trains on, and whether deterministic mode is on.

    The request is the first of ``explicit`` (``--device``), ``session.device`` of the params
    (:meth:`configure`) and ``auto``. Agents ask :meth:`device_for`: a ``DeviceChoice`` is the
    :class:`~digideep.agents.base.AgentSession` that a Runner hands its agents.

    Args:
        explicit: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (``--device``); it wins over
            ``session.device`` of the params; None takes that, else auto.
        deterministic: deterministic mode (``--deterministic``) whatever ``session.deterministic``
            of the params says (:meth:`configure` turns it on).

    Raises:
        UsageError: ``explicit`` is malformed or does not exist on this machine (checked here, so
            before a run writes anything).
    """

    def __init__(self, explicit: str | None = None, deterministic: bool = False) -> None:
        self.explicit = explicit
        self.deterministic = deterministic
        self.request: str = requested_device(explicit, None)
        """The device request that applies: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``."""

    def configure(self, settings: dict[str, Any]) -> None:
        """Take ``settings`` (the ``session`` slice of the params tree: ``device``, ``deterministic``)
        where the constructor left them open, and turn deterministic mode on when either asks
        (:func:`configure_determinism`). The Runner calls it before it builds any agent.

        Raises:
            UsageError: the params' device does not exist on this machine.
        """
        self.request = requested_device(self.explicit, settings.get("device"))
        configure_determinism(requested_determinism(self.deterministic, settings.get("deterministic")))

    @property
    def device(self) -> torch.device:
        """The requested device; under ``auto`` the first CUDA device when there is one, else the CPU.

        Agents ask :meth:`device_for` instead: under ``auto`` an on-policy MLP agent stays on the CPU.
        """
        return default_device(self.request)

    def device_for(self, agent: AgentBase, observation_space: gym.Space) -> torch.device:
        """The device of ``agent`` under the request (logged with the reason, :func:`agent_device`)."""
        return agent_device(agent, observation_space, self.request)

    def __repr__(self) -> str:
        return f"DeviceChoice({self.request!r})"


def _has_images(space: gym.Space) -> bool:
    """Whether a leaf of ``space`` (Dicts and Tuples walked) is an image."""
    if isinstance(space, gym.spaces.Dict):
        return any(_has_images(s) for s in space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return any(_has_images(s) for s in space.spaces)
    return is_image(space)


def requested_determinism(explicit: bool, params_value: bool | None) -> bool:
    """Whether deterministic mode is on: ``explicit`` (``--deterministic``) or ``session.deterministic``."""
    return bool(explicit) or bool(params_value)


def set_torch_threads(threads: int | None) -> None:
    """``torch.set_num_threads(threads)`` when given (``session.torch_threads`` of the params).

    Process-wide, and part of what a seed learns: torch's CPU kernels split their sums by thread.
    """
    if threads:
        torch.set_num_threads(threads)


def configure_determinism(enabled: bool) -> None:
    """Make the following CUDA (and CPU) work repeatable when ``enabled``; do nothing otherwise.

    Sets ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (cuBLAS reads it when it creates its workspace, so this
    must come before the first CUDA matrix product: the Runner calls it before building agents),
    ``torch.use_deterministic_algorithms(True)`` (an op without a deterministic implementation then
    raises instead of varying), ``cudnn.benchmark = False`` and ``cudnn.deterministic = True``.
    These are process-wide and stay on; a run that does not ask for them leaves them as they are.
    """
    if not enabled:
        return
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        log.warning(
            "deterministic mode: CUDA was initialised before it was set; cuBLAS may already use a "
            "nondeterministic workspace (set CUBLAS_WORKSPACE_CONFIG=:4096:8 before starting)"
        )
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    log.info("deterministic mode: deterministic algorithms on, cuDNN benchmark off")
