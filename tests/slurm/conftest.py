"""A real one-node Slurm cluster on 127.0.0.1 for the tests of this folder (skipped where it cannot run)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from digideep_stack.slurm import LocalSlurm, SlurmUnavailableError, missing


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    """munged, slurmctld and slurmd from Debian's packages, started for the module and stopped after."""
    reason = missing()
    if reason is not None:
        pytest.skip(reason)
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except SlurmUnavailableError as error:
        pytest.skip(f"the local Slurm cluster did not start: {error}")
    yield cluster
    cluster.stop()
