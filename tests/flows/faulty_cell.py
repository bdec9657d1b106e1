"""Pendulum SAC for ``tests/flows/test_benchmark.py`` whose seed-1 cells fail once mid-run.

A cell with ``seed`` 1 raises at its second update (after its first checkpoint), the first time only
(a marker file per cell in ``$DIGIDEEP_BENCHMARK_TEST_DIR``), so the benchmark must retry it as the
same flow run, which resumes from that checkpoint. Other seeds train as ``params.pendulum_sac``.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.flows import faulty

cpanel = {key: value for key, value in faulty.cpanel.items() if key not in ("fail_at_update", "marker")}


def gen_params(cpanel: dict) -> dict:
    marker = ""
    if cpanel["seed"] == 1:
        folder = Path(os.environ["DIGIDEEP_BENCHMARK_TEST_DIR"])
        marker = str(folder / f"{cpanel['model_name']}-seed-1-fault")
    return faulty.gen_params({**cpanel, "fail_at_update": 2, "marker": marker})
