"""The stack's secrets: from the environment, else from a git-ignored ``.env`` created with random values.

``.env`` (mode 0600, ``KEY=value`` lines, also readable by docker compose) is the stack's own: the
stack reads it to start its servers, and no client needs it. It holds:

- ``DIGIDEEP_STACK_PG_PASSWORD``: the PostgreSQL password (servers only; never given to workers);
- ``MLFLOW_FLASK_SERVER_SECRET_KEY``: the MLflow server's CSRF signing key (server only);
- ``PREFECT_API_AUTH_STRING``: ``user:password`` of Prefect's basic auth; the server gets the same
  value as ``PREFECT_SERVER_API_AUTH_STRING``;
- ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD``: the MLflow server's admin account
  (created from them the first time the auth database is empty);
- ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``: the object store's keys.

A variable already set in the environment wins over the file, so a lab can keep its secrets in a
vault and leave no file at all. Missing entries are added to the file with fresh random values;
existing ones are never changed (the servers' databases remember the first passwords).

Clients get :func:`write_client_file`'s file instead (``data/stack/client.env``, mode 0600): the
running stack's addresses and the :data:`CLIENT_SECRETS`, never one of :data:`SERVER_ONLY`.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from digideep.storage.files import atomic_write_text

SERVER_ONLY = ("DIGIDEEP_STACK_PG_PASSWORD", "MLFLOW_FLASK_SERVER_SECRET_KEY")
CLIENT_SECRETS = (
    "PREFECT_API_AUTH_STRING",
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
)
SECRET_VALUES = (
    "DIGIDEEP_STACK_PG_PASSWORD",
    "MLFLOW_FLASK_SERVER_SECRET_KEY",
    "PREFECT_API_AUTH_STRING",
    "MLFLOW_TRACKING_PASSWORD",
    "AWS_SECRET_ACCESS_KEY",
)


def _fresh() -> dict[str, str]:
    return {
        "DIGIDEEP_STACK_PG_PASSWORD": secrets.token_urlsafe(24),
        "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_urlsafe(32),
        "PREFECT_API_AUTH_STRING": f"digideep:{secrets.token_urlsafe(24)}",
        "MLFLOW_TRACKING_USERNAME": "admin",
        "MLFLOW_TRACKING_PASSWORD": secrets.token_urlsafe(24),
        "AWS_ACCESS_KEY_ID": "AKIA" + secrets.token_hex(8).upper(),
        "AWS_SECRET_ACCESS_KEY": secrets.token_urlsafe(30),
    }


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=value`` lines of ``path`` (comments, blank lines and ``export`` prefixes allowed)."""
    values: dict[str, str] = {}
    if not path.exists():
        return values
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.removeprefix("export ").split("=", 1)
        values[key.strip()] = value.strip().strip("'\"")
    return values


def write_client_file(path: Path, settings: Mapping[str, str]) -> None:
    """Write a client's settings to ``path`` as ``KEY=value`` lines, atomically and owner-only.

    Args:
        path: the client file, e.g. ``data/stack/client.env``.
        settings: the variables a client sets (addresses and client secrets).

    Raises:
        ValueError: when ``settings`` holds a server-only secret.
    """
    leaked = sorted(set(settings) & set(SERVER_ONLY))
    if leaked:
        raise ValueError(f"a client file never holds the server-only secrets {', '.join(leaked)}")
    text = (
        "# The running stack for its clients: addresses and client secrets, no server secret (made by\n"
        f"# make stack-up; keep it private). Load it: set -a; . {path}; set +a\n"
        + "".join(f"{key}={value}\n" for key, value in settings.items())
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text, mode=0o600)


def load_secrets(path: Path, create: bool = True) -> dict[str, str]:
    """The stack's secrets: each from the environment if set there, else from ``path``.

    With ``create``, entries found in neither are generated and appended to ``path`` (created with
    mode 0600 if missing).
    """
    stored = read_env_file(path)
    missing = {key: value for key, value in _fresh().items() if key not in stored and key not in os.environ}
    if missing and create:
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.exists()
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(descriptor, "a") as handle:
            if new:
                handle.write(
                    "# digideep stack secrets (git-ignored; made by `make stack-up`). Keep private.\n"
                )
            handle.writelines(f"{key}={value}\n" for key, value in missing.items())
        stored.update(missing)
    return {key: os.environ.get(key, stored.get(key, "")) for key in (*SERVER_ONLY, *CLIENT_SECRETS)}
