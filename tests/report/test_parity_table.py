"""``bench/bench_learning.py --combine``: the parity verdict of the learning check comes from rliable."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from digideep.report.statistics import difference_interval, improvement_interval, score_interval
from tests.conftest import REPO

SETTINGS = {"algo": "sac", "frames": 50000, "learning_starts": 10000, "eval_episodes": 10, "n_steps": 1000}
RETURNS = {  # env -> side -> per-seed mean returns
    "Hopper-v5": {"digideep": [2730.6, 1098.4, 1900.0], "sb3": [515.6, 540.6, 610.0]},
    "Walker2d-v5": {"digideep": [800.0, 1200.0, 700.0], "sb3": [900.0, 1000.0, 650.0]},
}


def write_results(folder: Path, **changed: object) -> list[str]:
    paths = []
    for env, sides in RETURNS.items():
        cells = [
            {"side": s, "seed": i, "mean": r} for s, values in sides.items() for i, r in enumerate(values)
        ]
        report = {
            "settings": {**SETTINGS, "env": env, "threads": 1, "device": "cpu", **changed},
            "machine": "x86_64, test",
            "versions": {"digideep commit": "abc1234"},
            "cells": cells,
        }
        path = folder / f"{env}.json"
        path.write_text(json.dumps(report))
        paths.append(str(path))
        changed = {}  # only the first file differs
    return paths


def combine(paths: list[str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "bench/bench_learning.py", "--combine", *paths]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)


def test_the_table_holds_rliable_intervals_per_environment_and_overall(tmp_path: Path) -> None:
    result = combine(write_results(tmp_path))
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines()}
    for env, sides in RETURNS.items():
        ours, theirs = np.array(sides["digideep"]), np.array(sides["sb3"])
        for interval in (
            score_interval(ours),
            score_interval(theirs),
            difference_interval(ours[:, None], theirs[:, None]),
        ):
            assert f"{interval.point:.1f} [{interval.low:.1f}, {interval.high:.1f}]" in rows[env]
        better = improvement_interval(ours[:, None], theirs[:, None])
        assert rows[env].endswith(f"{better.point:.2f} [{better.low:.2f}, {better.high:.2f}]")
    matrix = {s: np.stack([RETURNS[e][s] for e in RETURNS], axis=1) for s in ("digideep", "sb3")}
    overall = improvement_interval(matrix["digideep"], matrix["sb3"])
    assert rows["all"].endswith(f"{overall.point:.2f} [{overall.low:.2f}, {overall.high:.2f}]")
    assert "abc1234" in result.stdout


def test_files_of_another_protocol_are_refused_in_one_line(tmp_path: Path) -> None:
    result = combine(write_results(tmp_path, frames=30000))
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0
    assert "differs from" in result.stderr and "frames" in result.stderr
