"""A real one-node Slurm cluster on 127.0.0.1 for the tests of this folder (skipped where it cannot run)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from digideep_stack.slurm import LocalSlurm, SlurmUnavailableError, missing


def running_cluster(folder: Path, **options: int) -> Iterator[LocalSlurm]:
    """A :class:`LocalSlurm` in ``folder`` with ``options``, started, yielded, and stopped after; the
    test is skipped where the cluster cannot run here."""
    reason = missing()
    if reason is not None:
        pytest.skip(reason)
    cluster = LocalSlurm(folder, **options)
    try:
        cluster.start()
    except SlurmUnavailableError as error:
        pytest.skip(f"the local Slurm cluster did not start: {error}")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    """munged, slurmctld and slurmd from Debian's packages, started for the module and stopped after."""
    yield from running_cluster(tmp_path_factory.mktemp("slurm"))


def submission_env(cluster: LocalSlurm, mlflow_uri: str) -> dict[str, str]:
    """The environment of submissions to ``cluster``, which sbatch passes on to the jobs: the cluster
    and the MLflow store."""
    return {**cluster.env, "MLFLOW_TRACKING_URI": mlflow_uri, "PYTHONHASHSEED": "0"}


@pytest.fixture(scope="module")
def job_env(slurm_cluster: LocalSlurm, mlflow_uri: str) -> dict[str, str]:
    """The environment of submissions to :func:`slurm_cluster`."""
    return submission_env(slurm_cluster, mlflow_uri)
