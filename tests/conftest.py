"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import DEVICES
from tests.s3 import S3Server, moto_server

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

REPO = Path(__file__).resolve().parents[1]

# The longest files of the default suite (one to four minutes each), collected first: `make test`
# hands whole files to its processes in collection order, so these start at once instead of
# leaving one process busy with them after the other has finished.
LONG_FILES = (
    "docs/test_commands.py",
    "stack/test_stack.py",
    "stack/test_cluster.py",
    "pipeline/test_s3_resume.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.path.as_posix()
        return next((i for i, name in enumerate(LONG_FILES) if path.endswith(name)), len(LONG_FILES))

    items.sort(key=rank)  # stable: every other file keeps its place and its order


DEMO_PARAMS = '''
"""A small parameter file for tests of the params machinery."""

cpanel = {
    "model_name": "Pendulum-v1",  # Gymnasium id
    "seed": 0,  # seed of everything
    "lr": 0.001,  # learning rate
    "number_epochs": 2,  # epochs to train
    "deterministic_test": True,  # a bool knob
    "hidden_sizes": [64, 64],  # a list knob
}


def gen_params(cpanel):
    return {"env": {"model_name": cpanel["model_name"]}, "agents": {"agent": {"args": {"lr": cpanel["lr"]}}},
            "runner": {"number_epochs": cpanel["number_epochs"], "seed": cpanel["seed"]}}
'''


@pytest.fixture(scope="session")
def mlflow_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One embedded MLflow store for the whole test session (creating one costs seconds), made as
    digideep makes one: its Default experiment keeps artifacts beside it, not in the cwd (the repository)."""
    from digideep.tracking.naming import ensure_store

    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    ensure_store(uri)
    return uri


@pytest.fixture
def run_env(mlflow_uri: str) -> dict[str, str]:
    """Environment for training subprocesses: the shared MLflow store, hashing fixed."""
    return {**os.environ, "MLFLOW_TRACKING_URI": mlflow_uri, "PYTHONHASHSEED": "0"}


@pytest.fixture
def params_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A working folder with ``params/demo.py``, made the cwd; the ``params`` package is re-imported.

    Afterwards the scratch ``params`` modules are forgotten and the project's own come back, so later
    tests import the real parameter files whatever order the tests run in.
    """
    folder = tmp_path / "params"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "demo.py").write_text(textwrap.dedent(DEMO_PARAMS))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in [m for m in sys.modules if m == "params" or m.startswith("params.")]:
        monkeypatch.delitem(sys.modules, name)
    yield tmp_path
    for name in [m for m in sys.modules if m == "params" or m.startswith("params.")]:
        del sys.modules[name]  # monkeypatch then restores the project's modules that were loaded


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    """Each available device in turn: ``"cpu"``, and ``"cuda"`` where there is one (skipped elsewhere)."""
    return request.param


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One real S3-compatible server (moto) on 127.0.0.1 for the whole test session."""
    yield from moto_server(tmp_path_factory.mktemp("moto") / "moto.log")


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Point this process's S3 clients at the test server; returns the variables for subprocesses."""
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    return s3_server.env


@pytest.fixture
def s3_bucket(s3_server: S3Server, s3_env: dict[str, str]) -> str:
    """A fresh, empty bucket on the test server (its name; URLs are ``s3://<name>/...``)."""
    return s3_server.make_bucket()
