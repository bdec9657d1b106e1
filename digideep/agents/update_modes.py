"""How an agent's update function runs: eagerly, compiled, or replayed as a CUDA graph.

Every agent writes its update once, in ``agents/<method>/``, as a function of tensors: a minibatch
in, metrics out as 0-d tensors, the losses, ``torch.autograd`` gradients, optimizer steps and target
updates inside. :func:`in_mode` transforms that same function for one of these modes (the agents'
``update_mode`` argument); none of them derives a gradient again:

- ``eager``: the function itself, plain PyTorch, bit-reproducible run to run and across a resume.
- ``compile``: ``torch.compile(fn, dynamic=False)``: inductor fuses the forward and the backward into
  a few kernels (C++ on the CPU, Triton on CUDA). The first calls compile (inductor's on-disk cache
  shortens that in later runs). Reproducible run to run and across a resume in compile mode, but not
  bit-identical to eager.
- ``cudagraphs``: CUDA only (:class:`CudaGraphUpdate`). The first :attr:`CudaGraphUpdate.WARMUP` calls of each variant run
  eagerly on a side stream, the next one captures the whole step (forward, backward, optimizer,
  Polyak) into a ``torch.cuda.CUDAGraph`` and every later call copies its inputs into the graph's
  static tensors and replays it: one launch per gradient step. The optimizers must be capturable
  (:func:`~digideep.agents.utils.make_adam` with ``capturable=True``). Opt-in: never chosen by ``auto``.
  A step that cannot be captured (it reads a value to the host) stops the run in one line.
- ``auto``: the mode each agent's ``auto_update_mode`` picks for the device at hand (docs/measurements.md
  gives the figures behind each rule); the choice is logged with why.

Variants: keyword arguments that are Python values (e.g. ``actor_step=True``) select a variant;
``compile`` specializes on them and ``cudagraphs`` captures one graph per variant and input shape.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from digideep.errors import UsageError

__all__ = [
    "RECOMPILE_LIMIT",
    "UPDATE_MODES",
    "CudaGraphUpdate",
    "acting_only",
    "check_update_mode",
    "compiler_missing",
    "in_mode",
]

log = logging.getLogger(__name__)

UPDATE_MODES = ("eager", "compile", "cudagraphs", "auto")

Metrics = dict[str, torch.Tensor]


def check_update_mode(mode: str, device: torch.device, agent: str) -> None:
    """Refuse, in one line, a mode that cannot run on ``device`` (before anything is trained).

    Raises:
        UsageError: an unknown mode, ``cudagraphs`` off CUDA, or ``compile`` on a CPU without a C++
            compiler.
    """
    if mode not in UPDATE_MODES:
        raise UsageError(
            f"agent '{agent}': update_mode {mode!r} is not one of {', '.join(UPDATE_MODES)}; fix the "
            "agent's args in the params file"
        )
    if mode == "cudagraphs" and device.type != "cuda":
        raise UsageError(
            f"agent '{agent}': update_mode 'cudagraphs' needs a CUDA device and this agent runs on "
            f"{device}; use update_mode 'compile' or 'eager'"
        )
    if mode == "compile" and device.type == "cpu" and compiler_missing():
        raise UsageError(
            f"agent '{agent}': update_mode 'compile' needs a C++ compiler on the CPU (set $CXX, or "
            "install g++ or clang++); or use update_mode 'eager'"
        )


def acting_only(args: dict[str, Any]) -> dict[str, Any]:
    """An agent's constructor args for acting alone (``play``, an exported model): no update runs, so
    the update mode it trained with is set to eager, which runs on every device; a session trained
    with ``cudagraphs`` on a GPU then plays and exports on a CPU."""
    return {**args, "update_mode": "eager"} if "update_mode" in args else dict(args)


def compiler_missing() -> bool:
    """Whether inductor lacks the C++ compiler it builds its CPU kernels with."""
    return not any(shutil.which(c) for c in (os.environ.get("CXX", ""), "g++", "clang++") if c)


RECOMPILE_LIMIT = 512
"""Dynamo's ``recompile_limit`` once a ``compile`` update exists (its default is 8). Each agent's
compiled update is one more cache entry of the same code, because dynamo guards on the identity of
the optimizer that the update passes to :func:`~digideep.agents.utils.adam_step` (one to three
entries per agent: SAC's ``minimize`` frames add theirs). Past the limit dynamo silently runs that
code uncompiled for the rest of the process; this limit keeps every agent of a process compiled."""


def in_mode(fn: Callable[..., Metrics], mode: str, name: str) -> Callable[..., Metrics]:
    """``fn`` transformed to run in ``mode``: ``fn`` itself (``eager``), ``torch.compile(fn)``
    (``compile``), or a :class:`CudaGraphUpdate` of it (``cudagraphs``).

    Args:
        fn: the update: tensors or tuples of tensors (a ``NamedTuple`` batch) in, and as keywords Python
            values selecting a variant; ``{name: 0-d tensor}`` out.
        mode: ``eager``, ``compile`` or ``cudagraphs`` (resolve ``auto`` first).
        name: for log lines, e.g. ``"agent 'agent'"``.
    """
    if mode == "eager":
        return fn
    if mode == "compile":
        config = torch._dynamo.config
        config.recompile_limit = max(config.recompile_limit, RECOMPILE_LIMIT)
        config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, RECOMPILE_LIMIT)
        return torch.compile(fn, dynamic=False)
    if mode == "cudagraphs":
        return CudaGraphUpdate(fn, name)
    raise ValueError(f"an update runs eager, compile or cudagraphs, not {mode!r}")


class CudaGraphUpdate:
    """An agent's update replayed as CUDA graphs: one graph per variant and input shapes, each
    captured after :attr:`WARMUP` eager calls.

    Args:
        fn: the update, as for :func:`in_mode`.
        name: for log lines and errors, e.g. ``"agent 'agent'"``.
    """

    WARMUP = 3
    """Eager calls of a variant before it is captured (allocator and optimizer state settle)."""

    def __init__(self, fn: Callable[..., Metrics], name: str) -> None:
        self.fn, self.name = fn, name
        self._graphs: dict[Any, _Graph] = {}
        self._calls: dict[Any, int] = {}

    def __call__(self, *args: Any, **variant: Any) -> Metrics:
        """One update on ``args``; returns metric tensors that the next call does not overwrite."""
        leaves, spec = pytree.tree_flatten(args)
        key = (tuple(sorted(variant.items())), str(spec), tuple((t.shape, t.dtype) for t in leaves))
        graph = self._graphs.get(key)
        if graph is not None:
            return graph.replay(leaves)
        calls = self._calls.get(key, 0)
        self._calls[key] = calls + 1
        if calls < self.WARMUP:
            # capture needs its warm-up on a side stream (cuDNN/cuBLAS handles, allocator pools)
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                out = self.fn(*args, **variant)
            torch.cuda.current_stream().wait_stream(stream)
            return out
        log.info("%s: capturing a CUDA graph of the update (variant %s)", self.name, dict(variant) or "-")
        try:
            graph = _Graph(self.fn, leaves, spec, variant)
        except RuntimeError as error:  # the eager warm-up ran: this is the capture's own failure
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise UsageError(
                f"{self.name}: the update could not be captured as a CUDA graph ({first}); an update that "
                "reads a value to the host (.item(), a Python branch on a tensor) cannot be: remove it, or "
                "use update_mode 'compile' or 'eager'"
            ) from error
        self._graphs[key] = graph
        return graph.replay(leaves)


class _Graph:
    """One captured variant: static inputs, the graph (captured, not yet run), its static outputs."""

    def __init__(
        self, fn: Callable[..., Metrics], leaves: list[torch.Tensor], spec: pytree.TreeSpec, variant: dict
    ) -> None:
        self.inputs = [t.clone() for t in leaves]
        self.graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        with torch.cuda.graph(self.graph):
            self.outputs = fn(*pytree.tree_unflatten(self.inputs, spec), **variant)

    def replay(self, leaves: list[torch.Tensor]) -> Metrics:
        for static, tensor in zip(self.inputs, leaves, strict=True):
            static.copy_(tensor, non_blocking=True)
        self.graph.replay()
        return {name: value.clone() for name, value in self.outputs.items()}
