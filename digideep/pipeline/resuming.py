"""Resuming a run: a Runner rebuilt from a checkpoint, its state restored exactly.

:func:`from_checkpoint` builds the Runner again from the params saved in a checkpoint's
``runner.json`` and restores every component from its ``states.pt``
(:class:`~digideep.pipeline.run_state.RunState`), so that the resumed run continues bit for bit;
:func:`resume` finds the newest checkpoint of a session that resumes exactly, passing over damaged
ones with one warning, and counts each resume in the session's ``session.json`` (``resumes``), which
the run's MLflow run carries as the tag ``digideep.resumes``. ``digideep resume``, ``--resume``, a
retried flow run and a requeued Slurm job all come here through
:func:`digideep.pipeline.training.open_run`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from digideep.errors import UsageError
from digideep.memory import DamagedMemoryError, Readback
from digideep.pipeline import components
from digideep.pipeline.devices import DeviceChoice
from digideep.pipeline.runner import Runner
from digideep.storage.checkpoint import Checkpoint, find_checkpoints, load_checkpoint
from digideep.storage.saved_run import CheckpointRead, SavedRun
from digideep.storage.session import Session
from digideep.tracking.journal import JOURNAL_FILE, complete_size
from digideep.tracking.tags import RESUMES_FIELD
from digideep.utility.user_code import IMPORT_PATHS, use_code_folders

__all__ = ["Resumed", "from_checkpoint", "resume", "resume_checkpoint"]

log = logging.getLogger(__name__)


def from_checkpoint(
    session: Session,
    path: Path | str,
    *,
    devices: DeviceChoice | None = None,
    tracker: Any = None,
    modes: tuple[str, ...] = ("train", "test"),
    params: dict[str, Any] | None = None,
) -> Runner:
    """Rebuild a Runner from a checkpoint folder and restore its state exactly.

    ``params`` replaces the checkpoint's params tree (play uses it to set up the eval explorer).
    The states are read on the CPU wherever they were written; each agent's ``load_state_dict``
    moves its networks and optimizers to the agent's device, so a checkpoint written on a GPU
    resumes and plays on the CPU and the reverse.

    The folders of the run's own code (``import_paths``) go on ``sys.path`` first, so that a
    user's agent class imports whatever the current folder is. ``devices`` says where the agents
    go (auto by default), as for :class:`~digideep.pipeline.runner.Runner`.

    Raises:
        UsageError: a checkpoint file is missing, damaged, of another version, or names a class
            that does not exist or does not import (one line naming its recorded folder).
    """
    info, states = load_checkpoint(path)
    return _build(session, path, info, states, devices=devices, tracker=tracker, modes=modes, params=params)


def _build(
    session: Session,
    path: Path | str,
    info: dict[str, Any],
    states: dict[str, Any],
    *,
    devices: DeviceChoice | None = None,
    tracker: Any = None,
    modes: tuple[str, ...] = ("train", "test"),
    params: dict[str, Any] | None = None,
    accept: Callable[[dict[str, Readback]], None] | None = None,
) -> Runner:
    """:func:`from_checkpoint` of a checkpoint already read; a restore that fails (a damaged
    memory) closes the Runner (its environments and memory threads) before the error goes on.

    ``accept(prepared)`` sees what every memory brings back, read and checked, before anything
    is restored; it refuses by raising (a resume refuses a memory that does not come back whole).
    """
    use_code_folders(info[IMPORT_PATHS], params or info["params"], f"session '{session.url}'")
    components.check_classes(info, path)
    runner = Runner(
        session,
        params or info["params"],
        devices=devices,
        tracker=tracker,
        modes=modes,
    )
    try:
        if "train" in modes:
            prepared = runner.state.prepare_memories(states)  # reads only: a refusal changes nothing
            if accept is not None:
                accept(prepared)
            runner.state.load_state_dict(states, prepared)
        else:  # play: only the policies (and the eval explorer's normalisers) are needed
            runner.state.load_policies(states)
    except BaseException:
        runner.close()
        raise
    return runner


@dataclass(frozen=True)
class Resumed:
    """A run rebuilt by :func:`resume`: its Runner, the checkpoint it resumed from, and the session's
    ``session.json`` with this resume counted."""

    runner: Runner
    checkpoint: CheckpointRead
    info: dict[str, Any]


class _Skipped(NamedTuple):
    """A checkpoint a resume passed over, and why."""

    iteration: int
    frames: int | None
    reason: str


def resume(session: Session, saved: SavedRun, devices: DeviceChoice | None = None) -> Resumed | None:
    """Rebuild the Runner of ``session`` from its newest checkpoint that resumes exactly.

    Checkpoints are tried newest first (:meth:`Session.checkpoints_to_resume
    <digideep.storage.session.Session.checkpoints_to_resume>`). One is passed over when a file of it is
    missing or differs from its commit record, or when the metrics journal was cut short of the records
    it covers; the first good one is used, with one warning naming what was damaged and the iterations
    and frames trained again. A checkpoint resumes exactly only if every memory comes back as it saved
    it: a memory's log keeps the rows of the checkpoints retention keeps, so an older one whose rows it
    let go is refused, and so is every checkpoint when a memory chunk fails its checksum or a chunk file
    is missing (they all read the same memory).

    A resume that goes on is counted: ``resumes`` in ``session.json`` grows by one (one write, from
    ``saved.info``).

    Every check reads only: the journal's length, the checkpoint's files, every memory (its chunk
    files listed, every chunk read into the next RAM ring and checked, see
    :meth:`~digideep.pipeline.run_state.RunState.prepare_memories`). Only a checkpoint that passes
    them all is restored (memories, then the journal rewound), so a refusal leaves every file of the
    session as it was.

    Args:
        session: the session to resume, held by this process.
        saved: what the session holds of its run (:meth:`Session.saved_run
            <digideep.storage.session.Session.saved_run>`).
        devices: where the agents train (``--device``, ``--deterministic``); auto by default.

    Returns:
        The Runner, its checkpoint and the updated ``session.json``, or None if the session has no
        committed checkpoint.

    Raises:
        UsageError: no checkpoint resumes exactly: one line naming what is damaged and what to do.
    """
    skipped: list[_Skipped] = []
    journal = session.path / JOURNAL_FILE
    journal_size = complete_size(journal)  # reads only: a torn tail is cut once the resume goes on
    for checkpoint in session.checkpoints_to_resume():
        if checkpoint.damage:
            skipped.append(_Skipped(checkpoint.iteration, checkpoint.frames, checkpoint.damage))
            continue
        info, states = checkpoint.runner_info, checkpoint.states
        short = _journal_short_of(journal, journal_size, states["journal"].get("offset", 0))
        if short:
            skipped.append(_Skipped(checkpoint.iteration, checkpoint.frames, short))
            continue
        accept = functools.partial(_refuse_unless_whole, session, saved, list(skipped), checkpoint.iteration)
        try:  # every memory is checked before anything is restored, the journal rewound last
            runner = _build(session, checkpoint.path, info, states, devices=devices, accept=accept)
        except DamagedMemoryError as error:
            raise UsageError(f"{error}; {_every_checkpoint_reads_it(session, saved)}") from None
        if skipped:
            log.warning("%s", _fallback_line(skipped, checkpoint))
        try:
            updated = session.update_info(**{RESUMES_FIELD: int(saved.info.get(RESUMES_FIELD, 0)) + 1})
        except BaseException:
            runner.close()
            raise
        return Resumed(runner, checkpoint, updated)
    if skipped:
        raise UsageError(_nothing_left(session, saved, skipped))
    return None


def _journal_short_of(journal: Path, size: int, offset: int) -> str:
    """Why ``journal`` (``size`` bytes of whole records) cannot be rewound to a checkpoint's ``offset``
    (empty when it can): it was cut."""
    if offset <= size:
        return ""
    return f"the metrics journal {journal} holds {size} bytes, short of the {offset} this checkpoint covers (it was cut)"


def _every_checkpoint_reads_it(session: Session, saved: SavedRun) -> str:
    """What to do when the memory itself is damaged."""
    return (
        f"every checkpoint of session '{session.url}' resumes from this memory, so none resumes exactly; "
        f"{_start_anew(saved)}"
    )


def _start_anew(saved: SavedRun) -> str:
    module = saved.info.get("params_module") or "<your params>"
    return f"start a new session (digideep train --params {module}) and keep this one to inspect"


def _refuse_unless_whole(
    session: Session,
    saved: SavedRun,
    skipped: list[_Skipped],
    iteration: int,
    prepared: dict[str, Readback],
) -> None:
    """Refuse the checkpoint of ``iteration`` (and so every older one) when a memory would not come
    back whole.

    Raises:
        UsageError: one line naming what each memory lacks and what to do.
    """
    moved = "; ".join(
        f"memory '{name}' keeps {restore.state.size} of its {restore.target.size} rows per worker "
        "(its log no longer holds the others)"
        for name, restore in prepared.items()
        if not restore.whole
    )
    if moved:
        raise UsageError(_nothing_left(session, saved, skipped, iteration, moved))


def _fallback_line(skipped: list[_Skipped], used: CheckpointRead) -> str:
    """One line: what was damaged, which checkpoint is used, and what is trained again."""
    newest = skipped[0]
    lost = "" if newest.frames is None or used.frames is None else f", {newest.frames - used.frames} frames"
    damaged = "; ".join(f"checkpoint-{s.iteration}: {s.reason}" for s in skipped)
    return (
        f"passing over damaged checkpoints ({damaged}); resuming from checkpoint-{used.iteration}: "
        f"iterations {used.iteration + 1} to {newest.iteration} ({newest.iteration - used.iteration}{lost}) are "
        "trained again"
    )


def _nothing_left(
    session: Session,
    saved: SavedRun,
    skipped: list[_Skipped],
    older: int | None = None,
    moved: str = "",
) -> str:
    """One line: no checkpoint of ``session`` resumes exactly, why, and what to do (``older``: the
    iteration of the newest checkpoint refused with every older one, for the reason ``moved``)."""
    reasons = [f"checkpoint-{s.iteration}: {s.reason}" for s in skipped]
    if older is not None:
        reasons.append(
            f"checkpoint-{older} and older: {moved} (a memory keeps the rows of the checkpoints "
            "retention keeps)"
        )
    return (
        f"session '{session.url}' has no complete checkpoint to resume from ({'; '.join(reasons)}); "
        f"{_start_anew(saved)}"
    )


def resume_checkpoint(session: Session) -> Checkpoint:
    """The newest committed checkpoint of ``session``.

    Raises:
        UsageError: the session has none.
    """
    found = find_checkpoints(session.checkpoints_location)
    if not found:
        raise UsageError(
            f"session '{session.url}' has no complete checkpoint to resume from; start a new run"
        )
    return found[-1]
