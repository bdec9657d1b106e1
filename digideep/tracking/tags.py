"""The tags a run carries: where its code, params and session came from."""

from __future__ import annotations

import getpass
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from digideep import __version__
from digideep.tracking.naming import MAX_TAG_VALUE_LENGTH, mlflow_key, shorten

__all__ = [
    "MACHINE_TAG",
    "RESUMES_FIELD",
    "RESUMES_TAG",
    "attempt_machines",
    "build_tags",
    "git_commit",
    "machine_tag",
]

RESUMES_TAG = "digideep.resumes"
"""How many times a run continued from a checkpoint (a train run's session, an SB3 cell); 0 never."""
RESUMES_FIELD = "resumes"
"""The ``session.json`` field that counts a session's resumes (its run carries it as :data:`RESUMES_TAG`)."""
MACHINE_TAG = "digideep.machine"
"""The prefix of the tags that name the machine of each attempt of a run (:func:`machine_tag`)."""


def machine_tag(attempt: int) -> str:
    """The tag that holds :func:`~digideep.utility.machine.describe` of the machine a run's attempt ran
    on: ``digideep.machine.0`` for its first, ``digideep.machine.<n>`` for the one after its n-th resume
    (set when the run opens; a later attempt after as many resumes writes it again)."""
    return f"{MACHINE_TAG}.{int(attempt)}"


def attempt_machines(tags: Mapping[str, str]) -> list[tuple[int, str]]:
    """``(attempt, machine)`` of each :func:`machine_tag` among a run's ``tags``, by attempt (none for a
    run tracked before machines were recorded)."""
    found = []
    for key, value in tags.items():
        prefix, _, attempt = key.rpartition(".")
        if prefix == MACHINE_TAG and attempt.isdigit():
            found.append((int(attempt), value))
    return sorted(found)


def build_tags(
    params_module: str | None = None,
    session_path: Path | None = None,
    flow_run_id: str | None = None,
    deployment: str | None = None,
    extra: Mapping[str, Any] | None = None,
    commit: str | None = None,
) -> dict[str, str]:
    """Run tags; those whose value is None are left out, values are cut to MLflow's 8000 characters.

    Keys: ``digideep.version``, ``digideep.params_module``, ``digideep.session_path`` (absolute),
    ``digideep.prefect.flow_run_id``, ``digideep.prefect.deployment``, ``digideep.git_commit`` and
    MLflow's own ``mlflow.source.git.commit`` and ``mlflow.user``, then ``extra``.

    Args:
        commit: the code's commit; :func:`git_commit` when None.
    """
    commit = commit or git_commit()
    tags = {
        "digideep.version": __version__,
        "digideep.params_module": params_module,
        "digideep.session_path": str(session_path.resolve()) if session_path else None,
        "digideep.prefect.flow_run_id": flow_run_id,
        "digideep.prefect.deployment": deployment,
        "digideep.git_commit": commit,
        "mlflow.source.git.commit": commit,
        "mlflow.user": _user(),
        **(extra or {}),
    }
    return {mlflow_key(k): shorten(str(v), MAX_TAG_VALUE_LENGTH) for k, v in tags.items() if v is not None}


def git_commit() -> str | None:
    """``git rev-parse HEAD`` of the checkout digideep runs from; None outside git or before a commit."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and commit else None


def _user() -> str | None:
    try:
        return getpass.getuser()
    except Exception:  # no user name in this environment
        return None
