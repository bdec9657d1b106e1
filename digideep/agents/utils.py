"""Helpers the agents share: observation flattening, action scaling, metrics, tensors, optimizers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch.optim.adam import adam as functional_adam

from digideep.environment.spaces import is_image
from digideep.errors import UsageError

__all__ = [
    "BoxScaler",
    "MetricAccumulator",
    "ObservationAdapter",
    "Observations",
    "adam_step",
    "initialize_adam",
    "make_adam",
    "minimize",
    "optimizer_params",
    "polyak_update",
    "to_torch",
]

Observations = np.ndarray | Mapping[str, np.ndarray]


class ObservationAdapter:
    """Turns observations (a Box, or a Dict of Boxes flattened to paths) into one float tensor.

    Args:
        observation_space: the single-environment observation space.

    Attributes:
        paths: sub-paths of the observation leaves (``[""]`` for a Box, ``["/a", "/b/c"]`` for a Dict).
        dim: features after flattening and concatenation.
    """

    def __init__(self, observation_space: gym.Space) -> None:
        leaves = _box_leaves(observation_space, "")
        for path, space in leaves:
            if is_image(space):
                raise UsageError(
                    f"observation '{path or '/'}' is an image {space.shape} {space.dtype}, and digideep's "
                    "agents have MLP policies; use state observations (dm_control: observation 'flat') "
                    "or an agent with a CNN policy"
                )
        self.paths = [path for path, _ in leaves]
        self.shapes = [space.shape for _, space in leaves]
        self.dim = int(sum(int(np.prod(shape)) for shape in self.shapes))

    def keys(self, prefix: str = "/observations") -> list[str]:
        """Trajectory keys of the observation leaves under ``prefix``."""
        return [prefix + path for path in self.paths]

    def from_explorer(self, observations: Observations, device: torch.device) -> torch.Tensor:
        """``(W, *obs_shape)`` array, or a dict keyed by path, to ``(W, dim) float32`` on ``device``."""
        if isinstance(observations, Mapping):
            parts = [np.asarray(observations[_explorer_key(observations, p)]) for p in self.paths]
        else:
            parts = [np.asarray(observations)]
        return self._concat([torch.as_tensor(p) for p in parts], leading=1).to(device, torch.float32)

    def from_batch(
        self, batch: Mapping[str, torch.Tensor], prefix: str = "/observations", leading: int = 2
    ) -> torch.Tensor:
        """Concatenate the leaves of ``prefix`` from a batch of tensors ``(*lead, *shape)``."""
        return self._concat([batch[key] for key in self.keys(prefix)], leading=leading).float()

    def _concat(self, parts: list[torch.Tensor], leading: int) -> torch.Tensor:
        flat = [p.reshape(*p.shape[:leading], -1) for p in parts]
        return flat[0] if len(flat) == 1 else torch.cat(flat, dim=-1)


def _explorer_key(observations: Mapping[str, np.ndarray], path: str) -> str:
    for key in (path, "/observations" + path, path.lstrip("/")):
        if key in observations:
            return key
    raise KeyError(f"observation '{path}' not among the keys {sorted(observations)}")


def _box_leaves(space: gym.Space, path: str) -> list[tuple[str, gym.spaces.Box]]:
    if isinstance(space, gym.spaces.Box):
        return [(path, space)]
    if isinstance(space, gym.spaces.Dict):
        leaves: list[tuple[str, gym.spaces.Box]] = []
        for key, sub in space.spaces.items():
            leaves += _box_leaves(sub, f"{path}/{key}")
        return leaves
    raise TypeError(
        f"observation space {space} is not supported; agents take Box observations or Dicts of Boxes "
        "(wrap Discrete or Tuple spaces, e.g. with gymnasium.wrappers.FlattenObservation)"
    )


class BoxScaler:
    """Maps between a bounded Box's action units and the policy's normalized ``[-1, 1]`` units.

    Args:
        action_space: a Box with finite bounds.
        device: where the bounds live.
    """

    def __init__(self, action_space: gym.Space, device: torch.device) -> None:
        if not isinstance(action_space, gym.spaces.Box):
            raise TypeError(f"this agent needs a Box action space, got {action_space}")
        if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
            raise ValueError(
                f"action space {action_space} has infinite bounds; this agent needs finite bounds "
                "(wrap the env with gymnasium.wrappers.RescaleAction)"
            )
        low = torch.as_tensor(action_space.low.reshape(-1), dtype=torch.float32, device=device)
        high = torch.as_tensor(action_space.high.reshape(-1), dtype=torch.float32, device=device)
        self.shape = action_space.shape
        self.dim = int(np.prod(action_space.shape))
        self.center = (high + low) / 2
        self.half = (high - low) / 2

    def to_env(self, normalized: torch.Tensor) -> torch.Tensor:
        """``(..., dim)`` in ``[-1, 1]`` to the env's units."""
        return normalized * self.half + self.center

    def to_normalized(self, actions: torch.Tensor) -> torch.Tensor:
        """``(..., dim)`` in env units to ``[-1, 1]``."""
        return (actions - self.center) / self.half


