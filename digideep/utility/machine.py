"""The machine a run trains on, in one line: what decides whether the same code and seed give the
same numbers there as elsewhere.

Two machines that run the same commit with the same seeds are promised bit-identical training only
when their floating-point kernels are the same: torch picks its CPU kernels by the instruction set
it finds (``torch.backends.cpu.get_cpu_capability()``: ``DEFAULT``, ``AVX2``, ``AVX512``), oneDNN
and MKL choose theirs by the CPU's flags, and a compiled update is generated for the CPU it runs on,
so a run that resumes on another kind of CPU goes on from an exact checkpoint but may no longer
repeat the numbers a straight run on the first CPU gives. Each run therefore records the line of
:func:`describe` per attempt (see :func:`digideep.tracking.tags.machine_tag`), for example::

    AMD EPYC, cpu capability AVX2 (avx2 fma), 2 cores; torch 2.13.0+cpu; no GPU
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

from digideep.utility.stats import gpu_handles

__all__ = ["SPEED_FLAGS", "cpu_flags", "cpu_model", "describe", "gpus", "usable_cores"]

SPEED_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
"""The CPU flags (as ``/proc/cpuinfo`` names them) that decide which float32 and bfloat16 kernels run."""

CPUINFO = Path("/proc/cpuinfo")


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what :mod:`platform` knows, else ``unknown``."""
    try:
        for line in CPUINFO.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_flags(wanted: tuple[str, ...] = SPEED_FLAGS) -> list[str]:
    """The flags of ``wanted`` that this CPU has, in ``wanted``'s order (none where ``/proc/cpuinfo``
    cannot be read)."""
    try:
        flags = set(CPUINFO.read_text().split())
    except OSError:
        return []
    return [flag for flag in wanted if flag in flags]


def usable_cores() -> int:
    """The cores this process may run on (its affinity, as a Slurm job or ``taskset`` limits it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity on this platform
        return os.cpu_count() or 1


def gpus() -> list[str]:
    """The names of the NVIDIA GPUs that NVML lists (without making a CUDA context), through the
    handles the CPU/GPU sampler uses (:func:`~digideep.utility.stats.gpu_handles`); none without NVML."""
    handles = gpu_handles()
    if not handles:
        return []
    import pynvml

    try:
        names = [pynvml.nvmlDeviceGetName(handle) for handle in handles]
    except Exception:  # a driver that answers init but not the query: recording never fails a run
        return []
    return [name.decode() if isinstance(name, bytes) else str(name) for name in names]


def describe() -> str:
    """This machine in one line: CPU model, torch's CPU capability and :data:`SPEED_FLAGS` found,
    usable cores, torch's version (and CUDA's), and the GPUs."""
    import torch

    flags = " ".join(cpu_flags()) or "no flags read"
    cpu = f"{cpu_model()}, cpu capability {torch.backends.cpu.get_cpu_capability()} ({flags}), {usable_cores()} cores"
    names = gpus()
    gpu = ", ".join(names) if names else "no GPU"
    cuda = f", CUDA {torch.version.cuda}" if names and torch.version.cuda else ""
    return f"{cpu}; torch {torch.__version__}{cuda}; {gpu}"
