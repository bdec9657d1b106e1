"""Samplers composed of units, as in docs/samplers.md: a replay sampler and a rollout sampler.

Run from the repository root (it writes a small Zarr memory into a temporary folder)::

    .venv/bin/python docs/examples/samplers.py
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

from digideep.environment.explorer import Explorer
from digideep.environment.make_environment import MakeEnvironment
from digideep.environment.random_agent import RandomAgent
from digideep.memory import (
    Memory,
    RolloutMemory,
    Sampler,
    check_nan,
    chunk_stats,
    drop_final_prestep,
    flatten_first_two,
    get_last_chunk,
    inspect_shapes,
    minibatch_iterator,
    uniform_transitions,
)


# --8<-- [start:samplers]
def replay_sampler(keys: Sequence[str], batch_size: int = 64, num_batches: int = 4, seed: int = 0) -> Sampler:
    """Off-policy: ``num_batches`` minibatches of uniform transitions, ``{key: (N, B, ...)}``."""
    return Sampler(
        [uniform_transitions],
        {"batch_size": batch_size, "num_batches": num_batches, "keys": list(keys), "seed": seed},
    )


def rollout_sampler(num_minibatches: int = 4, epochs: int = 2, seed: int = 0) -> Sampler:
    """On-policy: shuffled minibatches of the latest chunk, ``epochs`` passes, ``{key: (n, ...)}`` each."""
    return Sampler(
        [get_last_chunk, drop_final_prestep, flatten_first_two, minibatch_iterator],
        {"num_minibatches": num_minibatches, "epochs": epochs, "seed": seed},
    )


# --8<-- [end:samplers]


def random_chunks(count: int, num_workers: int = 2, n_steps: int = 50) -> list[dict]:
    """``count`` chunks of CartPole-v1 explored with random actions."""
    env = {"model_name": "CartPole-v1"}
    observation_space, action_space = MakeEnvironment(**env).spaces()
    agent = RandomAgent("agent", None, observation_space, action_space["agent"], seed=0)
    explorer = Explorer(None, {"agent": agent}, "train", env, num_workers, n_steps)
    try:
        return [explorer.update() for _ in range(count)]
    finally:
        explorer.close()


def main(folder: Path) -> None:
    chunks = random_chunks(3)
    # --8<-- [start:use]
    keys = ["/observations", "/agents/agent/actions", "/rewards", "/next_observations", "/terminals"]
    sampler = replay_sampler(keys)
    sampler.insert(1, check_nan)  # debug units: raise on NaN/inf, log shapes
    sampler.insert(2, inspect_shapes)
    with Memory(folder / "train.zarr", num_workers=2, capacity=1000) as memory:  # closing waits for Zarr
        for chunk in chunks:
            memory.store(chunk)
        batch = sampler(memory)  # {"/observations": (4, 64, 4), ..., "/indices": (4, 64, 2)}

    rollout = RolloutMemory(num_workers=2)
    rollout.store(chunks[-1])
    sampler = rollout_sampler()
    sampler.insert(2, check_nan)  # after drop_final_prestep: the NaN placeholders are gone
    sampler.insert(3, chunk_stats)  # mean and std of every key, into the log and the Monitor
    minibatches = list(sampler(rollout))  # 2 epochs x 4 minibatches of 25 rows
    # --8<-- [end:use]
    print({key: value.shape for key, value in batch.items()})
    print(len(minibatches), {key: value.shape for key, value in minibatches[0].items()})


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    with tempfile.TemporaryDirectory() as tmp:
        main(Path(tmp))
