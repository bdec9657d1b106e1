"""Damage at rest: a resume never trains silently on other data.

Real short Pendulum SAC runs (``python -m digideep.main --no-prefect``, the Zarr memory on disk,
the shared MLflow store), killed with SIGKILL after their second checkpoint as in
``test_resume.py``; each test damages a copy of the killed session and resumes it:

- a damaged newest checkpoint (a flipped byte in ``states.pt``, a lost ``runner.json``) or a metrics
  journal cut mid-file: the resume passes over it, says so in one line, and ends bit-identical to the
  uninterrupted run (the memory's log keeps the rows of the checkpoints retention keeps, however far
  the ring moved past them);
- a memory chunk damaged (low bits flipped in a rewards chunk, a chunk overwritten with NaN, a chunk
  file deleted): refused in one line, exit 2, every file of the session as it was; once the damaged
  file has its bytes back, the session resumes bit-identical to the uninterrupted run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from digideep.storage.checkpoint import find_checkpoints, load_checkpoint
from tests.conftest import REPO
from tests.helpers import assert_same_training
from tests.pipeline.test_resume import (
    SMALL_SAC,
    final_state,
    kill_after_checkpoint,
    resume_command,
    run,
    train_command,
)

PARAMS = "params.pendulum_sac"
WHOLE = {**SMALL_SAC, "buffer_size": 1000}  # 200 frames in all: every checkpoint's rows survive
WRAPS = SMALL_SAC  # a ring of 70 frames: it moves past a checkpoint's rows within an iteration or two
MEMORY = Path("memory") / "train.zarr"


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory, mlflow_uri: str) -> dict[str, Path]:
    """An uninterrupted run and a run killed after its second checkpoint, of each ring size."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow_uri, "PYTHONHASHSEED": "0"}
    root = tmp_path_factory.mktemp("integrity")
    run(train_command(root, "straight", PARAMS, WHOLE), env)
    run(train_command(root, "straight-wraps", PARAMS, WRAPS), env)
    for name, cpanel in (("killed", WHOLE), ("killed-wraps", WRAPS)):
        command, checkpoints = train_command(root, name, PARAMS, cpanel), root / name / "checkpoints"
        kill_after_checkpoint(command, env, checkpoints, 2, ready=lambda n=name: memory_anchored(root / n))
        assert not (root / name / "done.json").exists(), "the run finished before it could be killed"
    return {"root": root, "env": env}


def memory_anchored(session: Path) -> bool:
    """Whether the replay memory recorded the newest checkpoint (the Runner tells it right after the
    checkpoint's commit), so that its log keeps that checkpoint's rows."""
    newest = find_checkpoints(session / "checkpoints")[-1].iteration
    record = json.loads((session / MEMORY / "zarr.json").read_text())["attributes"]["digideep_memory"]
    return newest * SMALL_SAC["n_steps"] in record["checkpoints"]  # one worker: frames = rows


