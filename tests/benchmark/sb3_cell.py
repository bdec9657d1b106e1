"""One tiny SB3 SAC benchmark cell on Pendulum-v1, run as a process of its own so that a test can kill it.

``python -m tests.benchmark.sb3_cell SESSION_PATH BENCHMARK`` trains (or continues) the cell
:data:`CELL` under :data:`PROTOCOL` with its checkpoints under ``SESSION_PATH``, tracked in the store
of ``MLFLOW_TRACKING_URI``, as the benchmark flow's ``sb3_cell`` task does.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from digideep.benchmark.sb3_checkpoint import CellCheckpoints, cell_folder
from digideep.pipeline.evaluation import EvaluationProtocol

CELL = {"algorithm": "sb3:SAC", "env": "Pendulum-v1", "seed": 3, "variant": "default"}
KEY = "sb3:SAC/Pendulum-v1/seed-3/default"
PROTOCOL = EvaluationProtocol(frame_interval=100, episodes=1, frame_budget=300)
KNOBS = {"learning_starts": 50, "buffer_size": 1000, "batch_size": 32}


def checkpoints(session_path: str | Path, benchmark: str) -> CellCheckpoints:
    """The cell's checkpoints, where the benchmark flow keeps them."""
    return CellCheckpoints(cell_folder(session_path, benchmark, KEY))


def train(session_path: str | Path, benchmark: str, client: Any) -> float:
    """Train or continue the cell; its score."""
    from digideep.benchmark.sb3 import train_sb3_cell
    from digideep.tracking.trials import benchmark_tags
    from flows.cells import experiment_id

    experiment = experiment_id(client, "benchmarks", None)
    tags = benchmark_tags({**CELL, "name": benchmark})
    return train_sb3_cell(
        CELL["algorithm"], CELL["env"], CELL["seed"], PROTOCOL, client, experiment, tags,
        cpanel=KNOBS, checkpoints=checkpoints(session_path, benchmark),
    )  # fmt: skip


if __name__ == "__main__":
    from mlflow import MlflowClient

    train(sys.argv[1], sys.argv[2], MlflowClient())
