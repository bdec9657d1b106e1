"""The Runner's checkpointable state: the checkpoint stage that writes it, and how a Runner is rebuilt
from a checkpoint.

Kept apart from :mod:`digideep.pipeline.runner` so that the stages and the schedule stay short.
:meth:`RunnerStateMixin.state_dict` is ``states.pt`` of a checkpoint and
:meth:`RunnerStateMixin.runner_info` its ``runner.json`` (see :mod:`digideep.storage.checkpoint`);
:meth:`RunnerStateMixin.from_checkpoint` builds the Runner again from the params saved there and
restores every component, so that the resumed run continues bit for bit.
"""

from __future__ import annotations

import functools
import logging
import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Self

from digideep.errors import UsageError
from digideep.memory import DamagedMemoryError, Readback
from digideep.pipeline import components
from digideep.pipeline.counters import Counters
from digideep.pipeline.rng import rng_state, set_rng_state
from digideep.pipeline.session import Session
from digideep.pipeline.upload_cache import UploadCache
from digideep.storage.checkpoint import (
    Checkpoint,
    DamagedCheckpointError,
    apply_retention,
    committed_checkpoints,
    find_checkpoints,
    load_checkpoint,
    read_runner_info,
    write_checkpoint,
)
from digideep.storage.lease import LEASE_MARGIN
from digideep.tracking.journal import CHECKPOINT_METRIC, JOURNAL_FILE, MetricsJournal, complete_size
from digideep.utility.user_code import IMPORT_PATHS, use_code_folders

__all__ = ["RunnerStateMixin", "resume_checkpoint"]

log = logging.getLogger(__name__)


