"""Embedded sqlite stores created whole or not at all: MLflow's ``mlflow.db`` and Optuna's ``optuna.db``.

MLflow and Optuna create a sqlite store's schema on first use, table by table and migration by
migration. A process killed in the middle (a Ctrl-C or ``kill -9`` in the first seconds of a first
run) left a store that every later command refused (``table guardrails already exists``): no run
could use it again. So a missing store is built in a temporary file beside it and renamed into
place once its schema is complete: readers see no file, or a whole one. A file lock beside the
store (``<store>.lock``) makes processes that start together on a fresh store build it once; the
others wait and then use it. A store that exists is used as it is.

A temporary file that a killed process left behind is removed by the next process that holds the
lock (only a lock holder builds, so no one else is writing it).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from filelock import FileLock

from digideep.storage.files import fsync_dir

__all__ = ["create_mlflow_store", "create_optuna_store", "create_sqlite_store"]

log = logging.getLogger(__name__)

_BUILDING = ".building"


def create_sqlite_store(path: Path, build: Callable[[str], None]) -> bool:
    """Create the sqlite database ``path`` whole, by ``build(url)`` on a temporary file, unless it exists.

    Args:
        path: the database file (its folder is created).
        build: creates the schema in the database at ``url`` (``sqlite:///<temporary file>``) and
            closes its connections.

    Returns:
        Whether this call created the store (False: it existed, or another process created it).
    """
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{path}.lock", thread_local=False):
        if path.exists():  # another process built it while this one waited
            return False
        for stale in path.parent.glob(f".{path.name}.*{_BUILDING}*"):  # a killed builder's file
            stale.unlink(missing_ok=True)
        temporary = path.parent / f".{path.name}.{os.getpid()}{_BUILDING}"
        try:
            build(f"sqlite:///{temporary}")
            fsync_dir(temporary)
            os.replace(temporary, path)
            fsync_dir(path.parent)
        finally:
            temporary.unlink(missing_ok=True)
    log.info("created the store %s", path)
    return True


def create_mlflow_store(path: Path, artifact_root: str) -> bool:
    """Create MLflow's embedded store ``path`` whole (its schema at the head revision), unless it exists.

    Args:
        path: the database file, e.g. ``data/mlflow.db``.
        artifact_root: URI of the artifacts of its Default experiment (``file://.../mlartifacts``).
    """
    return create_sqlite_store(path, lambda url: _build_mlflow(url, artifact_root))


def create_optuna_store(path: Path) -> bool:
    """Create Optuna's RDB store ``path`` whole (its tables and version), unless it exists."""
    return create_sqlite_store(path, _build_optuna)


def _build_mlflow(url: str, artifact_root: str) -> None:
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    # MLflow's two INFO lines on creating tables say what digideep's own line says, once
    with _quiet_logger("mlflow.store.db.utils"):
        store = SqlAlchemyStore(url, artifact_root)  # runs every migration, adds the Default experiment
    store.engine.dispose()
    # SqlAlchemyStore keeps one engine per URI for the process; this URI is never opened again
    with contextlib.suppress(AttributeError):
        SqlAlchemyStore._engine_map.pop(url, None)


def _build_optuna(url: str) -> None:
    import optuna

    optuna.storages.RDBStorage(url).engine.dispose()


@contextlib.contextmanager
def _quiet_logger(name: str) -> Iterator[None]:
    """Raise logger ``name`` to WARNING for the block."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)
