"""The Runner's own cost per iteration on the reference schedule, against a SAC gradient step.

    .venv/bin/python bench/bench_runner_cost.py                     # Hopper-v5, ~2 minutes
    .venv/bin/python bench/bench_runner_cost.py --env HalfCheetah-v5 --repeats 9 --iterations 400

The shipped off-policy files alternate one frame and one gradient step (``n_steps`` 1), so every
frame passes through the whole loop: the explorer's bookkeeping, storing a chunk of one row (and its
write-through to Zarr), drawing a minibatch, the agent's metrics, the schedule itself. This bench
asks whether that costs little next to the work it wraps.

It builds a real Runner from the shipped ``params.mujoco_sac`` (``learning_starts`` 1000, a
100,000-frame memory in a temporary session, as ``digideep train`` writes it; MLflow and the CPU/GPU
sampler off), runs past the warm-up, then times blocks of ``--iterations`` of each of these, in
turn, ``--repeats`` times (medians per call):

- **iteration**: the plain loop as ``digideep train --no-prefect`` drives it: ``Runner.schedule``'s
  stages called one after the other (the epoch-end stages excepted: they come once per 1,000);
- **gradient step**: the agent's update function alone on one minibatch (``agent._update``);
- **act**: the policy's action for one frame (``agent.action_generator``);
- **env step**: one step of the same environment stack (wrappers included), made apart.

The Runner's own cost is ``iteration - gradient step - act - env step``, printed as a share of the
gradient step (goal: at most 5 %), and split by the Runner's own stage timers (medians over the
iteration blocks): the explorer's bookkeeping, storing, sampling, the update's batch and metrics
around the gradient step, and the schedule itself. Measure on a quiet machine: the figures are medians, but a load
that comes and goes between blocks still moves a difference of small numbers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("MUJOCO_GL", "egl")
sys.path.insert(0, str(ROOT))  # params/ beside digideep/

import numpy as np  # noqa: E402
import torch  # noqa: E402
from common import machine  # noqa: E402

from digideep.pipeline.devices import DeviceChoice, set_torch_threads  # noqa: E402
from digideep.pipeline.params import load_params_module  # noqa: E402
from digideep.pipeline.runner import Runner  # noqa: E402
from digideep.pipeline.session import Session  # noqa: E402
from digideep.utility.profiling import profiler  # noqa: E402


def build_runner(root: Path, env_id: str, seed: int) -> Runner:
    """A Runner of the shipped SAC file on ``env_id``, with the shipped schedule and a short warm-up."""
    module = load_params_module("params.mujoco_sac")
    cpanel = {**module.cpanel, "model_name": env_id, "seed": seed, "learning_starts": 1000}
    cpanel.update(buffer_size=100_000, test_interval=0, save_interval=0, device="cpu")
    params = module.gen_params(cpanel)
    params["tracking"] = {"enabled": False}
    params["runner"]["stats_interval"] = 0
    set_torch_threads(params["session"]["torch_threads"])
    return Runner(Session(root=root, name="bench"), params, devices=DeviceChoice("cpu"), modes=("train",))


STAGES = ("explore", "store", "sample", "update")


def plain_loop(runner: Runner, iterations: int) -> float:
    """Seconds per iteration of ``iterations`` iterations of the plain loop, walking ``schedule``;
    the Runner's own stage timers (:data:`~digideep.utility.profiling.profiler`) record each stage."""
    target = runner.counters.iteration + iterations
    profiler.reset()
    start = time.perf_counter()
    for stage, function in runner.schedule():
        function()
        if stage == "update" and runner.counters.iteration >= target:
            break
    return (time.perf_counter() - start) / iterations


