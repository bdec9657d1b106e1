"""Observation encoders: the image trunk, and what an agent with images does with its observations.

- :class:`NatureCNN`: the image trunk of Mnih et al. (2015).
- :class:`ObservationEncoder`: the encoder an agent picks from its observation space (a CNN per
  image leaf, vector leaves as they are).
- :class:`EncodedObservations`: the observation adapter of agents that have an encoder (images kept
  uint8 from the Explorer to the device).

The MLPs that follow an encoder are :mod:`digideep.agents.networks`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from digideep.agents.utils import ObservationAdapter, Observations, _box_leaves, _explorer_key
from digideep.environment.spaces import is_image
from digideep.errors import UsageError

__all__ = ["EncodedObservations", "NatureCNN", "ObservationEncoder"]


class NatureCNN(nn.Module):
    """The DQN encoder of Mnih et al. (2015), as in CleanRL's ``ppo_atari.py`` and SB3's ``NatureCNN``.

    ``Conv(32, 8, stride 4) - ReLU - Conv(64, 4, stride 2) - ReLU - Conv(64, 3, stride 1) - ReLU -
    Flatten - Linear(features) - ReLU``. uint8 images are scaled to ``[0, 1]`` here, on the device, so
    that what crosses from the host is the uint8 frames.

    Args:
        image_shape: ``(C, H, W)`` of one image (channels first; e.g. ``(4, 84, 84)`` stacked frames).
        features: output features (512).
    """

    def __init__(self, image_shape: Sequence[int], features: int = 512) -> None:
        super().__init__()
        channels, height, width = image_shape
        self.convs = nn.Sequential(
            nn.Conv2d(channels, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, channels, height, width)).shape[1]
        self.linear = nn.Sequential(nn.Linear(flat, features), nn.ReLU())
        self.features = features

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W)`` uint8 (or float already in [0, 1]) to ``(B, features) float32``."""
        x = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
        return self.linear(self.convs(x))


class EncodedObservations(ObservationAdapter):
    """The observation adapter of an agent with an :class:`ObservationEncoder`: images allowed.

    Like :class:`~digideep.agents.utils.ObservationAdapter` it hands the policy one tensor
    ``(..., dim)``, the leaves flattened and concatenated in path order, but it keeps uint8 when every
    leaf is uint8 (Atari frames: 1 byte per pixel from the Explorer to the device, no float copy of
    the chunk); the encoder reshapes each leaf and scales images on the device. With mixed dtypes
    (an image beside a float vector) the tensor is float32.

    Raises:
        UsageError: an image leaf with its channels last (one line naming ``ImageTranspose``).
    """

    def __init__(self, observation_space: gym.Space) -> None:
        leaves = _box_leaves(observation_space, "")
        for path, space in leaves:
            if is_image(space) and len(space.shape) == 3 and space.shape[-1] <= 4 < space.shape[0]:
                raise UsageError(
                    f"observation '{path or '/'}' is an image {space.shape} with its channels last; add "
                    "'digideep.environment.wrappers.ImageTranspose' to the env's wrappers (CNNs take (C, H, W))"
                )
            if is_image(space) and len(space.shape) > 3:
                raise UsageError(
                    f"observation '{path or '/'}' {space.shape}: images must be (C, H, W) or (H, W)"
                )
        self.paths = [path for path, _ in leaves]
        self.shapes = [tuple(space.shape) for _, space in leaves]
        self.images = [is_image(space) for _, space in leaves]
        self.scaled = [is_image(space) and space.dtype == np.uint8 for _, space in leaves]
        self.dim = int(sum(int(np.prod(shape)) for shape in self.shapes))
        uint8 = all(space.dtype == np.uint8 for _, space in leaves)
        self.dtype = torch.uint8 if uint8 else torch.float32

    def from_explorer(self, observations: Observations, device: torch.device) -> torch.Tensor:
        """``(W, *obs_shape)`` array, or a dict keyed by path, to ``(W, dim)`` uint8 or float32 on ``device``."""
        if isinstance(observations, Mapping):
            parts = [np.asarray(observations[_explorer_key(observations, p)]) for p in self.paths]
        else:
            parts = [np.asarray(observations)]
        return self._concat([torch.as_tensor(p) for p in parts], leading=1).to(device, self.dtype)

    def from_batch(
        self, batch: Mapping[str, torch.Tensor], prefix: str = "/observations", leading: int = 2
    ) -> torch.Tensor:
        """Concatenate the leaves of ``prefix`` from a batch of tensors ``(*lead, *shape)``; uint8 stays."""
        return self._concat([batch[key] for key in self.keys(prefix)], leading=leading).to(self.dtype)


class ObservationEncoder(nn.Module):
    """Features of the flat observations of :class:`EncodedObservations`: a CNN per image, vectors as is.

    The agent picks it from its observation space: an image (Atari's ``(4, 84, 84)`` frames) gets a
    :class:`NatureCNN`; a Dict gets a CNN per image leaf, its vector leaves pass through, and the
    parts are concatenated (the MLP heads after it make "CNN + MLP" for mixed Dicts, "concatenated
    MLP" for Dicts of vectors).

    Args:
        observations: the agent's :class:`EncodedObservations`.
        cnn_features: output features of each CNN (512).
    """

    def __init__(self, observations: EncodedObservations, cnn_features: int = 512) -> None:
        super().__init__()
        self.shapes, self.images, self.scaled = observations.shapes, observations.images, observations.scaled
        self.sizes = [int(np.prod(shape)) for shape in self.shapes]
        self.cnns = nn.ModuleList()
        out = 0
        for shape, image in zip(self.shapes, self.images, strict=True):
            if image:
                self.cnns.append(NatureCNN(shape if len(shape) == 3 else (1, *shape), cnn_features))
                out += cnn_features
            else:
                out += int(np.prod(shape))
        self.out_dim = out

    @staticmethod
    def needed(observation_space: gym.Space) -> bool:
        """Whether ``observation_space`` has an image leaf (else the observations are the features)."""
        return any(is_image(space) for _, space in _box_leaves(observation_space, ""))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``(B, dim)`` uint8 or float32 to ``(B, out_dim) float32``."""
        parts = torch.split(obs, self.sizes, dim=-1) if len(self.sizes) > 1 else (obs,)
        features, cnns = [], iter(self.cnns)
        for part, shape, image, scaled in zip(parts, self.shapes, self.images, self.scaled, strict=True):
            if image:
                images = part.reshape(-1, *shape) if len(shape) == 3 else part.reshape(-1, 1, *shape)
                if scaled and images.dtype != torch.uint8:  # a uint8 image in a float32 (mixed) tensor
                    images = images / 255.0
                features.append(next(cnns)(images))
            else:
                features.append(part.float())
        return features[0] if len(features) == 1 else torch.cat(features, dim=-1)
