"""``python -m digideep_stack up|down``: start the production stack in the foreground, or stop one.

``up`` writes its process id to ``data/stack/stack.pid``, the clients' settings to
``data/stack/client.env``, makes the Prefect profile ``digideep-stack`` the active one and runs until
Ctrl-C, SIGTERM or SIGHUP; ``down`` sends SIGTERM to that process and
waits until it has made the profile active before active again and stopped everything it started.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from pathlib import Path

from digideep.errors import UsageError
from digideep.utility.processes import stop_on_signals
from digideep_stack.stack import ServiceError, Stack, StackConfig


def _parser() -> argparse.ArgumentParser:
    defaults = StackConfig()
    parser = argparse.ArgumentParser(prog="python -m digideep_stack", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["up", "down"])
    parser.add_argument(
        "--data", type=Path, default=defaults.data, help="logs, PostgreSQL cluster (data/stack)"
    )
    parser.add_argument("--env-file", type=Path, default=defaults.env_file, help="the secrets file (.env)")
    parser.add_argument("--host", default=defaults.host, help="address the servers bind (127.0.0.1)")
    parser.add_argument("--postgres-port", type=int, default=defaults.postgres_port)
    parser.add_argument("--prefect-port", type=int, default=defaults.prefect_port)
    parser.add_argument("--mlflow-port", type=int, default=defaults.mlflow_port)
    parser.add_argument("--s3-port", type=int, default=defaults.s3_port)
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("DIGIDEEP_STACK_POSTGRES_URL"),
        help="an existing PostgreSQL server, postgresql://user@host:port/postgres (password: .env)",
    )
    parser.add_argument(
        "--s3-endpoint",
        default=os.environ.get("DIGIDEEP_STACK_S3_ENDPOINT"),
        help="a real S3-compatible endpoint instead of the local moto server",
    )
    parser.add_argument("--bucket", default=defaults.bucket)
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument(
        "--crash-after",
        type=float,
        default=defaults.crash_after,
        help="seconds without a heartbeat before a RUNNING flow run is marked Crashed",
    )
    parser.add_argument("--crash-retries", type=int, default=defaults.crash_retries)
    parser.add_argument(
        "--no-deploy", dest="deploy", action="store_false", help="skip the pool and prefect.yaml"
    )
    return parser


def down(data: Path, timeout: float = 120) -> int:
    """Stop the stack whose pid file is under ``data``; 0 when none runs."""
    pid_file = data / "stack.pid"
    if not pid_file.exists():
        print(f"stack: none running (no {pid_file})")
        return 0
    pid = int(pid_file.read_text())
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.3)
    else:
        print(f"stack: error: process {pid} still runs after {timeout:.0f} s", file=sys.stderr)
        return 1
    pid_file.unlink(missing_ok=True)
    print("stack: stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    if arguments.command == "down":
        return down(arguments.data)
    config = StackConfig(**{key: value for key, value in vars(arguments).items() if key != "command"})
    announce = lambda line: print(line, flush=True)  # noqa: E731
    with stop_on_signals():
        stack = None
        try:
            stack = Stack(config, announce=announce)
            pid_file = config.data / "stack.pid"
            pid_file.write_text(str(os.getpid()))
            stack.up()
            with stack.prefect_profile(announce):
                announce(
                    f"Stack up. Clients: prefect needs nothing (the profile); digideep and mlflow: "
                    f"set -a; . {stack.client_file}; set +a"
                )
                announce("Ctrl-C (or make stack-down) stops everything.")
                while (dead := stack.dead()) is None:
                    time.sleep(1)
            print(
                f"stack: error: {dead} exited; see {stack.logs / (dead + '.log')}; stopping", file=sys.stderr
            )
            return 1
        except (UsageError, ServiceError) as error:
            print(f"stack: error: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            return 0
        finally:
            if stack is not None:
                stack.stop()
            (config.data / "stack.pid").unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
