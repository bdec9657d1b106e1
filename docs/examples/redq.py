"""A REDQ-style SAC (Chen, Wang, Zhou, Ross 2021, "Randomized Ensembled Double Q-Learning"), written
outside the library as a researcher writes a variant: the expressions it changes, on SAC's extension
points. ``docs/new-agent.md`` walks through it; ``tests/docs/test_examples.py`` trains it in every
update mode that runs on the machine and resumes it after a kill.

REDQ differs from SAC in three places: an ensemble of ``N`` critics (10 in the paper), a Q target
that takes the minimum over a random subset of ``M`` of them (2), and an actor that follows the mean
of all ``N``. The first is SAC's ``num_critics``; the other two are the policy's reductions of the
critics, ``target_q`` and ``actor_q``. The update is SAC's ``gradient_step``, so REDQ trains in every
``update_mode`` and ``precision`` and logs SAC's metrics. Its high update-to-data ratio (20 gradient
steps per frame in the paper) is a parameter (``updates_per_step``), not code.
"""

from __future__ import annotations

from typing import Any

import torch

from digideep.agents.sac import SAC
from digideep.agents.sac.policy import SACPolicy


# --8<-- [start:policy]
def subset_min(next_q: torch.Tensor, subset: int) -> torch.Tensor:
    """``(B,)`` minimum over a random subset of ``subset`` critics of ``next_q`` ``(B, N)``: REDQ's
    in-target minimization. The subset is drawn with ``torch.rand`` (one draw per step, on the
    tensors' device), which compiled code and CUDA graphs replay as they should."""
    chosen = torch.rand(next_q.shape[-1], device=next_q.device).argsort()[:subset]
    return next_q[:, chosen].min(dim=-1).values


class REDQPolicy(SACPolicy):
    """SAC's networks with REDQ's reductions of the critics.

    Args:
        *args: :class:`~digideep.agents.sac.policy.SACPolicy` arguments.
        target_subset: critics in each target's minimum (M).
        **kwargs: :class:`~digideep.agents.sac.policy.SACPolicy` keyword arguments.
    """

    def __init__(self, *args: Any, target_subset: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.target_subset = target_subset

    def target_q(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``(B,)`` the minimum over a random subset of ``target_subset`` target critics."""
        return subset_min(self.q_values(obs, actions, target=True), self.target_subset)

    def actor_q(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``(B,)`` the mean over all critics (weights detached): the actor follows the ensemble."""
        return self.q_values(obs, actions, detach=True).mean(dim=-1)


# --8<-- [end:policy]


# --8<-- [start:agent]
class REDQ(SAC):
    """SAC with ``num_critics`` critics, a target over a random subset of ``target_subset`` of them,
    and an actor on their mean.

    Args:
        num_critics: the ensemble (N, 10 in the paper).
        target_subset: critics in each target's minimum (M, 2 in the paper).
        **params: :class:`~digideep.agents.sac.SAC` arguments.
    """

    def __init__(self, *args: Any, num_critics: int = 10, target_subset: int = 2, **params: Any) -> None:
        if not 1 <= target_subset <= num_critics:
            raise ValueError(f"need 1 <= target_subset <= num_critics, got {target_subset}, {num_critics}")
        self.target_subset = int(target_subset)
        super().__init__(*args, num_critics=num_critics, **params)

    def build_policy(self) -> REDQPolicy:
        """SAC's networks (:meth:`SAC.build_policy`'s arguments) as a :class:`REDQPolicy`."""
        return REDQPolicy(
            self.obs.dim,
            self.scaler.dim,
            self.hidden_sizes,
            self.num_critics,
            self.activation,
            initial_alpha=self.initial_alpha,
            learn_alpha=self.autotune,
            target_subset=self.target_subset,
        )


# --8<-- [end:agent]
