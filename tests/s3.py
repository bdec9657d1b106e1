"""A real S3-compatible server for tests: ``moto_server`` on 127.0.0.1, one per test session.

moto's server speaks the S3 HTTP protocol and enforces conditional writes (``If-None-Match: *``
and a stale ``If-Match`` answer 412), so sessions, checkpoints and leases are tested against the
same requests a bucket on AWS or MinIO receives. Credentials and the endpoint reach botocore and
s3fs through the standard variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_ENDPOINT_URL``), exactly as a user configures a real bucket.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import free_port

S3_ENV = {
    "AWS_ACCESS_KEY_ID": "digideep-test",
    "AWS_SECRET_ACCESS_KEY": "digideep-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass(frozen=True)
class S3Server:
    """A running moto server: its endpoint and the environment that points clients at it."""

    endpoint: str

    @property
    def env(self) -> dict[str, str]:
        """Variables to add to a process's environment so that boto3 and s3fs use this server."""
        return {**S3_ENV, "AWS_ENDPOINT_URL": self.endpoint}

    def make_bucket(self, prefix: str = "digideep") -> str:
        """Create a bucket with a fresh name and return its name."""
        import boto3

        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        client = boto3.client("s3", endpoint_url=self.endpoint, **_boto_credentials())
        client.create_bucket(Bucket=name)
        return name


def _boto_credentials() -> dict[str, str]:
    return {
        "aws_access_key_id": S3_ENV["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": S3_ENV["AWS_SECRET_ACCESS_KEY"],
        "region_name": S3_ENV["AWS_DEFAULT_REGION"],
    }


SERIAL_MOTO = """
import sys
import threading

import moto.server
from moto.moto_server.werkzeug_app import DomainDispatcherApplication

one_at_a_time = threading.Lock()
handle = DomainDispatcherApplication.__call__


def serially(self, environ, start_response):
    with one_at_a_time:
        return list(handle(self, environ, start_response))


DomainDispatcherApplication.__call__ = serially
sys.argv = ["moto_server", "-H", "127.0.0.1", "-p", sys.argv[1]]
moto.server.main()
"""
"""moto's server, handling one request at a time (connections stay concurrent).

moto's threaded server checks a write's condition and then writes without a lock: measured here,
about 1 in 150 rounds of 8 simultaneous ``If-None-Match: *`` PUTs let two of them succeed. S3
guarantees that exactly one does, and race tests must be checked against that guarantee.
"""


def moto_server(log_path: Path, timeout: float = 30.0) -> Iterator[S3Server]:
    """Start moto's S3 server on a free port of 127.0.0.1, yield it when it answers, stop it after."""
    try:
        import moto.server  # noqa: F401
    except ImportError:
        raise RuntimeError(
            "moto[server] is not installed; install the dev extra: pip install -e '.[dev]'"
        ) from None
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "-c", SERIAL_MOTO, str(port)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start on {endpoint}; see {log_path}") from None
                time.sleep(0.1)
        yield S3Server(endpoint)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
