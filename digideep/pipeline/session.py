"""The Session: one run's folder, its lock, its log file and its device.

A session lives at ``<root>/<name>/`` (root ``data/sessions`` by default)::

    cpanel.json        the cpanel after overrides
    params.json        the resolved params tree
    session.json       params module, creation time, digideep version, tracking ids
    log.txt            a copy of the console log
    checkpoints/       checkpoint-<iteration>/{runner.json, states.pt}
    memory/<name>.zarr the durable copies of the replay memories
    videos/            evaluation videos
    .lock              the kernel lock (``flock``) of the process using the session
    .lock.json         that process's pid and host, for the message that refuses a second one
    done.json          written when training finished

Only one process may use a session at a time: a second one is refused with a one-line message
naming the holder. The lock is a kernel lock on ``.lock`` (:class:`filelock.FileLock`), so it dies
with its holder: a crashed run leaves no stale lock to clean up, and no starter ever removes
another's lock file (removing and retaking by hand let two starters hold the lock at once).
Processes forked after the lock was taken (the environment workers) share it until they exit.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

import psutil
import torch
from filelock import FileLock, Timeout

from digideep import __version__
from digideep.errors import UsageError
from digideep.pipeline.devices import agent_device, default_device, requested_device
from digideep.utility.files import atomic_write_json

__all__ = ["Session", "default_session_name"]

log = logging.getLogger(__name__)

DEFAULT_ROOT = Path("data") / "sessions"
LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def default_session_name(params_name: str) -> str:
    """``<YYYYmmdd-HHMMSS>-<params name>``, e.g. ``20261121-203000-pendulum_sac``."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{params_name.rsplit('.', 1)[-1]}"