def stage_means() -> dict[str, float]:
    """Seconds per call of each iteration stage in the last :func:`plain_loop` block."""
    summary = profiler.summary()
    return {stage: summary[f"/{stage}"]["mean"] for stage in STAGES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Hopper-v5", help="a Gymnasium MuJoCo id (default Hopper-v5)")
    parser.add_argument("--iterations", type=int, default=300, help="iterations (or calls) per block")
    parser.add_argument("--repeats", type=int, default=7, help="blocks of each kind, alternated")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory(prefix="bench_runner_cost_") as tmp:
        runner = build_runner(Path(tmp), args.env, args.seed)
        try:
            agent = runner.agents["agent"]
            explorer = runner.explorers["train"]
            envs = explorer.make_environment.create_envs(1, "train", args.seed + 1, False, None)
            envs.reset(seed=args.seed + 1)
            plain_loop(runner, 1100)  # the warm-up, then the first gradient steps
            memory = runner.memories[runner.built.agent_memory["agent"]]
            batch = agent.prepare(agent.sample(memory))
            one = type(batch)(*(field[0] for field in batch))
            noise = agent.step_noise(batch)  # the draws a gradient step takes (SAC: its sampling noise)
            noise = None if noise is None else noise[0]
            obs, hidden, masks = explorer._obs, explorer._hidden["agent"], np.ones((1, 1), np.float32)
            actions = {"agent": agent.action_generator(obs, hidden, masks)["actions"]}

            def step() -> float:
                start = time.perf_counter()
                for _ in range(args.iterations):
                    agent._update(one, noise, actor_step=True)
                return (time.perf_counter() - start) / args.iterations

            def act() -> float:
                start = time.perf_counter()
                for _ in range(args.iterations):
                    agent.action_generator(obs, hidden, masks)
                return (time.perf_counter() - start) / args.iterations

            def env_step() -> float:
                start = time.perf_counter()
                for _ in range(args.iterations):
                    envs.step(actions)
                return (time.perf_counter() - start) / args.iterations

            stages: dict[str, list[float]] = {stage: [] for stage in STAGES}

            def iteration() -> float:
                seconds = plain_loop(runner, args.iterations)
                for stage, mean in stage_means().items():
                    stages[stage].append(mean)
                return seconds

            kinds = {
                "iteration": iteration,
                "gradient step": step,
                "act": act,
                "env step": env_step,
            }
            times: dict[str, list[float]] = {kind: [] for kind in kinds}
            for _ in range(args.repeats):
                for kind, run in kinds.items():
                    times[kind].append(run())
            envs.close()
        finally:
            runner.close()
            runner.session.close()
    median = {kind: statistics.median(values) for kind, values in times.items()}
    stage = {name: statistics.median(values) for name, values in stages.items()}
    own = median["iteration"] - median["gradient step"] - median["act"] - median["env step"]
    parts = {  # where the Runner's own cost goes
        "explorer's bookkeeping (explore - act - env step)": stage["explore"]
        - median["act"]
        - median["env step"],
        "memory store (ring and write-through)": stage["store"],
        "replay draw and gather (sample)": stage["sample"],
        "batch to tensors and metrics (update - gradient step)": stage["update"] - median["gradient step"],
        "the schedule, timers and counters (iteration - stages)": median["iteration"] - sum(stage.values()),
    }
    print(
        f"\nparams.mujoco_sac on {args.env}, n_steps 1, one gradient step per frame; "
        f"{args.repeats} blocks of {args.iterations}, medians per call (min-max over blocks):"
    )
    for kind, values in times.items():
        print(f"  {kind:<14} {1e3 * median[kind]:7.3f} ms  ({1e3 * min(values):.3f}-{1e3 * max(values):.3f})")
    print(
        f"  Runner's own   {1e3 * own:7.3f} ms a frame = {100 * own / median['gradient step']:.1f} % of a "
        "gradient step (goal <= 5 %), of which:"
    )
    for name, seconds in parts.items():
        print(f"    {1e3 * seconds:6.3f} ms  {name}")
    print(f"\n{machine()}, torch {torch.__version__}, {torch.get_num_threads()} torch thread(s)")


if __name__ == "__main__":
    main()
