"""The Runner's own cost per iteration on the reference schedule, against a SAC gradient step.

    .venv/bin/python bench/bench_runner_cost.py                     # Hopper-v5
    .venv/bin/python bench/bench_runner_cost.py --env HalfCheetah-v5 --repeats 9 --iterations 400
    .venv/bin/python bench/bench_runner_cost.py --clock thread      # on a shared machine

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
- **env step**: one step of the same environment stack (wrappers included), made apart;
- **draw and update bookkeeping**: the replay draw and the update stage with the gradient step
  replaced by a stub that returns a real step's metrics, called back to back: what the Runner's code
  of those two stages costs with warm caches, beside what it costs in the loop.

The Runner's own cost is ``iteration - gradient step - act - env step``, printed as a share of the
gradient step (goal: at most 5 %). The iteration blocks time each stage and the act, the env step and
the gradient step as the loop calls them, which splits that cost (medians over the blocks) into the
Runner's code (the explorer's bookkeeping, storing, sampling, the update's batch and metrics around
the gradient step, the schedule itself) and how much longer the act, the env step and the gradient
step take in the loop than alone: each runs there after other work has had the core and its caches
(the other pieces, and on a shared machine other processes). The timers' own calls to the clock are
counted in the Runner's code.

Measure on a quiet machine: the figures are medians, but a load that comes and goes between blocks
still moves a difference of small numbers. On a shared one, ``--clock thread`` counts the training
thread's CPU time instead of the elapsed time, which leaves out the time other processes hold the
core (but not the caches they evict).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("MUJOCO_GL", "egl")
sys.path.insert(0, str(ROOT))  # params/ beside digideep/

import numpy as np  # noqa: E402
import torch  # noqa: E402
from common import machine  # noqa: E402

from digideep.pipeline.devices import DeviceChoice, set_torch_threads  # noqa: E402
from digideep.pipeline.params import load_params_module  # noqa: E402
from digideep.pipeline.runner import Runner  # noqa: E402
from digideep.storage.session import Session  # noqa: E402


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
CLOCKS = {"wall": time.perf_counter, "thread": time.thread_time}
"""``--clock``: wall-clock seconds, or the CPU seconds of the training thread."""


class Timed:
    """``function`` with a timer: ``clock`` seconds spent in its calls since :meth:`reset`."""

    def __init__(self, function: Callable[..., Any], clock: Callable[[], float]) -> None:
        self.function, self.clock, self.seconds = function, clock, 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        start = self.clock()
        try:
            return self.function(*args, **kwargs)
        finally:
            self.seconds += self.clock() - start

    def reset(self) -> None:
        self.seconds = 0.0


def plain_loop(runner: Runner, iterations: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds per iteration of ``iterations`` iterations of the plain loop, walking ``schedule``."""
    target = runner.counters.iteration + iterations
    start = clock()
    for stage, function in runner.schedule():
        function()
        if stage == "update" and runner.counters.iteration >= target:
            break
    return (clock() - start) / iterations


