"""Two-file checkpoints: ``runner.json`` (how to rebuild the Runner) and ``states.pt`` (its state).

A checkpoint is the folder ``<session>/checkpoints/checkpoint-<iteration>/``:

- ``runner.json``: the resolved params tree, the counters, the class paths of the agents and memories,
  and the versions of the checkpoint format, digideep and torch. JSON, so loading never runs code.
- ``states.pt``: the nested ``state_dict()`` of runner, agents, explorers, memories, the Monitor's
  windows and every RNG state, encoded with :mod:`digideep.utility.codec` (numpy arrays, generators
  and the like become tagged tensors and dicts), saved with ``torch.save`` and loaded on the CPU with
  ``weights_only=True``. Networks and optimizer states reach their device through
  ``load_state_dict``, so a checkpoint written on a GPU loads on a CPU-only machine and the reverse.

Both files are written into a hidden temporary folder in ``checkpoints/``, flushed to disk and the
folder is renamed into place, so a checkpoint folder either is complete or does not exist; a crash
mid-save leaves only a ``.tmp-*`` folder that the next save removes. Retention keeps the newest
``keep`` checkpoints plus the one with the best test return.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from digideep import __version__
from digideep.errors import UsageError
from digideep.utility.codec import decode, decode_v1, encode
from digideep.utility.files import fsync_dir

__all__ = [
    "FORMAT_VERSION",
    "READABLE_VERSIONS",
    "Checkpoint",
    "apply_retention",
    "find_checkpoints",
    "latest_checkpoint",
    "load_checkpoint",
    "save_checkpoint",
]

log = logging.getLogger(__name__)

FORMAT_VERSION = 2
"""Raised whenever the layout of runner.json or states.pt changes incompatibly.

1: numpy arrays tagged ``__numpy__`` by the checkpoint, environment-side states with their own tags
and bare tensors for arrays. 2: one codec (:mod:`digideep.utility.codec`) for the whole tree.
"""
READABLE_VERSIONS = (1, 2)
"""Format versions this digideep loads (version 1 is converted on load)."""

RUNNER_FILE = "runner.json"
STATES_FILE = "states.pt"
_NAME = re.compile(r"^checkpoint-(\d+)$")


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint folder and its iteration number."""

    path: Path
    iteration: int

    @property
    def runner_file(self) -> Path:
        return self.path / RUNNER_FILE

    @property
    def states_file(self) -> Path:
        return self.path / STATES_FILE


