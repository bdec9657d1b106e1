"""A trial's outcome against the run never interrupted: ``identical``, ``refused in one line`` or ``DIFFERENT``.

Identical means the agents (weights, optimizers), the explorers (environments mid-episode), every
RNG stream digideep checkpoints, the memories' pointers and contents and the counters equal the
reference's, and the MLflow run ended FINISHED with its learning curve and every metric at the same
steps once each with the same values; timings (``time/``, ``system/``, frames per second) differ by
nature and are compared by presence, except that a stop's own checkpoint adds ``time/checkpoint`` at
the step it was written (a run stopped mid-epoch checkpoints where the reference did not).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from mlflow import MlflowClient

from digideep.memory import Memory
from digideep.storage.checkpoint import latest_checkpoint, load_checkpoint
from tests.helpers import assert_same_tensors
from tests.pipeline.test_resume import TIMING, metric_histories

IDENTICAL, REFUSED, DIFFERENT = "identical", "refused in one line", "DIFFERENT"
COUNTERS = ("iteration", "frames", "best_test_return", "best_checkpoint")
COMPARED_STATES = ("agents", "explorers", "rng")
WALL_CLOCK = {"episode_start_time", "time_queue"}
"""Attributes of gymnasium's RecordEpisodeStatistics that hold wall-clock times, not training state."""


@dataclass
class Final:
    """What a finished session holds: its newest checkpoint's states, its memory, its MLflow run."""

    states: dict[str, Any]
    contents: dict[str, np.ndarray] | None  # None for a session on S3 (pointers are compared)
    run_id: str
    client: MlflowClient
    histories: dict[str, list[tuple[int, float]]] = field(default_factory=dict)


def final_of(session: str | Path, run_id: str, client: MlflowClient) -> Final:
    """Read the session at ``session`` (a folder, or an ``s3://`` URL: its memory is not read back)."""
    info, states = load_checkpoint(latest_checkpoint(f"{session}/checkpoints").path)
    contents = None
    if isinstance(session, Path):
        capacity = info["params"]["memory"]["train"]["args"]["capacity"]
        memory = Memory(session / "memory" / "train.zarr", num_workers=1, capacity=capacity)
        memory.load_state_dict(states["memories"]["train"])
        memory.load()
        contents = {key: np.array(memory[key]) for key in memory}
    return Final(states, contents, run_id, client, metric_histories(client, run_id))


def differences(reference: Final, final: Final, stop_steps: set[int]) -> str | None:
    """None when ``final`` is the reference's, else the first difference in a line."""
    try:
        for part in COMPARED_STATES:
            assert_same_tensors(_untimed(reference.states[part]), _untimed(final.states[part]), part)
        assert reference.states["memories"] == final.states["memories"], "memory pointers"
        for counter in COUNTERS:
            assert reference.states["counters"][counter] == final.states["counters"][counter], counter
        if reference.contents is not None and final.contents is not None:
            for key, values in reference.contents.items():  # NaN (unwritten rows) alike
                np.testing.assert_array_equal(values, final.contents[key], err_msg=f"memory {key}")
        status = final.client.get_run(final.run_id).info.status
        assert status == "FINISHED", f"the MLflow run ended {status}"
        plots = [f.path for f in final.client.list_artifacts(final.run_id, "plots")]
        assert "plots/learning_curve.png" in plots, "no learning curve"
        _same_histories(reference.histories, final.histories, stop_steps)
    except AssertionError as error:
        return " ".join(str(error).split())[:300] or "differs"
    return None


def _untimed(state: Any) -> Any:
    """``state`` without its wall-clock fields (:data:`WALL_CLOCK`), numpy generators as their states."""
    if isinstance(state, dict):
        return {key: _untimed(value) for key, value in state.items() if key not in WALL_CLOCK}
    if isinstance(state, list | tuple):
        return [_untimed(value) for value in state]
    if isinstance(state, np.random.Generator):  # compared by identity; its stream's state by value
        return state.bit_generator.state
    return state


def _same_histories(reference: dict, resumed: dict, stop_steps: set[int]) -> None:
    """Every metric at the same steps, once per step, with the same values (timings: present alike)."""
    for key, history in resumed.items():
        steps = [step for step, _ in history]
        assert len(steps) == len(set(steps)), f"{key} has a step twice: {steps}"
    exact = {key for key in reference if not key.startswith(TIMING)}
    assert exact == {key for key in resumed if not key.startswith(TIMING)}, "other metric keys"
    for key in exact:
        assert resumed[key] == reference[key], f"metric {key}"
    for key in (k for k in reference if k.startswith(("time/", "charts/frames_per_second"))):
        assert key in resumed, f"metric {key} missing"
        expected = {s for s, _ in reference[key]} | (stop_steps if key == "time/checkpoint" else set())
        got = {s for s, _ in resumed[key]}
        assert {s for s, _ in reference[key]} <= got <= expected, f"steps of {key}: {sorted(got)}"


def snapshot(session: Path) -> dict[str, str]:
    """``{relative path: sha1}`` of what a resume needs in ``session`` (logs aside)."""
    kept = ("checkpoints", "memory", "metrics.jsonl", "session.json", "params.json")
    files = [
        f for name in kept for f in ([session / name, *list((session / name).rglob("*"))]) if f.is_file()
    ]
    return {str(f.relative_to(session)): hashlib.sha1(f.read_bytes()).hexdigest() for f in files}


def changed(before: dict[str, str], after: dict[str, str]) -> str | None:
    """What a refused command changed in the session (None: untouched)."""
    touched = sorted(set(before.items()) ^ set(after.items()))
    return None if not touched else f"the refusal changed {len(touched)} file(s), e.g. {touched[0][0]}"
