"""Pendulum SAC for ``tests/flows/test_benchmark.py`` whose cells stall once, after their first checkpoint.

A cell's second update waits, the first time only (a marker file per cell in
``$DIGIDEEP_BENCHMARK_TEST_DIR``), until its process is asked to stop (SIGTERM, as a cancelled flow
run's worker sends): the iteration then ends, checkpoints and the run stops. So a cell is still
running, whatever the machine's speed, when its test cancels the benchmark that started it; the run
that continues it finds the marker and trains on.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from digideep.pipeline.signals import stop_requested
from tests.flows import faulty, faulty_cell

cpanel = faulty_cell.cpanel


def stall_marker(folder: Path, env: str, seed: int) -> Path:
    """The file whose presence says that the cell of ``env`` and ``seed`` has stalled once."""
    return folder / f"{env}-seed-{seed}-stall"


def gen_params(cpanel: dict) -> dict:
    folder = Path(os.environ["DIGIDEEP_BENCHMARK_TEST_DIR"])
    marker = stall_marker(folder, cpanel["model_name"], cpanel["seed"])
    params = faulty.gen_params({**cpanel, "fail_at_update": 2, "marker": str(marker)})
    params["agents"]["agent"]["type"] = "tests.flows.stalled_cell.StallOnceSAC"
    return params


class StallOnceSAC(faulty.FailOnceSAC):
    """SAC whose ``fail_at_update``-th update waits for a stop signal (at most 10 minutes), once."""

    def fault(self) -> None:
        deadline = time.monotonic() + 600
        while stop_requested() is None and time.monotonic() < deadline:
            time.sleep(0.1)