def newest_row_chunk(session: Path, key: str) -> Path:
    """The chunk file of ``key`` holding the newest checkpoint's last row (its resume reads it)."""
    record = json.loads((session / MEMORY / "zarr.json").read_text())["attributes"]["digideep_memory"]
    total = find_checkpoints(session / "checkpoints")[-1].iteration * SMALL_SAC["n_steps"]
    rows = record["keys"][f"/{key}"]["chunk_rows"]
    return session / MEMORY / key / "c" / "0" / str((total - 1) // rows) / "0"


def damaged_copy(sessions: dict, source: str, name: str, damage: Callable[[Path], None]) -> Path:
    """A copy of the killed session ``source`` under ``name``, damaged by ``damage(session folder)``."""
    session = sessions["root"] / name
    shutil.copytree(sessions["root"] / source, session)
    damage(session)
    return session


def resume(sessions: dict, name: str) -> subprocess.CompletedProcess:
    command = resume_command(sessions["root"], name)
    return subprocess.run(command, cwd=REPO, env=sessions["env"], capture_output=True, text=True, timeout=300)


def newest_two(session: Path) -> tuple[Path, Path]:
    found = find_checkpoints(session / "checkpoints")
    return found[-1].path, found[-2].path


def flip_byte(file: Path, offset: int) -> None:
    data = bytearray(file.read_bytes())
    data[offset] ^= 1
    file.write_bytes(bytes(data))


def damage_states(session: Path) -> None:
    flip_byte(newest_two(session)[0] / "states.pt", 200)


def lose_runner_json(session: Path) -> None:
    (newest_two(session)[0] / "runner.json").unlink()


def cut_journal(session: Path) -> None:
    """Cut ``metrics.jsonl`` halfway between what the two newest checkpoints cover: mid-record."""
    offsets = [load_checkpoint(c)[1]["journal"]["offset"] for c in newest_two(session)]
    journal = session / "metrics.jsonl"
    data = journal.read_bytes()
    cut = (offsets[0] + offsets[1]) // 2
    assert data[cut - 1 : cut] != b"\n", "the cut should fall inside a record"
    journal.write_bytes(data[:cut])


def rewards_chunk(session: Path) -> Path:
    return newest_row_chunk(session, "rewards")


def flip_reward_low_bit(session: Path) -> None:
    flip_byte(rewards_chunk(session), 0)  # the lowest mantissa bit of the first reward


def rewards_to_nan(session: Path) -> None:
    file = rewards_chunk(session)
    file.write_bytes(np.full(file.stat().st_size // 4, np.nan, np.float32).tobytes())


@pytest.mark.parametrize(
    ("source", "damage", "said"),
    [
        ("killed", damage_states, "differs from the commit record"),
        ("killed", lose_runner_json, "runner.json' is missing"),
        ("killed", cut_journal, "short of the"),
        ("killed-wraps", damage_states, "differs from the commit record"),
    ],
    ids=["states.pt flipped", "runner.json lost", "journal cut mid-file", "states.pt flipped, ring moved on"],
)
def test_a_damaged_newest_checkpoint_or_journal_resumes_from_the_previous_checkpoint_bit_identical(
    sessions: dict, source: str, damage: Callable[[Path], None], said: str
) -> None:
    name = f"whole-{source}-{damage.__name__}"
    newest, previous = newest_two(sessions["root"] / source)
    session = damaged_copy(sessions, source, name, damage)
    result = resume(sessions, name)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if "passing over damaged checkpoints" in line]
    assert len(lines) == 1 and said in lines[0], result.stderr[-3000:]
    assert f"resuming from {previous.name}: iterations" in lines[0]
    assert "Traceback" not in result.stderr
    if damage is cut_journal:
        assert "unfinished record" in result.stderr  # the cut tail is dropped, with its own line

    assert_same_as_straight(sessions["root"], "straight" if source == "killed" else "straight-wraps", name)
    assert newest.name != previous.name and (session / "done.json").exists()


@pytest.mark.parametrize(
    ("source", "damage", "said"),
    [
        ("killed-wraps", flip_reward_low_bit, "key '/rewards' fail their checksum"),
        ("killed-wraps", rewards_to_nan, "key '/rewards' fail their checksum"),
    ],
    ids=["rewards low bit flipped", "rewards chunk NaN"],
)
def test_damage_no_checkpoint_survives_is_refused_in_one_line(
    sessions: dict, source: str, damage: Callable[[Path], None], said: str
) -> None:
    name = f"refused-{damage.__name__}"
    session = damaged_copy(sessions, source, name, damage)
    result = resume(sessions, name)
    assert result.returncode != 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if said in line]
    assert len(errors) == 1 and "start a new session" in errors[0], result.stderr[-3000:]
    assert not (session / "done.json").exists()


def test_a_refusal_on_the_prefect_path_is_one_line_too(sessions: dict, tmp_path: Path) -> None:
    """The same refusal raised inside the train flow (``digideep resume`` without ``--no-prefect``):
    Prefect's engine would log it with its traceback and its final state; the console keeps one line."""
    name = "refused-on-the-flow-path"
    damaged_copy(sessions, "killed", name, lambda s: [flip_byte(c / "states.pt", 200) for c in newest_two(s)])
    env = {**sessions["env"], "PREFECT_HOME": str(tmp_path / "prefect")}  # its own temporary server
    env.pop("PREFECT_API_URL", None)
    command = [str(Path(sys.executable).with_name("digideep")), "resume", name]
    result = subprocess.run(
        [*command, "--session-path", str(sessions["root"])],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-3000:]
    assert "Traceback" not in output and "Finished in state" not in output, output[-3000:]
    errors = [line for line in output.splitlines() if line.startswith("digideep: error:")]
    assert len(errors) == 1 and "start a new session" in errors[0], output[-3000:]


def session_files(session: Path) -> dict[str, str]:
    """``{path: sha256}`` of every file of ``session`` but its log (where a refusal writes its line)
    and its lock (``.lock``, ``.lock.json``: every command that opens the session takes and releases it)."""
    files = sorted(
        f
        for f in session.rglob("*")
        if f.is_file() and f.name != "log.txt" and not f.name.startswith(".lock")
    )
    return {str(f.relative_to(session)): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def main_chunk(key: str) -> Callable[[Path], Path]:
    """The chunk file of ``key`` holding the newest checkpoint's last row."""

    def pick(session: Path) -> Path:
        return newest_row_chunk(session, key)

    return pick


def flip_first_byte(file: Path) -> None:
    flip_byte(file, 0)


def delete(file: Path) -> None:
    file.unlink()


@pytest.mark.parametrize(
    ("source", "pick", "damage", "said"),
    [
        ("killed", main_chunk("rewards"), flip_first_byte, "key '/rewards' fail their checksum"),
        ("killed", main_chunk("observations"), delete, "key '/observations' are missing (observations/c/0/"),
        ("killed-wraps", main_chunk("rewards"), flip_first_byte, "key '/rewards' fail their checksum"),
    ],
    ids=["rewards chunk flipped", "observations chunk deleted", "rewards chunk flipped, ring moved on"],
)
def test_a_refusal_changes_no_file_and_the_repaired_session_resumes_bit_identical(
    sessions: dict, source: str, pick: Callable[[Path], Path], damage: Callable[[Path], None], said: str
) -> None:
    """The resume checks every memory and the journal before it restores anything: a refusal leaves
    the memory, the journal and the checkpoints byte for byte, so putting
    the damaged file's bytes back makes the session resume as if nothing had happened."""
    name = f"repaired-{source}-{damage.__name__}-{pick.__name__}"
    session = damaged_copy(sessions, source, name, lambda s: None)
    file = pick(session)
    original = file.read_bytes()
    damage(file)
    before = session_files(session)
    result = resume(sessions, name)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if said in line]
    assert len(errors) == 1 and "start a new session" in errors[0], result.stderr[-3000:]
    assert session_files(session) == before

    file.write_bytes(original)
    result = resume(sessions, name)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "passing over" not in result.stderr  # the newest checkpoint, as before the damage
    straight = "straight" if source == "killed" else "straight-wraps"
    assert_same_as_straight(sessions["root"], straight, name)


def assert_same_as_straight(root, straight: str, name: str) -> None:
    """Session ``name`` ended as ``straight``, never stopped, did: weights, optimizers, memory."""
    straight_states, straight_memory = final_state(root, straight)
    states, memory = final_state(root, name)
    assert memory["iteration"] == straight_memory["iteration"] == 8
    assert_same_training(straight_states, states)
    assert memory["pointers"] == straight_memory["pointers"]
    for key, values in straight_memory["contents"].items():
        np.testing.assert_array_equal(values, memory["contents"][key], err_msg=key)
