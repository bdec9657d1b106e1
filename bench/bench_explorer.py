"""Explorer throughput vs. stepping the same Gymnasium vector env by hand (HalfCheetah-v5).

Run: ``python bench/bench_explorer.py [--steps 3000] [--repeats 3] [--profile]``.

For 1 and 4 workers it measures, in one run and on the same machine:

- ``raw``: the vector env that MakeEnvironment builds for the Explorer (SyncVectorEnv in SAME_STEP,
  RecordEpisodeStatistics, EnvState, SingleAgentAdapter), stepped in a plain loop with uniform random
  actions drawn the way RandomAgent draws them;
- ``gym``: ``gymnasium.make_vec`` of the plain env (SAME_STEP, no digideep wrappers), for reference;
- ``explorer``: ``Explorer.update()`` with a :class:`RandomAgent`, chunks of 1000 steps.

It prints steps/s and frames/s and the ratio explorer / raw (goal: >= 0.85). Times are CPU
times of this process (``time.process_time``), which other processes on a shared machine disturb
less than wall-clock time; all three loops are single-process, so the two agree on a quiet machine.
Interleaved repeats; the best of each is reported. ``--profile`` prints a cProfile of the explorer.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from digideep.environment.explorer import Explorer
from digideep.environment.make_environment import MakeEnvironment
from digideep.environment.random_agent import RandomAgent

ENV = {"model_name": "HalfCheetah-v5"}
CHUNK = 1000


def bench_raw(num_workers: int, steps: int) -> float:
    """Steps/s of MakeEnvironment's vector env, stepped by hand."""
    envs = MakeEnvironment(**ENV).create_envs(num_workers, "train", seed=0)
    agent = RandomAgent("agent", None, None, envs.single_action_space["agent"], seed=0)
    masks = np.ones((num_workers, 1), np.float32)
    envs.reset(seed=0)
    start = time.process_time()
    for _ in range(steps):
        envs.step({"agent": agent._sample(masks.shape[0])})
    elapsed = time.process_time() - start
    envs.close()
    return steps / elapsed


def bench_gym(num_workers: int, steps: int) -> float:
    """Steps/s of gymnasium.make_vec of the plain env (no digideep wrappers)."""
    envs = gym.make_vec(
        ENV["model_name"],
        num_envs=num_workers,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP, "copy": False},
    )
    rng = np.random.default_rng(0)
    envs.reset(seed=0)
    start = time.process_time()
    for _ in range(steps):
        envs.step(rng.uniform(-1.0, 1.0, size=(num_workers, 6)).astype(np.float32))
    elapsed = time.process_time() - start
    envs.close()
    return steps / elapsed


def make_explorer(num_workers: int) -> Explorer:
    space = MakeEnvironment(**ENV).spaces()[1]["agent"]
    agent = RandomAgent("agent", None, None, space, seed=0)
    return Explorer(None, {"agent": agent}, "train", ENV, num_workers, n_steps=CHUNK, seed=0)


def bench_explorer(num_workers: int, steps: int) -> float:
    """Steps/s of Explorer.update() with a RandomAgent."""
    explorer = make_explorer(num_workers)
    chunks = max(1, steps // CHUNK)
    explorer.update()  # warm up: first chunk allocates and touches everything
    start = time.process_time()
    for _ in range(chunks):
        explorer.update()
    elapsed = time.process_time() - start
    explorer.close()
    return chunks * CHUNK / elapsed


def profile_explorer(num_workers: int) -> None:
    explorer = make_explorer(num_workers)
    explorer.update()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(3):
        explorer.update()
    profile.disable()
    explorer.close()
    pstats.Stats(profile).sort_stats("tottime").print_stats(15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000, help="steps per measurement")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats; the best counts")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the explorer loop")
    args = parser.parse_args()
    print(f"HalfCheetah-v5, {args.steps} steps per measurement, best of {args.repeats}, chunks of {CHUNK}")
    for workers in args.workers:
        best = {"gym": 0.0, "raw": 0.0, "explorer": 0.0}
        for _ in range(args.repeats):
            best["gym"] = max(best["gym"], bench_gym(workers, args.steps))
            best["raw"] = max(best["raw"], bench_raw(workers, args.steps))
            best["explorer"] = max(best["explorer"], bench_explorer(workers, args.steps))
        for name, sps in best.items():
            print(f"  W={workers} {name:9s} {sps:9.0f} steps/s {sps * workers:9.0f} frames/s")
        print(
            f"  W={workers} ratio explorer/raw = {best['explorer'] / best['raw']:.3f}   "
            f"explorer/gym = {best['explorer'] / best['gym']:.3f}   (goal: explorer/raw >= 0.85)"
        )
        if args.profile:
            profile_explorer(workers)


if __name__ == "__main__":
    main()
