"""TD3's pure pieces: target policy smoothing and the twin-critic target."""

from __future__ import annotations

import torch

from digideep.agents.td3 import losses


def test_smoothing_noise_is_clipped_and_actions_stay_in_bounds() -> None:
    actions = torch.tensor([[0.9, -0.2], [0.0, 0.0]])
    noise = torch.tensor([[10.0, -10.0], [0.5, -1.0]])
    out = losses.smoothed_target_actions(actions, noise, policy_noise=0.2, noise_clip=0.5)
    # row 0: noise clipped to +-0.5, then actions clipped to [-1, 1]; row 1: 0.1 and -0.2
    torch.testing.assert_close(out, torch.tensor([[1.0, -0.7], [0.1, -0.2]]))


def test_twin_target_takes_the_minimum() -> None:
    target = losses.q_target(torch.tensor([0.0]), torch.tensor([0.0]), torch.tensor([[3.0, 2.0]]), gamma=1.0)
    torch.testing.assert_close(target, torch.tensor([2.0]))
