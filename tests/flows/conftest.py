"""The Prefect server and worker that the flow tests share (tests/flows/test_tune.py, slow, has its own)."""

from __future__ import annotations

import pytest

from tests.flows.stacks import client_of, running_stack


@pytest.fixture(scope="session")
def fault_markers(tmp_path_factory):
    """Where the benchmark tests' cells (tests/flows/faulty_cell.py, stalled_cell.py) keep their markers."""
    return tmp_path_factory.mktemp("benchmark-faults")


@pytest.fixture(scope="session")
def shared_stack(tmp_path_factory, mlflow_uri, s3_server, fault_markers):
    """One server and worker for every file that asks for ``stack`` (starting one takes 30-70 s); its
    worker's sessions on s3:// reach the test's S3 server."""
    env = {**s3_server.env, "DIGIDEEP_BENCHMARK_TEST_DIR": str(fault_markers)}
    with running_stack(tmp_path_factory.mktemp("prefect"), mlflow_uri, **env) as local:
        yield local


@pytest.fixture(scope="module")
def stack(shared_stack):
    """The shared server and worker, with this process's Prefect client pointed at it for the module
    (flows run in-process reach it; other files' tests see their own settings)."""
    with client_of(shared_stack) as local:
        yield local
