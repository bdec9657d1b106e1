"""A module's parameters as views of one flat buffer.

Why: PPO's networks are small (64x64), so a minibatch step is bound by per-call overhead, not
arithmetic. With the parameters in one tensor, Adam updates one tensor and gradient clipping takes
one norm (of autograd's gradients concatenated), instead of a Python loop and a kernel per parameter
in each (docs/measurements.md gives the saving). The modules keep their own named parameters, so
state dicts and everything reading ``policy.actor`` are unchanged; only the optimizer sees the flat
tensor.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["FlatParameters"]


class FlatParameters:
    """Re-seats every trainable parameter of ``module`` into one buffer (values kept).

    Args:
        module: the network; its trainable parameters must share one dtype and device.

    Attributes:
        param: the flat ``(N,)`` parameter the optimizer steps, with the gradients of :attr:`params`
            concatenated in their order.
        params: the module's parameters, in ``module.parameters()`` order.
    """

    def __init__(self, module: nn.Module) -> None:
        self.params = [p for p in module.parameters() if p.requires_grad]
        first = self.params[0]
        if any(p.dtype != first.dtype or p.device != first.device for p in self.params):
            raise ValueError("FlatParameters needs parameters of one dtype and device")
        total = sum(p.numel() for p in self.params)
        self.param = nn.Parameter(torch.empty(total, dtype=first.dtype, device=first.device))
        offset = 0
        with torch.no_grad():
            for p in self.params:
                value = self.param[offset : offset + p.numel()].view_as(p)
                value.copy_(p)
                p.data = value
                offset += p.numel()
