"""digideep's home-made speed pieces against what torch offers for the same job, in the same run.

    python bench/bench_library_pieces.py [--calls 200] [--repeats 9] [--threads 1]

Each piece is kept only where it is faster here; this bench is what says so. At HalfCheetah sizes
(observation 17, action 6, 256x256 networks, batch 256), on one CPU thread by default:

- **Adam**: :func:`digideep.agents.utils.adam_step`, which calls the functional
  ``torch.optim.adam.adam`` on the optimizer's own state with gradients from ``torch.autograd.grad``,
  against the library's way, each ``.grad`` set and ``optimizer.step()``. Both on the same fused
  ``torch.optim.Adam`` of the twin critics (made by :func:`~digideep.agents.utils.make_adam`), with
  the same gradients: the same kernel and the same numbers, so only the Python around it differs.
- **Twin critics**: :class:`digideep.agents.networks.EnsembleMLP` (members one after another, a chain
  of ``torch.addmm`` over stacked parameters) against ``torch.func``: two ``nn.Sequential`` critics
  stacked with ``torch.func.stack_module_state`` and evaluated with ``torch.vmap`` over
  ``torch.func.functional_call``. Each timing is a forward and a backward of the sum of both
  critics' values at a batch.

``torch.compile`` against eager runs in ``bench/bench_agents.py`` (the whole update); tensordict's
``CudaGraphModule`` and CUDA graphs need a GPU (``bench/bench_gpu.py``). Each figure is a median of
``--repeats`` timings of ``--calls`` calls, the two ways interleaved; compare the ratios.
"""

from __future__ import annotations

import argparse
import copy
import itertools
from collections.abc import Callable

import torch
from common import interleaved, machine

from digideep.agents.networks import EnsembleMLP, mlp
from digideep.agents.utils import adam_step, make_adam, optimizer_params

OBS, ACT, HIDDEN, BATCH = 17, 6, (256, 256), 256


def adam_ways(calls: int) -> dict[str, Callable[[], None]]:
    """``adam_step`` and ``.grad`` + ``step()`` on one fused Adam of twin critics, fixed gradients."""
    critic = EnsembleMLP(OBS + ACT, HIDDEN, 1, 2)
    optimizer = make_adam(critic.parameters(), 3e-4, torch.device("cpu"))
    params = optimizer_params(optimizer)
    x = torch.randn(BATCH, OBS + ACT)
    grads = torch.autograd.grad(critic(x).pow(2).mean(), params)

    def functional() -> None:
        for _ in range(calls):
            adam_step(optimizer, grads)

    def step() -> None:
        for _ in range(calls):
            for param, grad in zip(params, grads, strict=True):
                param.grad = grad
            optimizer.step()

    return {"adam_step": functional, "optimizer.step()": step}


def critic_ways(calls: int) -> dict[str, Callable[[], None]]:
    """Forward and backward of twin critics: ``EnsembleMLP`` and ``vmap`` over stacked modules."""
    x = torch.randn(BATCH, OBS + ACT)
    ensemble = EnsembleMLP(OBS + ACT, HIDDEN, 1, 2)
    members = [mlp(OBS + ACT, HIDDEN, 1) for _ in range(2)]
    params, buffers = torch.func.stack_module_state(members)
    for value in params.values():
        value.requires_grad_(True)
    skeleton = copy.deepcopy(members[0]).to("meta")

    def one(p: dict, b: dict, inputs: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(skeleton, (p, b), (inputs,))

    stacked = torch.vmap(one, in_dims=(0, 0, None))
    leaves = list(params.values())

    def hand_chained() -> None:
        for _ in range(calls):
            torch.autograd.grad(ensemble(x).sum(), list(ensemble.parameters()))

    def vmapped() -> None:
        for _ in range(calls):
            torch.autograd.grad(stacked(params, buffers, x).sum(), leaves)

    return {"EnsembleMLP": hand_chained, "vmap(functional_call)": vmapped}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per timing")
    parser.add_argument("--repeats", type=int, default=9, help="timings per figure (median reported)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"{machine()}, torch {torch.__version__}, {args.threads} thread(s)")
    for piece, ways in (("Adam step", adam_ways(args.calls)), ("twin critics", critic_ways(args.calls))):
        rates = interleaved(ways, args.repeats, args.calls)
        (ours, mine), (theirs, other) = itertools.islice(rates.items(), 2)
        print(
            f"{piece:<13} {ours}: {1e3 / mine:.3f} ms a call, {theirs}: {1e3 / other:.3f} ms a call; "
            f"{ours} at {mine / other:.2f}x of {theirs}"
        )


if __name__ == "__main__":
    main()
