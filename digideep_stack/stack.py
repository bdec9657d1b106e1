"""The production stack on one machine: ``make stack-up`` (``python -m digideep_stack up``).

In start order, each announced by one line with its URL once it answers:

1. PostgreSQL: a private cluster under ``data/stack/pg`` (:mod:`digideep_stack.postgres`), or a
   server the lab runs (``--postgres-url``), holding the databases ``prefect``, ``mlflow`` and
   ``mlflow_auth``;
2. the object store: ``moto_server`` with its keys checked (:mod:`digideep_stack.object_store`), or
   a real bucket (``--s3-endpoint``), holding MLflow's artifacts and the sessions;
3. the Prefect server on PostgreSQL with basic auth;
4. the MLflow tracking server (``--app-name basic-auth``) with its runs on PostgreSQL and its
   artifacts proxied to ``s3://<bucket>/mlartifacts`` (clients need the MLflow password, not the
   S3 keys, to log artifacts);
5. the process work pool, the deployments of ``prefect.yaml``, N workers and the crash watcher
   (:mod:`digideep_stack.watcher`).

Secrets come from the environment or ``.env`` (:mod:`digideep_stack.secrets`) and travel only in
the environment of the processes that need them (the PostgreSQL password reaches the servers, never
a worker); no command line or log line carries one, and no file but ``.env``, the client file and the
user's Prefect profile (below). The client file, ``data/stack/client.env`` (mode 0600, written once the
stack is up), is what a client loads: the servers' addresses and the client secrets
(:meth:`Stack.client_env`), never the PostgreSQL password or MLflow's CSRF key. Servers bind 127.0.0.1 unless ``--host`` says otherwise. A port already taken, or a
service that fails to start, is named in one line; Ctrl-C, SIGTERM or ``make stack-down`` stops
every process the stack started.

Once up, ``make stack-up`` makes the Prefect profile ``digideep-stack`` (the server's URL and the
auth string Prefect clients send) the user's active one, in their ``PREFECT_HOME`` (an owner-only
file), so that ``prefect deployment run`` in any shell reaches the stack with nothing loaded; when it
stops, the profile active before is active again (:meth:`Stack.prefect_profile`,
:mod:`digideep_stack.profile`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from digideep.utility.processes import check_port_free, stop_tree, wait_for_http
from digideep_stack import postgres, profile
from digideep_stack.local_stack import POOL, ROOT, executable, run_prefect
from digideep_stack.secrets import load_secrets, write_client_file

SERVER_BATCHING = {
    # Prefect 3.8's server records task-run states and events one at a time by default; batches of
    # 100-200 cut its CPU per task run from 40-50 ms to 10-16 ms on PostgreSQL
    # (bench/bench_orchestration.py --server postgres --tuned batching; docs/tracking-prefect.md).
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_READ_BATCH_SIZE": "100",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "100",
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_READ_BATCH_SIZE": "100",
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_BATCH_SIZE": "200",
}


class ServiceError(RuntimeError):
    """A service of the stack failed to start (the message names it and its log)."""


@dataclass
class StackConfig:
    """Where and how the stack runs; every field has a ``python -m digideep_stack up`` option."""

    data: Path = ROOT / "data" / "stack"  # logs, the private PostgreSQL cluster, PREFECT_HOME
    env_file: Path = ROOT / ".env"  # the secrets (created with random values when missing)
    project: Path = ROOT  # the folder holding prefect.yaml, flows/ and params/
    host: str = "127.0.0.1"  # the address every server binds
    postgres_port: int = 5433
    prefect_port: int = 4200
    mlflow_port: int = 5000
    s3_port: int = 9000
    postgres_url: str | None = None  # an existing server: postgresql://user@host:port/postgres
    s3_endpoint: str | None = None  # a real S3-compatible endpoint (None: a local moto server)
    bucket: str = "digideep"
    workers: int = 1
    mlflow_workers: int = 1  # uvicorn processes of the MLflow server (few cores here)
    heartbeat_seconds: int = 30  # flow-run heartbeat period (Prefect's minimum is 30 s)
    crash_after: float = 120.0  # a RUNNING flow run silent this long is marked Crashed
    crash_retries: int = 0  # crashed runs the watcher puts back in the queue, per run
    deploy: bool = True  # create the pool and deploy prefect.yaml
    extra_env: dict[str, str] = field(default_factory=dict)  # for workers and their flow runs
    server_settings: dict[str, str] = field(default_factory=lambda: dict(SERVER_BATCHING))  # Prefect server's


class Stack:
    """The processes of one stack; :meth:`up` starts them, :meth:`stop` stops them in reverse order."""

    profile_name = profile.STACK  # the Prefect profile :meth:`prefect_profile` makes active

    def __init__(self, config: StackConfig, announce=print):
        self.config = config
        self.announce = announce
        self.secrets = load_secrets(config.env_file)
        self.processes: list[tuple[str, subprocess.Popen]] = []
        config.data.mkdir(parents=True, exist_ok=True)
        self.logs = config.data / "logs"
        self.logs.mkdir(exist_ok=True)
        host = "127.0.0.1" if config.host in ("0.0.0.0", "::") else config.host
        self.postgres_base = (
            config.postgres_url or f"postgresql://{postgres.USER}@{host}:{config.postgres_port}/postgres"
        )
        self.s3_endpoint = config.s3_endpoint or f"http://{host}:{config.s3_port}"
        self.prefect_api = f"http://{host}:{config.prefect_port}/api"
        self.mlflow_uri = f"http://{host}:{config.mlflow_port}"
        self.client_file = config.data / "client.env"  # what a client loads (written by :meth:`up`)

    # -- environments -------------------------------------------------------------------------
    def base_env(self) -> dict[str, str]:
        """The environment every child starts from: this one without any of the stack's secrets."""
        drop = {*self.secrets, "PGPASSWORD", "PREFECT_SERVER_API_AUTH_STRING", "MLFLOW_AUTH_ADMIN_PASSWORD"}
        return {key: value for key, value in os.environ.items() if key not in drop} | {
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PYTHONUNBUFFERED": "1",
        }

    def s3_env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": self.secrets["AWS_ACCESS_KEY_ID"],
            "AWS_SECRET_ACCESS_KEY": self.secrets["AWS_SECRET_ACCESS_KEY"],
            "AWS_ENDPOINT_URL": self.s3_endpoint,
            "MLFLOW_S3_ENDPOINT_URL": self.s3_endpoint,
            "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        }

    def client_env(self) -> dict[str, str]:
        """What a worker, a flow run or a user's shell needs to use the stack (secrets included)."""
        return {
            "PREFECT_API_URL": self.prefect_api,
            "PREFECT_API_AUTH_STRING": self.secrets["PREFECT_API_AUTH_STRING"],
            "MLFLOW_TRACKING_URI": self.mlflow_uri,
            "MLFLOW_TRACKING_USERNAME": self.secrets["MLFLOW_TRACKING_USERNAME"],
            "MLFLOW_TRACKING_PASSWORD": self.secrets["MLFLOW_TRACKING_PASSWORD"],
            "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(self.config.heartbeat_seconds),
            "PREFECT_LOGGING_EXTRA_LOGGERS": "digideep",
            **self.s3_env(),
        }

    # -- processes ----------------------------------------------------------------------------
    def _spawn(self, name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
        process = subprocess.Popen(
            command, cwd=self.config.project, env=env, stdout=log, stderr=log, start_new_session=True
        )
        self.processes.append((name, process))
        return process

    def _wait_http(self, name: str, url: str, process: subprocess.Popen, timeout: float = 180) -> None:
        wait_for_http(url, process, name, timeout, log=self.logs / f"{name}.log", error=ServiceError)

    def _check_ports(self) -> None:
        config = self.config
        wanted = [(config.prefect_port, "the Prefect server"), (config.mlflow_port, "the MLflow server")]
        if config.postgres_url is None:
            wanted.append((config.postgres_port, "PostgreSQL"))
        if config.s3_endpoint is None:
            wanted.append((config.s3_port, "the S3 object store"))
        probe = "127.0.0.1" if config.host in ("0.0.0.0", "::") else config.host
        for port, what in wanted:
            check_port_free(port, what, host=probe)

    def start_postgres(self) -> None:
        password = self.secrets["DIGIDEEP_STACK_PG_PASSWORD"]
        if self.config.postgres_url is None:
            folder = self.config.data / "pg"
            postgres.init_cluster(folder, password)
            process = self._spawn(
                "postgres",
                postgres.server_command(folder, self.config.host, self.config.postgres_port),
                self.base_env(),
            )
            try:
                postgres.wait_ready(self.config.host, self.config.postgres_port, process)
            except RuntimeError as error:
                raise ServiceError(f"PostgreSQL: {error}; see {self.logs / 'postgres.log'}") from None
            where = f" ({folder})"
        else:
            where = " (existing server)"
        try:
            postgres.ensure_databases(self.postgres_base, password)
        except Exception as error:
            raise ServiceError(
                f"PostgreSQL at {self.postgres_base}: {str(error).strip().splitlines()[-1]}"
            ) from None
        self.announce(f"PostgreSQL  {self.postgres_base.rsplit('/', 1)[0]}{where}")

    def start_object_store(self) -> None:
        if self.config.s3_endpoint is None:
            command = [
                sys.executable,
                "-m",
                "digideep_stack.object_store",
                "--host",
                self.config.host,
                "--port",
                str(self.config.s3_port),
            ]
            process = self._spawn("s3", command, self.base_env() | self.s3_env())
            self._wait_http("s3", f"{self.s3_endpoint}/moto-api/", process, timeout=60)
        import boto3

        s3 = boto3.client(
            "s3",
            endpoint_url=self.s3_endpoint,
            region_name=self.s3_env()["AWS_DEFAULT_REGION"],
            aws_access_key_id=self.secrets["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.secrets["AWS_SECRET_ACCESS_KEY"],
        )
        try:
            existing = {bucket["Name"] for bucket in s3.list_buckets().get("Buckets", [])}
            if self.config.bucket not in existing:
                s3.create_bucket(Bucket=self.config.bucket)
        except Exception as error:
            raise ServiceError(f"the S3 object store at {self.s3_endpoint}: {error}") from None
        self.announce(f"S3          {self.s3_endpoint}  bucket s3://{self.config.bucket}")

    def start_prefect(self) -> None:
        env = self.base_env() | {
            "PREFECT_HOME": str(self.config.data / "prefect"),
            "PREFECT_API_DATABASE_CONNECTION_URL": postgres.database_url(
                self.postgres_base, "prefect", "postgresql+asyncpg"
            ),
            "PGPASSWORD": self.secrets["DIGIDEEP_STACK_PG_PASSWORD"],
            "PREFECT_SERVER_API_AUTH_STRING": self.secrets["PREFECT_API_AUTH_STRING"],
            "PREFECT_SERVER_API_HOST": self.config.host,
            "PREFECT_SERVER_API_PORT": str(self.config.prefect_port),
            **self.config.server_settings,
        }
        command = [
            executable("prefect"),
            "server",
            "start",
            "--host",
            self.config.host,
            "--port",
            str(self.config.prefect_port),
        ]
        process = self._spawn("prefect-server", command, env)
        self._wait_http("prefect-server", f"{self.prefect_api}/health", process)
        self.announce(
            f"Prefect     {self.prefect_api.removesuffix('/api')}  (API {self.prefect_api}, basic auth)"
        )

    def start_mlflow(self) -> None:
        auth_config = self.config.data / "mlflow_auth.ini"
        auth_config.write_text(
            "[mlflow]\ndefault_permission = READ\n"
            f"database_uri = {postgres.database_url(self.postgres_base, 'mlflow_auth', 'postgresql+psycopg2')}\n"
            f"admin_username = {self.secrets['MLFLOW_TRACKING_USERNAME']}\n"
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
        )
        env = (
            self.base_env()
            | self.s3_env()
            | {
                "PGPASSWORD": self.secrets["DIGIDEEP_STACK_PG_PASSWORD"],
                "MLFLOW_AUTH_CONFIG_PATH": str(auth_config),
                "MLFLOW_AUTH_ADMIN_PASSWORD": self.secrets["MLFLOW_TRACKING_PASSWORD"],
                "MLFLOW_FLASK_SERVER_SECRET_KEY": self.secrets["MLFLOW_FLASK_SERVER_SECRET_KEY"],
                "MLFLOW_BACKEND_STORE_URI": postgres.database_url(
                    self.postgres_base, "mlflow", "postgresql+psycopg2"
                ),
                # MLflow 3's job runner (GenAI evaluation and trace jobs, none of which digideep
                # submits) is 8 more processes importing mlflow: off, it halves the stack's start
                # on 2 cores (about 60 s -> 30 s) and its stop (14 s -> 4 s); setting it turns it on
                "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": os.environ.get(
                    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false"
                ),
            }
        )
        command = [
            executable("mlflow"),
            "server",
            "--app-name",
            "basic-auth",
            "--host",
            self.config.host,
            "--port",
            str(self.config.mlflow_port),
            "--workers",
            str(self.config.mlflow_workers),
            "--artifacts-destination",
            f"s3://{self.config.bucket}/mlartifacts",
        ]
        process = self._spawn("mlflow-server", command, env)
        self._wait_http("mlflow-server", f"{self.mlflow_uri}/health", process)
        self.announce(
            f"MLflow      {self.mlflow_uri}  (basic auth; artifacts s3://{self.config.bucket}/mlartifacts)"
        )

    def prefect_cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """Run ``prefect`` against the stack's server as a client; raise with its output on failure."""
        env = self.base_env() | self.client_env() | {"PWD": str(self.config.project)}
        return run_prefect(args, self.config.project, env, timeout, ServiceError)

    def start_workers(self) -> None:
        if self.config.deploy:
            try:
                self.prefect_cli("work-pool", "inspect", POOL)
            except ServiceError:
                self.prefect_cli("work-pool", "create", POOL, "--type", "process")
            self.prefect_cli("deploy", "--all")
            self.announce(f"Deployments of {self.config.project / 'prefect.yaml'} on pool '{POOL}'")
        env = self.base_env() | self.client_env() | self.config.extra_env
        for index in range(self.config.workers):
            name = f"worker-{index + 1}"
            command = [
                executable("prefect"),
                "worker",
                "start",
                "--pool",
                POOL,
                "--type",
                "process",
                "--name",
                f"{_hostname()}-{name}",
            ]
            self._spawn(name, command, env)
        command = [
            sys.executable,
            "-m",
            "digideep_stack.watcher",
            "--crash-after",
            str(self.config.crash_after),
            "--retries",
            str(self.config.crash_retries),
        ]
        self._spawn("watcher", command, self.base_env() | self.client_env())
        self.announce(
            f"Workers     {self.config.workers} on pool '{POOL}'; crash watcher: silent runs Crashed after "
            f"{self.config.crash_after:.0f} s"
        )

    def up(self) -> None:
        """Start everything, announcing each service; on failure stop what started and raise."""
        self._check_ports()
        try:
            self.start_postgres()
            self.start_object_store()
            self.start_prefect()
            self.start_mlflow()
            self.start_workers()
        except BaseException:
            self.stop()
            raise
        write_client_file(self.client_file, self.client_env())

    def prefect_profile(
        self, announce: Callable[[str], None]
    ) -> AbstractContextManager[profile.ProfileSwitch]:
        """:attr:`profile_name`, this server with its auth string, as the active profile while in the block.

        The profile goes to the ``PREFECT_HOME`` of the user who started the stack, not the server's.
        """
        settings = {
            "PREFECT_API_URL": self.prefect_api,
            "PREFECT_API_AUTH_STRING": self.secrets["PREFECT_API_AUTH_STRING"],
        }
        return profile.active(self.profile_name, settings, os.environ, announce, "this stack")

    def dead(self) -> str | None:
        """The name of a service that exited, if any."""
        return next((name for name, process in self.processes if process.poll() is not None), None)

    def stop(self) -> None:
        """Stop the processes in reverse start order, each with everything it started."""
        for _, process in reversed(self.processes):
            stop_tree(process)
        self.processes.clear()


def _hostname() -> str:
    return os.uname().nodename
