"""Two-file checkpoints: ``runner.json`` (how to rebuild the Runner) and ``states.pt`` (its state).

A checkpoint is the folder ``<session>/checkpoints/checkpoint-<iteration>/``:

- ``runner.json``: the resolved params tree, the counters, the class paths of the agents and memories,
  and the versions of the checkpoint format, digideep and torch. JSON, so loading never runs code.
- ``states.pt``: the nested ``state_dict()`` of runner, agents, explorers, memories, the Monitor's
  windows and every RNG state, encoded with :mod:`digideep.storage.codec` (numpy arrays, generators
  and the like become tagged tensors and dicts), saved with ``torch.save`` and loaded on the CPU with
  ``weights_only=True``. Networks and optimizer states reach their device through
  ``load_state_dict``, so a checkpoint written on a GPU loads on a CPU-only machine and the reverse.

The files are written under their final names in ``checkpoint-<iteration>/``, and then one small
commit record, ``commit.json``, naming each file with its size and sha256, is written last (on
local disk atomically, on an object store with one PUT). Nothing is ever renamed, so the same code
serves local disks and object stores, which have no atomic rename. Only committed checkpoints are
trusted: a save cut short leaves files without a record, which readers ignore and the next save
removes; loading checks every size and hash against the record.

A checkpoint whose files are missing or differ from its record raises
:class:`DamagedCheckpointError` when loaded; a resume then tries the next older committed one
(:func:`committed_checkpoints`, :func:`digideep.pipeline.resuming.resume`).

Retention keeps the newest ``keep`` checkpoints plus the one with the best test return; it deletes
the others oldest first, each by its record first, so a checkpoint is committed whole or not at all
at every moment, and never leaves zero.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from digideep import __version__
from digideep.errors import UsageError
from digideep.storage.codec import decode, encode
from digideep.storage.location import Location, location_of

__all__ = [
    "COMMIT_FILE",
    "FORMAT_VERSION",
    "Checkpoint",
    "DamagedCheckpointError",
    "PendingCheckpoint",
    "apply_retention",
    "committed_checkpoints",
    "find_checkpoints",
    "incomplete_checkpoints",
    "latest_checkpoint",
    "load_checkpoint",
    "save_checkpoint",
    "write_checkpoint",
]

log = logging.getLogger(__name__)

FORMAT_VERSION = 2
"""Raised whenever the layout of runner.json or states.pt changes incompatibly; only this one loads."""

RUNNER_FILE = "runner.json"
STATES_FILE = "states.pt"
COMMIT_FILE = "commit.json"
"""The commit record: ``{"iteration": N, "files": {name: {"size": bytes, "sha256": hex}}}``."""
_NAME = re.compile(r"^checkpoint-(\d+)$")

Folder = str | Path | Location
"""A checkpoints folder or a checkpoint: a local path, a URL or a :class:`Location`."""


class DamagedCheckpointError(UsageError):
    """A committed checkpoint whose files are missing, truncated or differ from its commit record:
    a resume passes over it to an older one (see :func:`committed_checkpoints`)."""


@dataclass(frozen=True)
class Checkpoint:
    """A committed checkpoint folder and its iteration number.

    ``path`` is the local :class:`~pathlib.Path` of the folder, or its URL on an object store.
    """

    location: Location
    iteration: int

    @property
    def path(self) -> Path | str:
        return self.location.path

    @property
    def runner_file(self) -> Path | str:
        return (self.location / RUNNER_FILE).path

    @property
    def states_file(self) -> Path | str:
        return (self.location / STATES_FILE).path


@dataclass
class PendingCheckpoint:
    """A checkpoint whose files are written but not yet committed: :meth:`commit` makes it count."""

    location: Location
    iteration: int
    files: dict[str, bytes] = field(repr=False)

    def commit(self) -> Checkpoint:
        """Write the commit record (last): from now on readers trust the checkpoint."""
        record = {
            "iteration": self.iteration,
            "files": {
                name: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                for name, data in self.files.items()
            },
        }
        (self.location / COMMIT_FILE).write_json(record)
        self.location.sync()
        return Checkpoint(self.location, self.iteration)

    def write_copy(self, folder: Path) -> Path:
        """Write the files into the local ``folder/<checkpoint name>`` (for MLflow); return it."""
        target = folder / self.location.name
        target.mkdir(parents=True, exist_ok=True)
        for name, data in self.files.items():
            (target / name).write_bytes(data)
        return target


def write_checkpoint(
    folder: Folder, iteration: int, runner_info: dict[str, Any], states: dict[str, Any]
) -> PendingCheckpoint:
    """Write the files of ``checkpoint-<iteration>`` under ``folder``, uncommitted.

    Leftovers of saves cut short are removed first; a committed checkpoint of the same iteration
    (from a run that was not resumed from it) is replaced, its record deleted first.

    Args:
        folder: the session's ``checkpoints/`` folder (a local path, a URL or a Location).
        iteration: the iteration the checkpoint was taken after.
        runner_info: JSON-serialisable description of the Runner (params, counters, classes).
        states: nested state dicts (what :func:`digideep.storage.codec.encode` accepts).

    Raises:
        TypeError: ``states`` holds a value the codec cannot save (nothing is written).
    """
    encoded = encode(states)  # an unsavable value fails here, before anything is written
    folder = location_of(folder)
    remove_leftovers(folder)
    target = folder / f"checkpoint-{iteration}"
    _delete_checkpoint(target)
    info = {
        "format_version": FORMAT_VERSION,
        "digideep_version": __version__,
        "torch_version": torch.__version__,
        "saved": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "iteration": iteration,
        **runner_info,
    }
    buffer = io.BytesIO()
    torch.save(encoded, buffer)
    files = {
        STATES_FILE: buffer.getvalue(),
        RUNNER_FILE: json.dumps(info, indent=2, default=str).encode("utf-8"),
    }
    target.mkdir()
    try:
        for name, data in files.items():
            (target / name).write_bytes(data)
    except BaseException:
        target.delete()
        raise
    return PendingCheckpoint(target, iteration, files)


def save_checkpoint(
    folder: Folder, iteration: int, runner_info: dict[str, Any], states: dict[str, Any]
) -> Checkpoint:
    """Write and commit ``checkpoint-<iteration>`` under ``folder`` (see :func:`write_checkpoint`)."""
    return write_checkpoint(folder, iteration, runner_info, states).commit()


def remove_leftovers(folder: Folder) -> list[Location]:
    """Delete what saves cut short left under ``folder``: ``checkpoint-*`` folders without a commit
    record. Damaged committed checkpoints stay for their owner to look at. Returns what was deleted."""
    folder = location_of(folder)
    listing = _listing(folder)
    deleted = []
    for child in folder.children():
        files = listing.get(child.name, set())
        if _NAME.match(child.name) and COMMIT_FILE not in files:
            log.info("removing the unfinished checkpoint %s", child)
            child.delete()
            deleted.append(child)
    return deleted


def incomplete_checkpoints(folder: Folder) -> list[Location]:
    """``checkpoint-*`` folders committed but incomplete (a file of the record lost)."""
    folder = location_of(folder)
    complete = {c.location.name for c in find_checkpoints(folder)}
    return [
        folder / name
        for name, files in sorted(_listing(folder).items())
        if name not in complete and COMMIT_FILE in files
    ]


def _listing(folder: Location) -> dict[str, set[str]]:
    """``{checkpoint folder name: its file names}`` from one listing of ``folder``."""
    by_name: dict[str, set[str]] = {}
    for relative in folder.files():
        name, _, file = relative.partition("/")
        if _NAME.match(name) and file:
            by_name.setdefault(name, set()).add(file)
    return by_name


def _delete_checkpoint(location: Location) -> None:
    """Delete a checkpoint folder, its commit record first (it stops counting before it goes)."""
    (location / COMMIT_FILE).delete()
    location.delete()


def find_checkpoints(folder: Folder) -> list[Checkpoint]:
    """Committed and complete checkpoints under ``folder``, oldest first (one listing of the folder).

    Committed: a commit record. Complete: both files present; their sizes and hashes are checked
    when loaded.
    """
    folder = location_of(folder)
    found = []
    for name, files in _listing(folder).items():
        if COMMIT_FILE in files and {RUNNER_FILE, STATES_FILE} <= files:
            found.append(Checkpoint(folder / name, int(_NAME.match(name).group(1))))
    return sorted(found, key=lambda c: c.iteration)


def committed_checkpoints(folder: Folder) -> list[Checkpoint]:
    """Every committed checkpoint under ``folder``, whole or not, newest first: what a resume tries in
    turn (:func:`find_checkpoints` leaves out those that lost a file; :func:`load_checkpoint` raises
    :class:`DamagedCheckpointError` for those and for files that differ from the commit record)."""
    folder = location_of(folder)
    found = find_checkpoints(folder)
    found += [Checkpoint(c, int(_NAME.match(c.name).group(1))) for c in incomplete_checkpoints(folder)]
    return sorted(found, key=lambda c: c.iteration, reverse=True)


def latest_checkpoint(folder: Folder) -> Checkpoint | None:
    """The newest committed checkpoint under ``folder``, or None."""
    found = find_checkpoints(folder)
    return found[-1] if found else None


def apply_retention(folder: Folder, keep: int, best: int | None = None) -> list[Path | str]:
    """Delete all but the newest ``keep`` checkpoints and the one of iteration ``best``, oldest first.

    ``keep <= 0`` keeps every checkpoint; otherwise the newest one always stays. Each checkpoint
    loses its commit record before its files. Returns the deleted folders (paths or URLs).
    """
    if keep <= 0:
        return []
    found = find_checkpoints(folder)
    kept = {c.iteration for c in found[-keep:]} | {best}
    deleted = []
    for checkpoint in found:  # oldest first
        if checkpoint.iteration not in kept:
            _delete_checkpoint(checkpoint.location)
            deleted.append(checkpoint.path)
    return deleted


def read_runner_info(path: Folder) -> dict[str, Any]:
    """Read and check ``runner.json`` of the checkpoint folder ``path``.

    Raises:
        UsageError: the folder or file is missing, the JSON is damaged or of another format version.
    """
    return _read_runner_info(location_of(path))[0]


def _read_runner_info(location: Location) -> tuple[dict[str, Any], bytes]:
    """``runner.json`` checked, and its bytes (for the commit record's hash)."""
    if not location.is_dir():
        raise UsageError(
            f"checkpoint '{location}' does not exist; give a folder like <session>/checkpoints/checkpoint-<N>"
        )
    runner_file = location / RUNNER_FILE
    try:
        data = runner_file.read_bytes()
        info = json.loads(data.decode("utf-8"))
    except FileNotFoundError:
        raise DamagedCheckpointError(
            f"checkpoint file '{runner_file}' is missing; the checkpoint is incomplete"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DamagedCheckpointError(
            f"checkpoint file '{runner_file}' is damaged (not valid JSON: {error})"
        ) from None
    if not isinstance(info, dict) or "format_version" not in info:
        raise DamagedCheckpointError(
            f"checkpoint file '{runner_file}' is not a digideep runner.json (no format_version)"
        )
    if info["format_version"] != FORMAT_VERSION:
        raise UsageError(
            f"checkpoint file '{runner_file}' has format version {info['format_version']} "
            f"(digideep {info.get('digideep_version', '?')}); this digideep {__version__} reads version "
            f"{FORMAT_VERSION} only: resume it with the version that wrote it, or start a new session"
        )
    for name in ("params", "iteration"):
        if name not in info:
            raise DamagedCheckpointError(
                f"checkpoint file '{runner_file}' lacks the field '{name}'; the file is damaged"
            )
    return info, data


def _commit_record(location: Location) -> dict[str, dict[str, Any]]:
    """The files the commit record lists.

    Raises:
        UsageError: the checkpoint has no record (its save was cut short), or the record is damaged.
    """
    record_file = location / COMMIT_FILE
    try:
        record = record_file.read_json()
    except FileNotFoundError:
        raise DamagedCheckpointError(
            f"checkpoint '{location}' was never committed (no {COMMIT_FILE}: its save was cut short); "
            "load an earlier checkpoint"
        ) from None
    except ValueError as error:
        raise DamagedCheckpointError(
            f"checkpoint file '{record_file}' is damaged (not valid JSON: {error})"
        ) from None
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(files, dict) or not {RUNNER_FILE, STATES_FILE} <= set(files):
        raise DamagedCheckpointError(
            f"checkpoint file '{record_file}' does not list {RUNNER_FILE} and {STATES_FILE}"
        )
    return files


def _verify(file: Location, data: bytes, entry: dict[str, Any]) -> None:
    """Check ``data`` read from ``file`` against its commit-record entry."""
    if len(data) != entry.get("size"):
        raise DamagedCheckpointError(
            f"checkpoint file '{file}' is damaged or truncated ({len(data)} bytes, "
            f"the commit record says {entry.get('size')})"
        )
    if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
        raise DamagedCheckpointError(
            f"checkpoint file '{file}' is damaged or truncated (its sha256 differs from the commit record)"
        )


def load_checkpoint(path: Folder) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read both files of a checkpoint: ``(runner_info, states)``, every tensor on the CPU.

    Every file is checked against the commit record (size and sha256) before it is used.
    ``states.pt`` is loaded with ``weights_only=True``: a checkpoint can hold tensors, arrays and
    plain containers, never code. It is always read with ``map_location="cpu"``, wherever it was
    written: numpy, RNG and pointer states stay on the CPU, and each ``load_state_dict`` moves
    network and optimizer tensors to its own device.

    Raises:
        DamagedCheckpointError: a file is missing, truncated, damaged or uncommitted.
        UsageError: the folder does not exist or is of an incompatible version.
    """
    location = location_of(path)
    info, runner_data = _read_runner_info(location)
    files = _commit_record(location)
    _verify(location / RUNNER_FILE, runner_data, files[RUNNER_FILE])
    states_file = location / STATES_FILE
    try:
        data = states_file.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        raise DamagedCheckpointError(
            f"checkpoint file '{states_file}' is missing; the checkpoint is incomplete"
        ) from None
    _verify(states_file, data, files[STATES_FILE])
    try:
        states = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises RuntimeError, UnpicklingError, EOFError, ... for damaged files
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DamagedCheckpointError(
            f"checkpoint file '{states_file}' is damaged or truncated ({first_line})"
        ) from None
    if not isinstance(states, dict):
        raise DamagedCheckpointError(f"checkpoint file '{states_file}' does not hold a dict of states")
    return info, decode(states)
