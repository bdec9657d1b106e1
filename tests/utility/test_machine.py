"""The machine line that each run's attempts carry: what it reads and how the tags hold it."""

from __future__ import annotations

import os

import pytest
import torch

from digideep.tracking.tags import attempt_machines, machine_tag
from digideep.utility import machine

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC  7B13 64-Core Processor
flags\t\t: fpu sse2 avx fma avx2 avx512f avx512_bf16

processor\t: 1
model name\t: AMD EPYC  7B13 64-Core Processor
flags\t\t: fpu sse2 avx fma avx2 avx512f avx512_bf16
"""


def test_the_cpu_is_read_from_cpuinfo_with_the_flags_that_pick_kernels(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO)
    monkeypatch.setattr(machine, "CPUINFO", cpuinfo)
    assert machine.cpu_model() == "AMD EPYC 7B13 64-Core Processor"
    assert machine.cpu_flags() == ["avx2", "fma", "avx512f", "avx512_bf16"]  # SPEED_FLAGS' order
    line = machine.describe()
    capability = torch.backends.cpu.get_cpu_capability()
    assert line.startswith(
        f"AMD EPYC 7B13 64-Core Processor, cpu capability {capability} (avx2 fma avx512f avx512_bf16), "
        f"{machine.usable_cores()} cores; torch {torch.__version__}"
    )


def test_without_cpuinfo_the_line_still_names_what_torch_knows(tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "CPUINFO", tmp_path / "absent")
    assert machine.cpu_flags() == []
    assert machine.cpu_model()  # platform's name, or "unknown"
    assert "(no flags read)" in machine.describe()


def test_this_machine_is_described_in_one_line():
    line = machine.describe()
    assert "\n" not in line and f"torch {torch.__version__}" in line
    assert line.endswith("no GPU") == (machine.gpus() == [])
    assert 1 <= machine.usable_cores() <= (os.cpu_count() or 1)


def test_the_attempts_machines_are_read_back_from_a_runs_tags_in_attempt_order():
    tags = {
        machine_tag(10): "C",
        machine_tag(0): "A",
        machine_tag(2): "B",
        "digideep.machine": "not an attempt",
        "digideep.machine.x": "not an attempt",
        "digideep.resumes": "10",
    }
    assert machine_tag(2) == "digideep.machine.2"
    assert attempt_machines(tags) == [(0, "A"), (2, "B"), (10, "C")]
    assert attempt_machines({"digideep.resumes": "0"}) == []  # a run tracked before machines were


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_gpus_are_named_as_torch_sees_them():
    names = machine.gpus()  # NVML lists the machine's GPUs, CUDA_VISIBLE_DEVICES or not
    assert len(names) >= torch.cuda.device_count()
    assert torch.cuda.get_device_name(0) in names
    assert (
        machine.describe().endswith(", ".join(names)) and f"CUDA {torch.version.cuda}" in machine.describe()
    )
