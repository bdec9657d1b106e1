"""PostgreSQL for the stack: a private cluster under ``data/stack/pg``, or a server the lab already runs.

The private cluster belongs to the ``postgres`` system user when digideep runs as root (PostgreSQL
refuses to run as root; ``initdb`` and ``postgres`` then run through ``runuser -u postgres --``), or
to the current user otherwise. It listens on 127.0.0.1 (or the given host) with scram-sha-256
password authentication for every connection, TCP and socket alike; the password is
``DIGIDEEP_STACK_PG_PASSWORD`` from the environment or the .env. Clients get it through
``PGPASSWORD`` (libpq, psycopg2 and asyncpg all read it), so no connection URL carries it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from digideep.errors import UsageError

USER = "digideep"
DATABASES = ("prefect", "mlflow", "mlflow_auth")


def _bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    raise UsageError(
        f"PostgreSQL's {name} is not installed; install the postgresql package or pass --postgres-url"
    )


def _as_owner(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def init_cluster(folder: Path, password: str) -> None:
    """Create the cluster in ``folder`` (once) with the superuser ``digideep`` and ``password``."""
    if (folder / "PG_VERSION").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    if subprocess.run(_as_owner(["test", "-x", str(folder.parent)])).returncode != 0:
        raise UsageError(
            f"the postgres user cannot enter {folder.parent}; choose a --data folder whose parents "
            "every user may enter (e.g. under the project, not under a private /tmp/pytest-of-root)"
        )
    pwdir = Path(tempfile.mkdtemp(prefix="digideep-pg-"))
    pwfile = pwdir / "password"
    pwfile.write_text(password)
    try:
        if os.geteuid() == 0:
            for path in (folder, pwdir, pwfile):
                shutil.chown(path, "postgres", "postgres")
        os.chmod(folder, 0o700)
        os.chmod(pwfile, 0o600)
        command = [_bin("initdb"), "-D", str(folder), "-U", USER, "--auth=scram-sha-256",
                   f"--pwfile={pwfile}", "-E", "UTF8", "--no-instructions"]  # fmt: skip
        result = subprocess.run(_as_owner(command), capture_output=True, text=True)
    finally:
        shutil.rmtree(pwdir, ignore_errors=True)
    if result.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        raise UsageError(f"initdb failed in {folder}: {result.stderr.strip().splitlines()[-1:]}")


def server_command(folder: Path, host: str, port: int) -> list[str]:
    """The foreground ``postgres`` command for the cluster (stops on SIGINT: a fast shutdown)."""
    return _as_owner(
        [
            _bin("postgres"),
            "-D",
            str(folder),
            "-c",
            f"listen_addresses={host}",
            "-c",
            f"port={port}",
            "-c",
            f"unix_socket_directories={folder}",
            "-c",
            "max_connections=200",
        ]
    )


def wait_ready(host: str, port: int, process: subprocess.Popen | None, timeout: float = 60) -> None:
    """Wait until PostgreSQL accepts connections on ``host:port``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError("PostgreSQL exited while starting")
        if subprocess.run([_bin("pg_isready"), "-h", host, "-p", str(port), "-q"]).returncode == 0:
            return
        time.sleep(0.3)
    raise RuntimeError(f"PostgreSQL did not answer on {host}:{port} within {timeout:.0f} s")


def ensure_databases(url: str, password: str | None, names: tuple[str, ...] = DATABASES) -> None:
    """Create the databases in ``names`` that ``url``'s server lacks (``url`` names the admin database)."""
    import psycopg2

    parts = urlsplit(url)
    connection = psycopg2.connect(
        host=parts.hostname,
        port=parts.port or 5432,
        user=parts.username or USER,
        password=parts.password or password,
        dbname=(parts.path.lstrip("/") or "postgres"),
    )
    connection.autocommit = True
    try:
        with connection.cursor() as cursor:
            for name in names:
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cursor.fetchone() is None:
                    cursor.execute(f'CREATE DATABASE "{name}"')
    finally:
        with contextlib.suppress(Exception):
            connection.close()


def database_url(base: str, name: str, driver: str = "postgresql") -> str:
    """``base`` (``postgresql://user@host:port/...``) pointed at database ``name`` through ``driver``."""
    parts = urlsplit(base)
    return f"{driver}://{parts.netloc}/{name}"