def save_checkpoint(
    folder: Path, iteration: int, runner_info: dict[str, Any], states: dict[str, Any]
) -> Checkpoint:
    """Write ``checkpoint-<iteration>`` atomically under ``folder`` and return it.

    Args:
        folder: the session's ``checkpoints/`` folder.
        iteration: the iteration the checkpoint was taken after.
        runner_info: JSON-serialisable description of the Runner (params, counters, classes).
        states: nested state dicts (what :func:`digideep.utility.codec.encode` accepts).

    Raises:
        TypeError: ``states`` holds a value the codec cannot save (nothing is written).
    """
    encoded = encode(states)  # an unsavable value fails here, before anything is written
    _remove_leftovers(folder)
    final = folder / f"checkpoint-{iteration}"
    tmp = folder / f".tmp-checkpoint-{iteration}-{os.getpid()}"
    tmp.mkdir()
    try:
        info = {
            "format_version": FORMAT_VERSION,
            "digideep_version": __version__,
            "torch_version": torch.__version__,
            "saved": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "iteration": iteration,
            **runner_info,
        }
        with open(tmp / RUNNER_FILE, "w", encoding="utf-8") as file:
            json.dump(info, file, indent=2, default=str)
            file.flush()
            os.fsync(file.fileno())
        with open(tmp / STATES_FILE, "wb") as file:
            torch.save(encoded, file)
            file.flush()
            os.fsync(file.fileno())
        fsync_dir(tmp)
        if final.exists():  # a checkpoint of the same iteration from a run that was not resumed from it
            shutil.rmtree(final)
        os.rename(tmp, final)
        fsync_dir(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Checkpoint(final, iteration)


def _remove_leftovers(folder: Path) -> None:
    """Delete temporary folders of saves that a crash interrupted."""
    for leftover in folder.glob(".tmp-checkpoint-*"):
        log.info("removing the unfinished checkpoint %s", leftover)
        shutil.rmtree(leftover, ignore_errors=True)


def find_checkpoints(folder: Path) -> list[Checkpoint]:
    """Complete checkpoints under ``folder``, oldest first."""
    found = []
    for path in folder.glob("checkpoint-*"):
        match = _NAME.match(path.name)
        if match and (path / RUNNER_FILE).is_file() and (path / STATES_FILE).is_file():
            found.append(Checkpoint(path, int(match.group(1))))
    return sorted(found, key=lambda c: c.iteration)


def latest_checkpoint(folder: Path) -> Checkpoint | None:
    """The newest complete checkpoint under ``folder``, or None."""
    found = find_checkpoints(folder)
    return found[-1] if found else None


def apply_retention(folder: Path, keep: int, best: int | None = None) -> list[Path]:
    """Delete all but the newest ``keep`` checkpoints and the one of iteration ``best``.

    ``keep <= 0`` keeps every checkpoint. Returns the deleted folders.
    """
    if keep <= 0:
        return []
    found = find_checkpoints(folder)
    kept = {c.iteration for c in found[-keep:]} | {best}
    deleted = []
    for checkpoint in found:
        if checkpoint.iteration not in kept:
            shutil.rmtree(checkpoint.path)
            deleted.append(checkpoint.path)
    return deleted


def read_runner_info(path: Path) -> dict[str, Any]:
    """Read and check ``runner.json`` of the checkpoint folder ``path``.

    Raises:
        UsageError: the folder or file is missing, the JSON is damaged or of another format version.
    """
    if not path.is_dir():
        raise UsageError(
            f"checkpoint '{path}' does not exist; give a folder like <session>/checkpoints/checkpoint-<N>"
        )
    runner_file = path / RUNNER_FILE
    try:
        info = json.loads(runner_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(
            f"checkpoint file '{runner_file}' is missing; the checkpoint is incomplete"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UsageError(f"checkpoint file '{runner_file}' is damaged (not valid JSON: {error})") from None
    if not isinstance(info, dict) or "format_version" not in info:
        raise UsageError(f"checkpoint file '{runner_file}' is not a digideep runner.json (no format_version)")
    if info["format_version"] not in READABLE_VERSIONS:
        readable = " and ".join(str(v) for v in READABLE_VERSIONS)
        raise UsageError(
            f"checkpoint file '{runner_file}' has format version {info['format_version']} "
            f"(digideep {info.get('digideep_version', '?')}); this digideep {__version__} reads versions {readable}"
        )
    for field in ("params", "iteration"):
        if field not in info:
            raise UsageError(
                f"checkpoint file '{runner_file}' lacks the field '{field}'; the file is damaged"
            )
    return info


def load_checkpoint(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read both files of a checkpoint: ``(runner_info, states)``, every tensor on the CPU.

    ``states.pt`` is loaded with ``weights_only=True``: a checkpoint can hold tensors, arrays and
    plain containers, never code. It is always read with ``map_location="cpu"``, wherever it was
    written: numpy, RNG and pointer states stay on the CPU, and each ``load_state_dict`` moves
    network and optimizer tensors to its own device. A version 1 checkpoint is converted.

    Raises:
        UsageError: a file is missing, truncated, damaged or of an incompatible version.
    """
    info = read_runner_info(path)
    states_file = path / STATES_FILE
    if not states_file.is_file():
        raise UsageError(f"checkpoint file '{states_file}' is missing; the checkpoint is incomplete")
    try:
        states = torch.load(states_file, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises RuntimeError, UnpicklingError, EOFError, ... for damaged files
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UsageError(f"checkpoint file '{states_file}' is damaged or truncated ({first_line})") from None
    if not isinstance(states, dict):
        raise UsageError(f"checkpoint file '{states_file}' does not hold a dict of states")
    if info["format_version"] == 1:
        return info, _upgrade_v1(states)
    return info, decode(states)


def _upgrade_v1(states: dict[str, Any]) -> dict[str, Any]:
    """Decode a format 1 ``states.pt``: explorer states stored numpy arrays as bare tensors."""
    explorers = states.get("explorers", {})
    decoded = decode_v1({key: value for key, value in states.items() if key != "explorers"})
    decoded["explorers"] = {
        mode: decode_v1(state, tensors_are_arrays=True) for mode, state in explorers.items()
    }
    return decoded
