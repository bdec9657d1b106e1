from __future__ import annotations

import pytest

from tests.agents.ppo.pendulum import pendulum_chunk


@pytest.fixture(scope="package")
def chunk() -> dict:
    """:func:`~tests.agents.ppo.pendulum.pendulum_chunk`, explored once for the package's tests."""
    return pendulum_chunk()
