"""Assertions and small tools shared by tests in several folders."""

from __future__ import annotations

import socket
import subprocess
from typing import Any

import numpy as np
import pytest
import torch

CUDA = torch.cuda.is_available()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not CUDA, reason="needs a CUDA device"))]
"""Devices a device-aware test runs on: the CPU always, CUDA where this machine has it."""


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def device_args(device: str) -> list[str]:
    """Command-line options that run on ``device``; CUDA runs deterministic, so that they repeat."""
    return ["--device", device, *(["--deterministic"] if device.startswith("cuda") else [])]


def usage_error_line(result: subprocess.CompletedProcess) -> str:
    """The one line a refused command printed: exit status 2 and ``digideep: error: ...`` alone on stderr."""
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("digideep: error: "), result.stderr
    return lines[0]


def assert_same_tensors(a: Any, b: Any, where: str = "") -> None:
    """Nested dicts, lists and tuples of tensors, arrays and plain values are exactly equal.

    ``where`` names the path of the first difference in the failure message.
    """
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same_tensors(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_tensors(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        assert a == b, where


def assert_same_training(expected: dict, actual: dict) -> None:
    """Two checkpoints' states hold the same agents (weights, optimizers, RNG) and progress counters."""
    assert_same_tensors(expected["agents"], actual["agents"], "agents")
    for counter in ("iteration", "frames", "best_test_return", "best_checkpoint"):
        assert expected["counters"][counter] == actual["counters"][counter], counter
