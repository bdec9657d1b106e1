"""What PPO's update reads: the latest chunk with its GAE advantages, and each epoch's minibatches.

A feed-forward policy trains on shuffled transitions; a recurrent one on whole worker sequences (its
GRU replays each from the stored state), shuffled by worker.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple

import torch

from digideep.agents.ppo import losses
from digideep.agents.ppo.policy import ActorCriticPolicy
from digideep.agents.utils import ObservationAdapter

__all__ = ["Minibatch", "Sequences", "advantage_chunk", "minibatches"]


class Minibatch(NamedTuple):
    """Transitions of a PPO minibatch (or, stacked, of a whole chunk), ``B`` rows each.

    Attributes:
        observations: ``(B, obs_dim)`` float32, or uint8 for images (scaled on the device by the CNN).
        actions: ``(B, *act_shape)`` float32 (Box) or ``(B,)`` int64 (Discrete).
        log_probs: ``(B,)`` log-probabilities of the actions when they were taken.
        values: ``(B,)`` value estimates when they were taken.
        advantages: ``(B,)`` GAE advantages.
        returns: ``(B,)`` ``advantages + values``, the value targets.
    """

    observations: torch.Tensor
    actions: torch.Tensor
    log_probs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor


class Sequences(NamedTuple):
    """What a recurrent minibatch replays its GRU from: ``W`` whole worker sequences of ``T`` steps,
    whose rows the :class:`Minibatch` holds worker-major (``B = W * T``).

    Attributes:
        hidden: ``(W, h)`` float32 GRU state before each sequence's first row.
        masks: ``(W, T, 1)`` float32, 0.0 where an episode starts (the state resets there).
    """

    hidden: torch.Tensor
    masks: torch.Tensor


def minibatches(
    chunk: dict[str, torch.Tensor], batch_size: int, recurrent: bool, normalize_advantage: bool
) -> Iterator[tuple[Minibatch, Sequences | None]]:
    """One epoch's minibatches of ``chunk``, shuffled on its device.

    Args:
        chunk: ``{field: (W, T, ...)}`` for every :class:`Minibatch` field, with ``hidden (W, h)`` and
            ``masks (W, T, 1)`` for a recurrent policy; contiguous, so that flattening copies nothing.
        batch_size: rows per minibatch; recurrent minibatches take ``max(1, batch_size // T)`` whole
            sequences. The last minibatch holds what is left.
        recurrent: split by worker into whole sequences (with their :class:`Sequences`), not by row.
        normalize_advantage: normalize the advantages inside each minibatch.

    Yields:
        ``(minibatch, sequences)``; ``sequences`` is None unless ``recurrent``.
    """
    num_workers, num_steps = chunk["advantages"].shape[:2]
    if not recurrent:
        rows = Minibatch(*(chunk[k].reshape(-1, *chunk[k].shape[2:]) for k in Minibatch._fields))
        order = torch.randperm(rows.advantages.shape[0], device=rows.advantages.device)
        shuffled = Minibatch(*(x[order] for x in rows))
        if normalize_advantage:
            shuffled = shuffled._replace(
                advantages=losses.normalize_per_minibatch(shuffled.advantages, batch_size)
            )
        for parts in zip(*(x.split(batch_size) for x in shuffled), strict=True):
            yield Minibatch(*parts), None
        return
    per_batch = min(num_workers, max(1, batch_size // num_steps))
    order = torch.randperm(num_workers, device=chunk["advantages"].device)
    for start in range(0, num_workers, per_batch):
        workers = order[start : start + per_batch]
        batch = Minibatch(*(chunk[k][workers].reshape(-1, *chunk[k].shape[2:]) for k in Minibatch._fields))
        if normalize_advantage:
            batch = batch._replace(
                advantages=losses.normalize_per_minibatch(batch.advantages, batch.advantages.shape[0])
            )
        yield batch, Sequences(chunk["hidden"][workers], chunk["masks"][workers])


def advantage_chunk(
    tensors: Mapping[str, torch.Tensor],
    observations: ObservationAdapter,
    policy: ActorCriticPolicy,
    prefix: str,
    gamma: float,
    gae_lambda: float,
) -> dict[str, torch.Tensor]:
    """The chunk's rows ``:T`` with GAE advantages and returns, what :func:`minibatches` splits.

    Args:
        tensors: the agent's :meth:`~digideep.agents.ppo.agent.PPO.batch_keys` of a chunk, ``(W, T + 1, ...)``
            each, on the device.
        observations: the agent's observation adapter.
        policy: the policy (values of the final prestep where no action was taken, and of the true final
            observations of truncated episodes; no gradient).
        prefix: the agent's keys' prefix, ``/agents/<name>/``.
        gamma: discount.
        gae_lambda: GAE lambda.

    Returns:
        contiguous ``{field: (W, T, ...)}`` for every :class:`Minibatch` field, ``masks (W, T, 1)`` and
        ``hidden (W, h)`` (the GRU state before row 0).
    """
    obs = observations.from_batch(tensors, "/observations")
    num_steps = obs.shape[1] - 1
    if num_steps < 1:
        raise ValueError("PPO needs a chunk of at least one step plus the final prestep")
    masks = tensors["/masks"].float().reshape(*obs.shape[:2], 1)
    hidden = tensors[prefix + "hidden_state"].float()
    values = tensors[prefix + "artifacts/values"].float().reshape(obs.shape[:2])
    flags = {
        k: tensors[f"/{k}"][:, :num_steps].float().reshape(-1, num_steps)
        for k in ("rewards", "terminals", "truncations")
    }
    with torch.no_grad():
        if torch.isnan(values[:, -1]).any():  # no final action: evaluate the final prestep here
            features, _ = policy.features(obs[:, -1], hidden[:, -1], masks[:, -1])
            values = torch.cat([values[:, :-1], policy.value(features).unsqueeze(-1)], dim=1)
        next_values = torch.zeros_like(flags["rewards"])
        truncated = flags["truncations"] > 0
        if truncated.any():
            next_obs = observations.from_batch(tensors, "/next_observations")[:, :num_steps][truncated]
            # the state after acting at row t is the one stored at row t + 1 (no reset: mask 1)
            after = hidden[:, 1:][truncated]
            features, _ = policy.features(next_obs, after, torch.ones_like(after[:, :1]))
            next_values[truncated] = policy.value(features)
        advantages, returns = losses.gae(
            flags["rewards"],
            values,
            next_values,
            flags["terminals"],
            flags["truncations"],
            masks[:, 1:, 0],
            gamma,
            gae_lambda,
        )
    actions = tensors[prefix + "actions"][:, :num_steps]
    chunk = {
        "observations": obs[:, :num_steps],
        "masks": masks[:, :num_steps],
        "hidden": hidden[:, 0],
        "actions": actions if policy.discrete else actions.float(),
        "log_probs": tensors[prefix + "artifacts/action_log_probs"][:, :num_steps]
        .float()
        .reshape(-1, num_steps),
        "values": values[:, :num_steps],
        "advantages": advantages,
        "returns": returns,
    }
    return {key: value.contiguous() for key, value in chunk.items()}  # minibatches() flattens views
