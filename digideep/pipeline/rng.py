"""The random generators a run owns: seeding, and their states for checkpoints.

A checkpoint holds the generators that digideep's own code draws from, so that a resumed run draws
what an uninterrupted one draws: numpy's and torch's global generators (explorers and agents draw
from them; samplers and noise processes keep their own, saved with them) and :data:`run_random`, a
``random.Random`` of the run's own for user code that wants Python's ``random`` API.

Python's global ``random`` is seeded at the start but not checkpointed: libraries in the same
process draw from it at moments that depend on timing (Prefect's and urllib3's retry jitter, for
one), so its state at a checkpoint differs from run to run and restoring it would promise what it
cannot keep. Code that must resume exactly draws from :data:`run_random` instead.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

__all__ = ["rng_state", "run_random", "seed_everything", "set_rng_state"]

run_random = random.Random(0)
"""The run's own ``random.Random``: seeded with the run's seed and checkpointed (user code's stream)."""


def seed_everything(seed: int) -> None:
    """Seed the run's generators (:data:`run_random`, numpy's, torch's) and Python's global one."""
    random.seed(seed)
    run_random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """The state of every generator a run owns (see the module docstring)."""
    state: dict[str, Any] = {
        "run_random": run_random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        # a process that never used CUDA has the seeded CUDA generators; a resume seeds them again
        state["torch_cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore :func:`rng_state`."""
    run_random.setstate(state["run_random"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"].cpu())
    if "torch_cuda" in state and torch.cuda.is_available():
        saved = state["torch_cuda"][: torch.cuda.device_count()]  # resumed on fewer GPUs: those there are
        torch.cuda.set_rng_state_all([s.cpu() for s in saved])