class Session:
    """A run folder with a lock, a log file and the compute device.

    Args:
        root: folder that holds sessions.
        name: the session's name; generated from the time and ``params_name`` when None.
        params_name: the parameter module's name, used for generated names.
        resume: open an existing session instead of creating a new one.
        torch_threads: ``torch.set_num_threads`` value, when given.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"``; None takes ``session.device`` from
            the params (:meth:`configure_device`), else auto. ``--device`` (``$DIGIDEEP_DEVICE``)
            wins over both. See :mod:`digideep.pipeline.devices`.
        lock: take the session's lock and copy the log into it. ``False`` opens an existing
            session for reading (playing a checkpoint while training goes on).

    Raises:
        UsageError: the session exists (and ``resume`` is False), does not exist (and ``resume`` is
            True), is locked by a live process, or the device does not exist here.
    """

    def __init__(
        self,
        root: str | Path = DEFAULT_ROOT,
        name: str | None = None,
        params_name: str = "session",
        *,
        resume: bool = False,
        torch_threads: int | None = None,
        device: str | None = None,
        lock: bool = True,
    ) -> None:
        self._device_arg = device
        self.device_request: str = requested_device(device, None)  # checked before touching disk
        self.name = name or default_session_name(params_name)
        self.path = Path(root) / self.name
        if resume and not self.path.is_dir():
            raise UsageError(f"session '{self.path}' does not exist; list sessions with 'ls {root}'")
        if not resume and self.path.exists():
            raise UsageError(
                f"session '{self.path}' already exists; resume it or choose another --session-name"
            )
        # thread_local=False: the Session owns the lock whichever thread (a Prefect task) closes it
        self._lock = FileLock(self.path / ".lock", timeout=0, thread_local=False)
        self._owner_path = self.path / ".lock.json"
        self._log_handler: logging.Handler | None = None
        self._locked = lock
        try:
            self.path.mkdir(parents=True, exist_ok=resume)
        except FileExistsError:  # another starter created it since the check above
            raise UsageError(
                f"session '{self.path}' already exists; resume it or choose another --session-name"
            ) from None
        if lock:
            try:
                self._acquire_lock()
            except BaseException:
                if not resume:
                    _remove_empty_tree(self.path)
                raise
        for folder in (self.checkpoints_path, self.videos_path, self.path / "memory"):
            folder.mkdir(exist_ok=True)
        if lock:
            self._attach_log_file()
        if torch_threads:
            torch.set_num_threads(torch_threads)
        log.info("session %s (%s), device %s", self.path, "resumed" if resume else "new", self.device_request)

    # -- device --------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        """The requested device; under ``auto`` the first CUDA device when there is one, else the CPU.

        Agents ask :meth:`device_for` instead: under ``auto`` an on-policy MLP agent stays on the CPU.
        """
        return default_device(self.device_request)

    def configure_device(self, params_device: str | None) -> None:
        """Take ``session.device`` of the params tree unless ``--device`` or the constructor chose.

        Raises:
            UsageError: the device does not exist on this machine.
        """
        self.device_request = requested_device(self._device_arg, params_device)

    def device_for(self, agent: Any, observation_space: Any) -> torch.device:
        """The device of ``agent`` (logged with the reason), see :mod:`digideep.pipeline.devices`."""
        return agent_device(agent, observation_space, self.device_request)

    # -- paths ---------------------------------------------------------------------------------
    @property
    def checkpoints_path(self) -> Path:
        return self.path / "checkpoints"

    @property
    def videos_path(self) -> Path:
        return self.path / "videos"

    @property
    def log_path(self) -> Path:
        return self.path / "log.txt"

    def memory_path(self, name: str) -> Path:
        """Folder of the Zarr group of memory ``name``."""
        return self.path / "memory" / f"{name}.zarr"

    def memory_url(self, name: str) -> str:
        """Place of the Zarr group of memory ``name``, as a memory opens it (a path or a URL)."""
        return str(self.memory_path(name))  # the s3session branch replaces this with the session's URL

    # -- metadata ------------------------------------------------------------------------------
    def write_params(self, module: str, cpanel: dict[str, Any], params: dict[str, Any]) -> None:
        """Write ``cpanel.json``, ``params.json`` and ``session.json`` (each atomically)."""
        atomic_write_json(self.path / "cpanel.json", cpanel)
        atomic_write_json(self.path / "params.json", params)
        self.update_info(
            params_module=module, created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), version=__version__
        )

    def read_json(self, filename: str) -> dict[str, Any]:
        """Read one of the session's JSON files (``params.json``, ``cpanel.json``, ``session.json``)."""
        path = self.path / filename
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            raise UsageError(f"session file '{path}' is missing; the session is incomplete") from None
        except json.JSONDecodeError as error:
            raise UsageError(
                f"session file '{path}' is not valid JSON ({error.msg}); the file is damaged"
            ) from None

    def info(self) -> dict[str, Any]:
        """The contents of ``session.json`` (empty before :meth:`write_params`)."""
        path = self.path / "session.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def update_info(self, **fields: Any) -> None:
        """Merge ``fields`` into ``session.json`` (e.g. the MLflow run id, the Prefect flow-run id)."""
        atomic_write_json(self.path / "session.json", {**self.info(), **fields})

    @property
    def is_done(self) -> bool:
        return (self.path / "done.json").exists()

    def mark_done(self, **summary: Any) -> None:
        """Record that training finished; a later resume says so instead of training again."""
        atomic_write_json(
            self.path / "done.json", {"finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **summary}
        )

    # -- lock and log --------------------------------------------------------------------------
    def _acquire_lock(self) -> None:
        try:
            self._lock.acquire()
        except Timeout:
            holder = _read_owner(self._owner_path)
            by = f"process {holder['pid']} on {holder['host']}" if holder else "another process"
            raise UsageError(
                f"session '{self.path}' is in use by {by}; wait for it to finish or stop it"
            ) from None
        atomic_write_json(self._owner_path, {"pid": os.getpid(), "host": socket.gethostname()})

    def _attach_log_file(self) -> None:
        handler = logging.FileHandler(self.log_path, encoding="utf-8")
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        logging.getLogger().addHandler(handler)
        self._log_handler = handler

    def close(self) -> None:
        """Release the lock and detach the log file. Safe to call twice."""
        if self._log_handler is not None:
            logging.getLogger().removeHandler(self._log_handler)
            self._log_handler.close()
            self._log_handler = None
        if self._locked:
            self._owner_path.unlink(missing_ok=True)  # still ours: the kernel lock is held until below
            self._lock.release()
            self._locked = False

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Session({str(self.path)!r})"


def _read_owner(path: Path) -> dict[str, Any] | None:
    """The pid and host of the lock's holder, or None when unknown or left by a process now gone."""
    try:
        owner = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None  # the holder has not written it yet
    pid = owner.get("pid") if isinstance(owner, dict) else None
    if not isinstance(pid, int) or (owner.get("host") == socket.gethostname() and not psutil.pid_exists(pid)):
        return None  # left by a crashed holder; the new one has not written its own yet
    return owner


def _remove_empty_tree(path: Path) -> None:
    """Remove ``path`` if it holds nothing but empty folders (a session that never started)."""
    for child in sorted(path.rglob("*"), reverse=True):
        if child.is_dir():
            child.rmdir()
        else:
            return
    path.rmdir()