class MetricAccumulator:
    """Collects scalar metric tensors during a gradient loop; one host transfer at the end."""

    def __init__(self) -> None:
        self._values: dict[str, list[torch.Tensor]] = {}

    def add(self, **metrics: torch.Tensor) -> None:
        """Record detached scalar tensors, all on one device, e.g.
        ``add(**{"losses/qf_loss": loss.detach()})``."""
        for name, value in metrics.items():
            self._values.setdefault(name, []).append(value)

    def result(self) -> dict[str, float]:
        """The mean of every metric over the recorded steps, as Python floats."""
        if not self._values:
            return {}
        names = list(self._values)
        if all(len(self._values[n]) == 1 for n in names):  # one step (the reference schedule): its values
            means = torch.stack([self._values[n][0] for n in names]).float()
        else:
            means = torch.stack([torch.stack(self._values[n]).float().mean() for n in names])
        return dict(zip(names, means.tolist(), strict=True))


def to_torch(batch: Mapping[str, np.ndarray | torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """Numpy arrays to tensors on ``device`` (pinned, non-blocking copies for CUDA); tensors already on
    ``device`` are kept as they are (a device sampler's batch: no copy), others are moved there."""
    out = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor):
            out[key] = value.to(device)
            continue
        tensor = torch.from_numpy(np.ascontiguousarray(value))
        if device.type == "cuda":
            tensor = tensor.pin_memory().to(device, non_blocking=True)
        out[key] = tensor
    return out


def polyak_update(target: Iterable[torch.Tensor], online: Iterable[torch.Tensor], tau: float) -> None:
    """``target <- (1 - tau) target + tau online``, in one fused call."""
    with torch.no_grad():
        torch._foreach_lerp_(list(target), list(online), tau)


def make_adam(
    params: Iterable[Any], lr: float, device: torch.device, eps: float = 1e-8, capturable: bool = False
) -> torch.optim.Adam:
    """Adam with the fused implementation (one kernel over all parameters) on CPU and CUDA.

    ``capturable`` keeps the step counts on the device, so that a CUDA graph can capture the step
    (the ``cudagraphs`` update mode).
    """
    fused = device.type in ("cpu", "cuda")
    optimizer = torch.optim.Adam(params, lr=lr, eps=eps, fused=fused, capturable=capturable)
    initialize_adam(optimizer)
    return optimizer


def initialize_adam(optimizer: torch.optim.Adam) -> None:
    """Create the state Adam's first ``step()`` would (zero moments, step count 0) where it is missing,
    so that every step, the first included, takes :func:`adam_step`'s one path: a compiled update
    traces it once and a CUDA graph captures no allocation. The same numbers as the state ``step()``
    creates lazily (the step count is float32, on the parameter's device where Adam is fused or
    capturable). :func:`make_adam` calls it."""
    for group in optimizer.param_groups:
        on_device = group["fused"] or group["capturable"]
        for param in group["params"]:
            if not optimizer.state[param]:
                optimizer.state[param] = {
                    "step": torch.zeros((), dtype=torch.float32, device=param.device if on_device else "cpu"),
                    "exp_avg": torch.zeros_like(param, memory_format=torch.preserve_format),
                    "exp_avg_sq": torch.zeros_like(param, memory_format=torch.preserve_format),
                }


def minimize(optimizer: torch.optim.Optimizer, loss: torch.Tensor, params: Sequence[torch.Tensor]) -> None:
    """One optimizer step on ``loss``: its autograd gradients with respect to ``params`` (the optimizer's
    parameters, in :func:`optimizer_params` order), then :func:`adam_step`. Nothing accumulates in
    ``.grad`` and nothing needs zeroing."""
    adam_step(optimizer, torch.autograd.grad(loss, params))


# kept over .grad and optimizer.step(): faster in bench/bench_library_pieces.py (docs/measurements.md)
@torch.compiler.disable
def adam_step(optimizer: torch.optim.Optimizer, grads: Sequence[torch.Tensor]) -> None:
    """``optimizer.step()`` with ``grads`` (from ``torch.autograd.grad``) instead of the ``.grad`` fields.

    It runs eagerly in every update mode (``torch.compiler.disable``): torch keeps its fused Adam
    kernel out of compiled graphs anyway, and tracing the Python around it would guard on the
    optimizer's state and parameter objects. The optimizer passed in is still guarded by identity,
    so each new agent in a process adds one cache entry to the compiled update;
    :data:`~digideep.agents.update_modes.RECOMPILE_LIMIT` keeps dynamo from falling
    back to eager after its default 8. A CUDA graph captures the step like any other kernel.

    For an initialized ``torch.optim.Adam`` (fused or foreach, no AMSGrad) this calls the documented
    functional form ``torch.optim.adam.adam`` on the optimizer's own state: the same kernel and the
    same numbers as ``step()``, without its per-call Python bookkeeping (docs/measurements.md gives
    its cost). Any other optimizer, or
    Adam without its state (not made by :func:`make_adam`), goes through ``step()`` (each ``.grad`` is set for
    it and then put back as it was). Optimizer hooks are not called on the fast path.

    Args:
        optimizer: the optimizer.
        grads: one gradient per parameter, in ``param_groups`` order (the order of
            :func:`optimizer_params`).
    """
    state = optimizer.state
    fast = type(optimizer) is torch.optim.Adam and all(
        not group["amsgrad"] and not group["differentiable"] for group in optimizer.param_groups
    )
    if fast and all(p in state for group in optimizer.param_groups for p in group["params"]):
        start = 0
        with torch.no_grad():  # as Optimizer.step
            for group in optimizer.param_groups:
                params = group["params"]
                states = [state[p] for p in params]
                beta1, beta2 = group["betas"]
                functional_adam(
                    params,
                    list(grads[start : start + len(params)]),
                    [s["exp_avg"] for s in states],
                    [s["exp_avg_sq"] for s in states],
                    [],
                    [s["step"] for s in states],
                    foreach=group["foreach"],
                    fused=group["fused"],
                    capturable=group["capturable"],
                    decoupled_weight_decay=group.get("decoupled_weight_decay", False),
                    amsgrad=False,
                    beta1=beta1,
                    beta2=beta2,
                    lr=group["lr"],
                    weight_decay=group["weight_decay"],
                    eps=group["eps"],
                    maximize=group["maximize"],
                )
                start += len(params)
        return
    params = optimizer_params(optimizer)
    held = [param.grad for param in params]
    for param, grad in zip(params, grads, strict=True):
        param.grad = grad
    optimizer.step()
    for param, grad in zip(params, held, strict=True):  # as they were (a flat buffer keeps its gradient)
        param.grad = grad


def optimizer_params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The optimizer's parameters in ``param_groups`` order (the order :func:`adam_step` expects)."""
    return [p for group in optimizer.param_groups for p in group["params"]]