def repeated(function: Callable[[], Any], calls: int, clock: Callable[[], float]) -> float:
    """Seconds per call of ``calls`` calls of ``function``."""
    start = clock()
    for _ in range(calls):
        function()
    return (clock() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Hopper-v5", help="a Gymnasium MuJoCo id (default Hopper-v5)")
    parser.add_argument("--iterations", type=int, default=300, help="iterations (or calls) per block")
    parser.add_argument("--repeats", type=int, default=7, help="blocks of each kind, alternated")
    parser.add_argument(
        "--clock",
        choices=list(CLOCKS),
        default="wall",
        help="wall: elapsed seconds (default); thread: the training thread's CPU seconds, which leave "
        "out the time other processes hold the core (steadier on a shared machine; the memory's "
        "background writes are not counted)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    clock, n = CLOCKS[args.clock], args.iterations
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
            update, action_generator = agent._update, agent.action_generator

            # timers around the stages and around the three pieces, as the loop calls them
            stages = {stage: Timed(getattr(runner, stage), clock) for stage in STAGES}
            pieces = {
                "gradient step": Timed(update, clock),
                "act": Timed(action_generator, clock),
                "env step": Timed(explorer.envs.step, clock),
            }
            for stage, timed in stages.items():
                setattr(runner, stage, timed)  # what schedule() yields
            agent._update, agent.action_generator = pieces["gradient step"], pieces["act"]
            explorer.envs.step = pieces["env step"]
            in_loop: dict[str, list[float]] = {name: [] for name in [*stages, *pieces]}

            def iteration() -> float:
                for timed in [*stages.values(), *pieces.values()]:
                    timed.reset()
                seconds = plain_loop(runner, n, clock)
                for name, timed in [*stages.items(), *pieces.items()]:
                    in_loop[name].append(timed.seconds / n)
                return seconds

            step_metrics = update(one, noise, actor_step=True)  # what the stub below returns

            def draw_and_bookkeeping() -> float:
                """The replay draw and the update stage with a stub for the gradient step, back to back."""
                timed_update = agent._update
                agent._update = lambda *args, **kwargs: step_metrics
                try:
                    return repeated(lambda: agent.update(agent.sample(memory)), n, clock)
                finally:
                    agent._update = timed_update

            kinds = {
                "iteration": iteration,
                "draw and update bookkeeping": draw_and_bookkeeping,
                "gradient step": lambda: repeated(lambda: update(one, noise, actor_step=True), n, clock),
                "act": lambda: repeated(lambda: action_generator(obs, hidden, masks), n, clock),
                "env step": lambda: repeated(lambda: envs.step(actions), n, clock),
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
    inner = {name: statistics.median(values) for name, values in in_loop.items()}
    own = median["iteration"] - median["gradient step"] - median["act"] - median["env step"]
    code = {  # where the Runner's own cost goes: its code...
        "explorer's bookkeeping (explore - act - env step)": inner["explore"]
        - inner["act"]
        - inner["env step"],
        "memory store (ring and write-through)": inner["store"],
        "replay draw and gather (sample)": inner["sample"],
        "batch to tensors and metrics (update - gradient step)": inner["update"] - inner["gradient step"],
        "the schedule and counters (iteration - stages)": median["iteration"]
        - sum(inner[stage] for stage in STAGES),
    }
    slower = {name: inner[name] - median[name] for name in pieces}  # ...and the pieces' slowdown there
    print(
        f"\nparams.mujoco_sac on {args.env}, n_steps 1, one gradient step per frame; {args.clock} clock; "
        f"{args.repeats} blocks of {n}, medians per call (min-max over blocks):"
    )
    for kind, values in times.items():
        print(f"  {kind:<28} {1e3 * median[kind]:7.3f} ms  ({1e3 * min(values):.3f}-{1e3 * max(values):.3f})")
    label = "Runner's own"
    print(
        f"  {label:<28} {1e3 * own:7.3f} ms a frame = {100 * own / median['gradient step']:.1f} % of a "
        "gradient step (goal <= 5 %), of which:"
    )
    for name, seconds in code.items():
        print(f"    {1e3 * seconds:6.3f} ms  {name}")
    print(
        f"    {1e3 * sum(slower.values()):6.3f} ms  the act, env step and gradient step, slower in the loop "
        "than alone: " + ", ".join(f"{name} {1e3 * seconds:+.3f}" for name, seconds in slower.items())
    )
    in_loop_draw = inner["sample"] + inner["update"] - inner["gradient step"]
    print(
        f"    of the draw and the update's bookkeeping ({1e3 * in_loop_draw:.3f} ms in the loop), "
        f"{1e3 * median['draw and update bookkeeping']:.3f} ms when called back to back (warm caches)"
    )
    runner_code = sum(code.values())
    print(
        f"  the Runner's code (the first five) {1e3 * runner_code:.3f} ms = "
        f"{100 * runner_code / median['gradient step']:.1f} % of a gradient step"
    )
    print(f"\n{machine()}, torch {torch.__version__}, {torch.get_num_threads()} torch thread(s)")


if __name__ == "__main__":
    main()
