"""Exploration noise processes for deterministic policies (DDPG, TD3).

Noise lives in the policy's normalized action units (``[-1, 1]`` per dimension) and is drawn with
torch's global generator, whose state the Runner checkpoints with the other RNG states.
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["GaussianNoise", "NoiseBase", "OrnsteinUhlenbeckNoise", "make_noise"]


class NoiseBase:
    """A per-worker noise process.

    Args:
        action_dim: action features.
        device: where noise tensors live.
    """

    def __init__(self, action_dim: int, device: torch.device | str = "cpu") -> None:
        self.action_dim = action_dim
        self.device = torch.device(device)

    def sample(self, masks: torch.Tensor) -> torch.Tensor:
        """Noise for one step of every worker.

        Args:
            masks: ``(W, 1) float32``; 0.0 where the worker starts a new episode (stateful processes reset
                there).

        Returns:
            ``(W, action_dim) float32``.
        """
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state


class GaussianNoise(NoiseBase):
    """Independent ``N(0, std^2)`` noise every step (TD3 paper, CleanRL, SB3 zoo ``noise_type: normal``).

    Args:
        action_dim: action features.
        std: standard deviation in normalized action units.
        device: where noise tensors live.
    """

    def __init__(self, action_dim: int, std: float = 0.1, device: torch.device | str = "cpu") -> None:
        super().__init__(action_dim, device)
        if std < 0:
            raise ValueError(f"noise std must be >= 0, got {std}")
        self.std = float(std)

    def sample(self, masks: torch.Tensor) -> torch.Tensor:
        return torch.randn(masks.shape[0], self.action_dim, device=self.device) * self.std


class OrnsteinUhlenbeckNoise(NoiseBase):
    """Temporally correlated noise ``x += theta (mu - x) dt + sigma sqrt(dt) N(0, 1)`` (DDPG paper).

    Each worker has its own state, reset to ``mu`` where its mask is 0 (a new episode starts).
    Defaults follow the DDPG paper (theta 0.15, sigma 0.2) and SB3 (dt 1e-2).

    Args:
        action_dim: action features.
        sigma: diffusion scale in normalized action units.
        theta: mean reversion rate.
        dt: time step.
        mu: long-run mean.
        device: where noise tensors live.
    """

    def __init__(
        self,
        action_dim: int,
        sigma: float = 0.2,
        theta: float = 0.15,
        dt: float = 1e-2,
        mu: float = 0.0,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(action_dim, device)
        self.sigma, self.theta, self.dt, self.mu = float(sigma), float(theta), float(dt), float(mu)
        self.x = torch.full((0, action_dim), self.mu, device=self.device)

    def sample(self, masks: torch.Tensor) -> torch.Tensor:
        num_workers = masks.shape[0]
        if self.x.shape[0] != num_workers:
            self.x = torch.full((num_workers, self.action_dim), self.mu, device=self.device)
        x = torch.where(masks > 0, self.x, torch.full_like(self.x, self.mu))
        x = x + self.theta * (self.mu - x) * self.dt
        x = x + self.sigma * math.sqrt(self.dt) * torch.randn_like(x)
        self.x = x
        return x

    def state_dict(self) -> dict[str, Any]:
        return {"x": self.x.detach().cpu().clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.x = state["x"].to(self.device)


def make_noise(
    noise_type: str | None, action_dim: int, std: float, device: torch.device | str, **kwargs: float
) -> NoiseBase | None:
    """A noise process by name.

    Args:
        noise_type: ``"normal"`` (Gaussian), ``"ou"`` (Ornstein-Uhlenbeck) or None / ``"none"``.
        action_dim: action features.
        std: Gaussian std, or OU sigma.
        device: where noise tensors live.
        **kwargs: extra OU arguments (``theta``, ``dt``, ``mu``).

    Returns:
        The process, or None for no noise.
    """
    if noise_type in (None, "none"):
        return None
    if noise_type == "normal":
        return GaussianNoise(action_dim, std=std, device=device)
    if noise_type == "ou":
        return OrnsteinUhlenbeckNoise(action_dim, sigma=std, device=device, **kwargs)
    raise ValueError(f"unknown noise_type '{noise_type}'; use 'normal', 'ou' or 'none'")