class RunnerStateMixin:
    """The checkpoint stage, ``runner_info``, ``state_dict``, ``load_state_dict`` and ``from_checkpoint``
    of :class:`~digideep.pipeline.runner.Runner` (whose attributes below, and ``_account_wall_time``,
    they use)."""

    session: Session
    params: dict[str, Any]
    built: Any
    counters: Counters
    agents: dict[str, Any]
    explorers: dict[str, Any]
    memories: dict[str, Any]
    monitor: Any
    journal: MetricsJournal | None
    uploads: UploadCache
    tracker: Any
    keep_checkpoints: int

    def checkpoint(self) -> str:
        """Flush the memories, write the two checkpoint files, commit, apply retention; return the folder.

        The files are written under ``checkpoints/checkpoint-<iteration>/`` and the checkpoint
        commits when its record ``commit.json`` is written, last (see
        :mod:`digideep.storage.checkpoint`). Between the two, the checkpoint's own duration is
        appended to the metrics journal as ``time/checkpoint`` at the checkpoint's step, so a
        committed checkpoint always has it: the journal state saved in ``states.pt`` covers the
        records before it, and resuming keeps this one record too (see
        :meth:`~digideep.tracking.journal.MetricsJournal.rewind`). A session on object storage then
        uploads its journal and log, still before the commit, so the journal there always covers
        the newest committed checkpoint. MLflow is not waited for: the journal holds the metrics
        whether the server answers or not.
        """
        started = time.perf_counter()
        self._account_wall_time()
        test_return = self.counters.last_test_return
        iteration = self.counters.iteration
        if not math.isnan(test_return) and test_return > self.counters.best_test_return:
            self.counters.best_test_return = test_return
            self.counters.best_checkpoint = iteration
        self.counters.last_checkpoint = iteration
        for memory in self.memories.values():
            memory.flush()
        folder = self.session.checkpoints_location
        pending = write_checkpoint(folder, iteration, self.runner_info(), self.state_dict())
        if self.journal is not None:
            elapsed = time.perf_counter() - started
            self.journal.append(self.counters.frames, {CHECKPOINT_METRIC: elapsed}, checkpoint=iteration)
        # The lease must outlive the upload and the commit: a host whose session was taken over
        # (it was cut off past the lease's expiry) must not commit over the new holder's checkpoints.
        self.session.ensure_held(margin=LEASE_MARGIN)
        self.uploads.upload(JOURNAL_FILE, "log.txt")  # URL sessions: before the commit
        saved = pending.commit()
        for memory in self.memories.values():  # committed: the logs keep what kept checkpoints need
            memory.checkpoint_committed(keep=self.keep_checkpoints)
        best = self.counters.best_checkpoint
        for deleted in apply_retention(folder, self.keep_checkpoints, best):
            log.debug("retention removed %s", deleted)
        if self.tracker is not None:
            self.tracker.flush(force=True)
            # MLflow keeps what the session keeps (None: retention is off, every checkpoint stays)
            kept = [c.location.name for c in find_checkpoints(folder)] if self.keep_checkpoints > 0 else None
            if isinstance(saved.path, Path):
                self.tracker.log_checkpoint(saved.path, kept)
            else:  # MLflow uploads local files: a scratch copy of this checkpoint's
                with tempfile.TemporaryDirectory(prefix="digideep-checkpoint-") as scratch:
                    self.tracker.log_checkpoint(pending.write_copy(Path(scratch)), kept)
        log.info("checkpoint %s", saved.path)
        return str(saved.path)

    def runner_info(self) -> dict[str, Any]:
        """What ``runner.json`` holds besides the versions: params, counters, classes."""
        info = self.session.info()
        return {
            "params": self.params,
            "params_module": info.get("params_module"),
            "counters": asdict(self.counters),
            "classes": self.built.class_paths(),
            IMPORT_PATHS: info.get(IMPORT_PATHS, {}),
            "resolved": self.resolved_settings(),
        }

    def resolved_settings(self) -> dict[str, str]:
        """What the params left to the machine, as it was decided: each agent's
        :meth:`~digideep.agents.base.AgentBase.resolved_settings`, e.g. its update mode and where it
        samples its replay (``{"agents/<name>/resolved/update_mode": "eager"}``; MLflow params too)."""
        return {
            f"agents/{name}/resolved/{setting}": value
            for name, agent in self.agents.items()
            for setting, value in agent.resolved_settings().items()
        }

    def state_dict(self) -> dict[str, Any]:
        """Every component's state, the counters, the Monitor, the RNGs and the journal's offset."""
        return {
            "counters": asdict(self.counters),
            "agents": {name: agent.state_dict() for name, agent in self.agents.items()},
            "explorers": {mode: explorer.state_dict() for mode, explorer in self.explorers.items()},
            "memories": {name: memory.state_dict() for name, memory in self.memories.items()},
            "monitor": self.monitor.state_dict(),
            "rng": rng_state(),
            "journal": self.journal.state_dict() if self.journal is not None else {},
        }

    def prepare_memories(self, state: dict[str, Any]) -> dict[str, Readback]:
        """Read back and check every memory as ``state`` restores it, changing nothing (no file, no
        pointer; see :meth:`digideep.memory.Memory.prepare_restore`).

        Raises:
            DamagedMemoryError: a memory lacks a chunk file or a chunk fails its checksum.
        """
        return {
            name: memory.prepare_restore(state["memories"][name]) for name, memory in self.memories.items()
        }

    def load_state_dict(self, state: dict[str, Any], prepared: dict[str, Readback] | None = None) -> None:
        """Restore :meth:`state_dict` into the components this Runner built from the same params.

        ``prepared``: :meth:`prepare_memories`'s for this ``state`` (made first when not given), so
        that a damaged memory is found before any memory, or the journal, changes.
        """
        prepared = self.prepare_memories(state) if prepared is None else prepared
        self.counters = Counters.from_dict(state["counters"])
        for name, agent in self.agents.items():
            agent.load_state_dict(state["agents"][name])
        for mode, explorer in self.explorers.items():
            if mode in state["explorers"]:
                explorer.load_state_dict(state["explorers"][mode])
        for name, memory in self.memories.items():
            memory.restore(state["memories"][name], prepared[name])
        self.monitor.load_state_dict(state["monitor"])
        set_rng_state(state["rng"])
        if self.journal is not None and "offset" in state.get("journal", {}):
            # the replayed iterations append their records again
            self.journal.rewind(state["journal"]["offset"], checkpoint=self.counters.iteration)

    @classmethod
    def from_checkpoint(
        cls,
        session: Session,
        path: Path | str,
        *,
        tracker: Any = None,
        modes: tuple[str, ...] = ("train", "test"),
        params: dict[str, Any] | None = None,
    ) -> Self:
        """Rebuild a Runner from a checkpoint folder and restore its state exactly.

        ``params`` replaces the checkpoint's params tree (play uses it to set up the eval explorer).
        The states are read on the CPU wherever they were written; each agent's ``load_state_dict``
        moves its networks and optimizers to the agent's device, so a checkpoint written on a GPU
        resumes and plays on the CPU and the reverse.

        The folders of the run's own code (``import_paths``) go on ``sys.path`` first, so that a
        user's agent class imports whatever the current folder is.

        Raises:
            UsageError: a checkpoint file is missing, damaged, of another version, or names a class
                that does not exist or does not import (one line naming its recorded folder).
        """
        info, states = load_checkpoint(path)
        return cls._build(session, path, info, states, tracker=tracker, modes=modes, params=params)

    @classmethod
    def _build(
        cls,
        session: Session,
        path: Path | str,
        info: dict[str, Any],
        states: dict[str, Any],
        *,
        tracker: Any = None,
        modes: tuple[str, ...] = ("train", "test"),
        params: dict[str, Any] | None = None,
        accept: Callable[[dict[str, Readback]], None] | None = None,
    ) -> Self:
        """:meth:`from_checkpoint` of a checkpoint already read; a restore that fails (a damaged
        memory) closes the Runner (its environments and memory threads) before the error goes on.

        ``accept(prepared)`` sees what every memory brings back, read and checked, before anything
        is restored; it refuses by raising (a resume refuses a memory that does not come back whole).
        """
        folders = info.get(IMPORT_PATHS) or session.info().get(IMPORT_PATHS)  # older runner.json: none
        use_code_folders(folders, params or info["params"], f"session '{session.url}'")
        components.check_classes(info, path)
        runner = cls(session, params or info["params"], tracker=tracker, modes=modes)
        try:
            if "train" in modes:
                prepared = runner.prepare_memories(states)  # reads only: a refusal changes nothing
                if accept is not None:
                    accept(prepared)
                runner.load_state_dict(states, prepared)
            else:  # play: only the policies (and the eval explorer's normalisers) are needed
                for name, agent in runner.agents.items():
                    agent.load_state_dict(states["agents"][name])
                train_explorer = states["explorers"].get("train")
                for explorer in runner.explorers.values():
                    components.load_normalizers(explorer, train_explorer)
        except BaseException:
            runner.close()
            raise
        return runner

    @classmethod
    def resume(cls, session: Session) -> tuple[Self, Checkpoint] | None:
        """Rebuild the Runner of ``session`` from its newest checkpoint that resumes exactly.

        Checkpoints are tried newest first (:func:`committed_checkpoints`). One is passed over when
        a file of it is missing or differs from its commit record, or when the metrics journal was
        cut short of the records it covers; the first good one is used, with one warning naming what
        was damaged and the iterations and frames trained again. A checkpoint resumes exactly only if
        every memory comes back as it saved it: a memory's log keeps the rows of the checkpoints
        retention keeps, so an older one whose rows it let go is refused, and so is every checkpoint
        when a memory chunk fails its checksum or a chunk file is missing (they all read the same
        memory).

        Every check reads only: the journal's length, the checkpoint's files, every memory (its chunk
        files listed, every chunk read into the next RAM ring and checked, see
        :meth:`prepare_memories`). Only a checkpoint that passes them all is restored (memories,
        then the journal rewound), so a refusal leaves every file of the session as it was.

        Returns:
            The Runner and its checkpoint, or None if the session has no committed checkpoint.

        Raises:
            UsageError: no checkpoint resumes exactly: one line naming what is damaged and what to do.
        """
        skipped: list[tuple[Checkpoint, str]] = []
        journal = session.path / JOURNAL_FILE
        journal_size = complete_size(journal)  # reads only: a torn tail is cut once the resume goes on
        for checkpoint in committed_checkpoints(session.checkpoints_location):
            try:
                info, states = load_checkpoint(checkpoint.path)
            except DamagedCheckpointError as error:
                skipped.append((checkpoint, str(error)))
                continue
            short = _journal_short_of(journal, journal_size, states.get("journal", {}).get("offset", 0))
            if short:
                skipped.append((checkpoint, short))
                continue
            accept = functools.partial(_refuse_unless_whole, session, list(skipped), checkpoint)
            try:  # every memory is checked before anything is restored, the journal rewound last
                runner = cls._build(session, checkpoint.path, info, states, accept=accept)
            except DamagedMemoryError as error:
                raise UsageError(f"{error}; {_every_checkpoint_reads_it(session)}") from None
            if skipped:
                log.warning("%s", _fallback_line(skipped, checkpoint, info))
            return runner, checkpoint
        if skipped:
            raise UsageError(_nothing_left(session, skipped))
        return None


