"""TD3's and DDPG's hand-written gradients: the same losses and gradients as autograd's, and used only
where they apply."""

from __future__ import annotations

import pytest
import torch

from digideep.agents.ddpg import DDPG
from digideep.agents.off_policy import Transitions
from digideep.agents.td3 import TD3
from tests.agents.analytic_checks import (
    ACTIONS,
    OBSERVATIONS,
    SESSION,
    assert_same_as_autograd,
    learned_alike,
    learned_twice_the_same,
    moved_agent,
    transitions,
)

CONFIGS = pytest.mark.parametrize(
    ("cls", "args"),
    [
        (TD3, {}),
        (TD3, {"target_policy_noise": 0.0}),
        (TD3, {"activation": "tanh", "hidden_sizes": (64, 32), "num_critics": 3}),
        (DDPG, {}),
        (DDPG, {"hidden_sizes": (32, 48, 16)}),
    ],
    ids=["td3", "td3 no smoothing", "td3 tanh 64x32 3 critics", "ddpg", "ddpg 3 layers"],
)


@CONFIGS
def test_both_steps_losses_and_gradients_equal_autograds(cls: type, args: dict) -> None:
    agent = moved_agent(cls, **args)
    analytic = agent._analytic
    assert analytic is not None
    batch = Transitions(*(field[0] for field in transitions()))
    obs = batch.observations
    critic_args = (batch, torch.randn(batch.actions.shape) if agent.target_policy_noise > 0 else None)
    assert_same_as_autograd(
        lambda: agent._critic_gradients(*critic_args),
        lambda: analytic.critic_gradients(*critic_args),
        analytic.critic_grads,
    )
    assert_same_as_autograd(
        lambda: agent._actor_gradients(obs), lambda: analytic.actor_gradients(obs), analytic.actor_grads
    )


@CONFIGS
def test_whole_updates_learn_as_with_autograd_and_repeat_bit_for_bit(cls: type, args: dict) -> None:
    data = transitions(steps=4)
    learned_alike(moved_agent(cls, **args), moved_agent(cls, analytic_gradients=False, **args), data)
    learned_twice_the_same(lambda: moved_agent(cls, **args), data)


class OwnActorLoss(TD3):
    """A research variant: a changed actor step must be trained by autograd."""

    def _actor_gradients(self, obs):
        return super()._actor_gradients(obs)


@pytest.mark.parametrize(
    ("cls", "args", "applies"),
    [
        (TD3, {}, True),
        (DDPG, {}, True),
        (TD3, {"analytic_gradients": False}, False),
        (DDPG, {"analytic_gradients": False}, False),
        (TD3, {"activation": "elu"}, False),
        (TD3, {"precision": "bfloat16"}, False),
        (OwnActorLoss, {}, False),
    ],
    ids=["td3", "ddpg", "td3 turned off", "ddpg turned off", "elu", "bfloat16", "overridden step"],
)
def test_it_applies_to_float32_relu_or_tanh_networks_with_the_shipped_steps(cls, args, applies) -> None:
    agent = cls("agent", SESSION, OBSERVATIONS, ACTIONS, **args)
    assert (agent._analytic is not None) is applies
