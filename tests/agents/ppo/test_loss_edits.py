"""An edit to PPO's losses is what trains, in every update mode that runs on the CPU.

Each test edits ``agents/ppo/losses.py`` as a researcher would (monkeypatched before the agent is
built) and makes one update (2 epochs of 4 minibatches) from a fresh agent: a loss made zero leaves
its network exactly where it was (Adam's steps on gradients that were always zero are zero) while the
other network moves, and an added penalty trains to other weights than the shipped loss. ``cudagraphs``
needs CUDA.
"""

from __future__ import annotations

import torch

from digideep.agents.ppo import PPO, losses
from tests.agents.ppo.pendulum import MODES, agent, update


def actor(learner: PPO) -> list[torch.Tensor]:
    return [*learner.policy.actor.parameters(), learner.policy.log_std]


def critic(learner: PPO) -> list[torch.Tensor]:
    return list(learner.policy.critic.parameters())


def moved(before: list[torch.Tensor], after: list[torch.Tensor]) -> list[bool]:
    return [not torch.equal(b, a) for b, a in zip(before, after, strict=True)]


def snapshot(parameters: list[torch.Tensor]) -> list[torch.Tensor]:
    return [p.detach().clone() for p in parameters]


def assert_compiled_if(mode: str, learner: PPO) -> None:
    """In compile mode the edited loss was traced and compiled (not run eagerly after a fallback)."""
    assert learner.update_mode == mode
    if mode == "compile":
        assert learner.new_graphs > 0, "the edited loss did not compile"


@MODES
def test_a_policy_loss_made_zero_leaves_the_actor_and_the_critic_still_learns(monkeypatch, chunk, mode):
    shipped = losses.policy_loss
    monkeypatch.setattr(
        losses,
        "policy_loss",
        lambda *args: (lambda loss, log_ratio: (0.0 * loss, log_ratio))(*shipped(*args)),
    )
    learner = agent(mode)
    actor_before, critic_before = snapshot(actor(learner)), snapshot(critic(learner))
    metrics = update(learner, chunk)
    assert_compiled_if(mode, learner)
    assert metrics["losses/policy_loss"] == 0.0
    assert not any(moved(actor_before, actor(learner))), "the actor trained on a policy loss that was zero"
    assert all(moved(critic_before, critic(learner)))


@MODES
def test_a_value_loss_made_zero_leaves_the_critic_and_the_actor_still_learns(monkeypatch, chunk, mode):
    shipped = losses.value_loss
    monkeypatch.setattr(losses, "value_loss", lambda *args: 0.0 * shipped(*args))
    learner = agent(mode)
    actor_before, critic_before = snapshot(actor(learner)), snapshot(critic(learner))
    metrics = update(learner, chunk)
    assert_compiled_if(mode, learner)
    assert metrics["losses/value_loss"] == 0.0
    assert not any(moved(critic_before, critic(learner))), "the critic trained on a value loss that was zero"
    assert all(moved(actor_before, actor(learner)))


@MODES
def test_a_penalty_added_to_the_policy_loss_trains_other_weights(monkeypatch, chunk, mode):
    """The researcher's edit from the issue, a penalty on the policy's change (here the squared
    log-ratio): every actor tensor ends elsewhere than with the shipped loss, from the same seed and
    minibatches."""
    shipped_agent = agent(mode)
    update(shipped_agent, chunk)
    shipped = losses.policy_loss

    def penalized(log_prob, old_log_prob, advantages, clip_range):
        loss, log_ratio = shipped(log_prob, old_log_prob, advantages, clip_range)
        return loss + 0.5 * (log_prob - old_log_prob).pow(2).mean(), log_ratio

    monkeypatch.setattr(losses, "policy_loss", penalized)
    edited = agent(mode)
    update(edited, chunk)
    assert_compiled_if(mode, edited)
    assert all(moved(snapshot(actor(shipped_agent)), actor(edited)))