def _journal_short_of(journal: Path, size: int, offset: int) -> str:
    """Why ``journal`` (``size`` bytes of whole records) cannot be rewound to a checkpoint's ``offset``
    (empty when it can): it was cut."""
    if offset <= size:
        return ""
    return f"the metrics journal {journal} holds {size} bytes, short of the {offset} this checkpoint covers (it was cut)"


def _every_checkpoint_reads_it(session: Session) -> str:
    """What to do when the memory itself is damaged."""
    return (
        f"every checkpoint of session '{session.url}' resumes from this memory, so none resumes exactly; "
        f"{_start_anew(session)}"
    )


def _start_anew(session: Session) -> str:
    module = session.info().get("params_module") or "<your params>"
    return f"start a new session (digideep train --params {module}) and keep this one to inspect"


def _refuse_unless_whole(
    session: Session,
    skipped: list[tuple[Checkpoint, str]],
    checkpoint: Checkpoint,
    prepared: dict[str, Readback],
) -> None:
    """Refuse ``checkpoint`` (and so every older one) when a memory would not come back whole.

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
        raise UsageError(_nothing_left(session, skipped, checkpoint, moved))


def _fallback_line(skipped: list[tuple[Checkpoint, str]], used: Checkpoint, info: dict[str, Any]) -> str:
    """One line: what was damaged, which checkpoint is used, and what is trained again."""
    newest = skipped[0][0]
    frames = _frames_of(newest)
    lost = "" if frames is None else f", {frames - info['counters']['frames']} frames"
    damaged = "; ".join(f"checkpoint-{c.iteration}: {reason}" for c, reason in skipped)
    return (
        f"passing over damaged checkpoints ({damaged}); resuming from checkpoint-{used.iteration}: "
        f"iterations {used.iteration + 1} to {newest.iteration} ({newest.iteration - used.iteration}{lost}) are "
        "trained again"
    )


def _frames_of(checkpoint: Checkpoint) -> int | None:
    """The frames counter of a checkpoint's runner.json, if it can still be read."""
    try:
        return int(read_runner_info(checkpoint.path)["counters"]["frames"])
    except (UsageError, KeyError, TypeError, ValueError):
        return None


def _nothing_left(
    session: Session,
    skipped: list[tuple[Checkpoint, str]],
    older: Checkpoint | None = None,
    moved: str = "",
) -> str:
    """One line: no checkpoint of ``session`` resumes exactly, why, and what to do."""
    reasons = [f"checkpoint-{c.iteration}: {reason}" for c, reason in skipped]
    if older is not None:
        reasons.append(
            f"checkpoint-{older.iteration} and older: {moved} (a memory keeps the rows of the checkpoints "
            "retention keeps)"
        )
    return (
        f"session '{session.url}' has no complete checkpoint to resume from ({'; '.join(reasons)}); "
        f"{_start_anew(session)}"
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
