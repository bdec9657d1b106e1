"""What a session holds of its run, read in a few calls to reopen it.

Reopening a session (``digideep resume``, a retried flow run, a requeued Slurm job) needs its JSON
files and whether it finished (:class:`SavedRun`, from :meth:`Session.saved_run
<digideep.storage.session.Session.saved_run>`), then its committed checkpoints, newest first, each
read and checked against its commit record or with the reason it cannot be used
(:class:`CheckpointRead`, from :func:`checkpoints_newest_first`, which
:meth:`Session.checkpoints_to_resume <digideep.storage.session.Session.checkpoints_to_resume>`
walks). The checks of what the caller restores from a checkpoint (its memories, its journal) are the
caller's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from digideep.errors import UsageError
from digideep.storage.checkpoint import (
    DamagedCheckpointError,
    Folder,
    committed_checkpoints,
    load_checkpoint,
    read_runner_info,
)

__all__ = ["CheckpointRead", "SavedRun", "checkpoints_newest_first"]


@dataclass(frozen=True)
class SavedRun:
    """The files of a session that say how to reopen its run.

    Attributes:
        params: the resolved params tree (``params.json``).
        cpanel: the cpanel after overrides (``cpanel.json``).
        info: the contents of ``session.json`` (params module, tracking ids, ``import_paths``,
            ``resumes``); empty when there is none.
        done: training finished (``done.json`` exists).
    """

    params: dict[str, Any]
    cpanel: dict[str, Any]
    info: dict[str, Any]
    done: bool


@dataclass(frozen=True)
class CheckpointRead:
    """One committed checkpoint as a resume finds it: read and checked, or why it cannot be used.

    Attributes:
        iteration: the iteration it was taken after (from its folder's name).
        path: its folder: a local path, or a URL on an object store.
        frames: the frames counter its ``runner.json`` records (None when that cannot be read).
        runner_info: the checked ``runner.json`` (None when damaged).
        states: the decoded ``states.pt``, every tensor on the CPU (None when damaged).
        damage: why it cannot be used (a file missing or differing from its commit record);
            empty when it was read whole.
    """

    iteration: int
    path: Path | str
    frames: int | None
    runner_info: dict[str, Any] | None = None
    states: dict[str, Any] | None = field(default=None, repr=False)
    damage: str = ""


def checkpoints_newest_first(folder: Folder) -> Iterator[CheckpointRead]:
    """Read the committed checkpoints under ``folder`` one at a time, newest first.

    Each is read only when the caller asks for it (a resume stops at the first it can use); one
    listing of the folder finds them all (:func:`~digideep.storage.checkpoint.committed_checkpoints`).

    Raises:
        UsageError: a checkpoint of another format version (every checkpoint of a session has the
            same one: none could be used).
    """
    for checkpoint in committed_checkpoints(folder):
        try:
            info, states = load_checkpoint(checkpoint.path)
        except DamagedCheckpointError as error:
            yield CheckpointRead(
                checkpoint.iteration, checkpoint.path, _frames_of(checkpoint.path), damage=str(error)
            )
            continue
        yield CheckpointRead(checkpoint.iteration, checkpoint.path, _frames_in(info), info, states)


def _frames_of(path: Path | str) -> int | None:
    """The frames counter of a damaged checkpoint's ``runner.json``, if it can still be read."""
    try:
        return _frames_in(read_runner_info(path))
    except UsageError:
        return None


def _frames_in(info: dict[str, Any]) -> int | None:
    try:
        return int(info["counters"]["frames"])
    except (KeyError, TypeError, ValueError):
        return None
