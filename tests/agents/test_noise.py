"""Exploration noise: OU resets at episode starts and round-trips through its state dict."""

from __future__ import annotations

import pytest
import torch

from digideep.agents.noise import GaussianNoise, OrnsteinUhlenbeckNoise, make_noise


def test_ou_is_correlated_and_resets_where_masks_are_zero() -> None:
    torch.manual_seed(0)
    noise = OrnsteinUhlenbeckNoise(2, sigma=1.0, theta=0.15, dt=1e-2)
    ones = torch.ones(3, 1)
    for _ in range(200):
        last = noise.sample(ones)
    assert last.shape == (3, 2) and last.abs().sum() > 0
    follow = noise.sample(ones)
    assert (follow - last).abs().max() < 0.5, "consecutive OU samples are close"
    masks = torch.tensor([[1.0], [0.0], [1.0]])
    state = noise.x.clone()
    after = noise.sample(masks)
    # worker 1 restarted from mu = 0: one step of size sigma * sqrt(dt) from zero
    assert after[1].abs().max() < 0.5 and not torch.allclose(after[1], state[1])


def test_ou_state_dict_round_trip() -> None:
    a = OrnsteinUhlenbeckNoise(3)
    a.sample(torch.ones(2, 1))
    b = OrnsteinUhlenbeckNoise(3)
    b.load_state_dict(a.state_dict())
    torch.testing.assert_close(a.x, b.x)


def test_gaussian_noise_scale_and_factory() -> None:
    torch.manual_seed(0)
    sample = GaussianNoise(4, std=0.3).sample(torch.ones(20000, 1))
    assert sample.shape == (20000, 4)
    assert abs(sample.std().item() - 0.3) < 0.01
    assert make_noise("none", 2, 0.1, "cpu") is None
    assert isinstance(make_noise("ou", 2, 0.1, "cpu"), OrnsteinUhlenbeckNoise)
    with pytest.raises(ValueError, match="noise_type"):
        make_noise("pink", 2, 0.1, "cpu")
