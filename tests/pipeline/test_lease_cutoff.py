"""A host cut off from the store loses the session to the host that takes it over, and stays out.

Host A is a training subprocess on ``s3://`` that reaches the store (moto on 127.0.0.1) through a
TCP proxy of this test. After A committed its first checkpoint the proxy is cut the way a network
partition cuts it: A's requests hang unanswered, A stays alive. Once A's lease expired (plus the
clock-skew margin), host B resumes the session from another working folder, straight to the store,
takes the lease over and trains to the end. Then A's way to the store comes back. A must have
stopped saying it lost the lease, and written nothing since: every object of the bucket is as B
left it, and B's final state is bit-identical to a run never interrupted.

Without the lease's expiry watchdog and the stop on loss (:func:`digideep.storage.held_lease.exit_process`)
this failed: A noticed the loss only when a hung renewal timed out (after B could take over), and
its checkpoint, whose writes had passed ``ensure_held`` before the cut and hung, was retried when
the network came back and committed after B's takeover.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import subprocess
import threading
import time
from urllib.parse import urlsplit

import boto3
import pytest

from digideep.storage.checkpoint import latest_checkpoint, load_checkpoint
from digideep.storage.held_lease import LEASE_LOST_EXIT
from digideep.storage.lease import DEFAULT_CLOCK_SKEW
from digideep.storage.lease_store import LEASE_FILE
from digideep.storage.location import Location
from digideep.storage.session_lock import LEASE_TTL_VARIABLE
from tests.conftest import REPO
from tests.helpers import assert_same_training
from tests.pipeline.test_resume import SMALL_SAC, resume_command, run, train_command

pytestmark = pytest.mark.slow  # the shortest lease (30 s) and the clock-skew margin (10 s) are waited out


class CuttableProxy:
    """Forwards ``127.0.0.1:<port>`` to ``upstream`` until :meth:`cut`, again after :meth:`restore`.

    Cutting closes every open connection and then holds each new one without an answer, as a host
    whose network dropped its packets sees it: its requests wait for their timeouts, it stays
    alive. Restoring closes the held connections (the clients' retries then get through).
    """

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname, parts.port)
        self._lock = threading.Lock()
        self._forwarded: set[socket.socket] = set()
        self._held: set[socket.socket] = set()
        self._cut = False
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cut(self) -> None:
        """Close the open connections; hold the new ones unanswered."""
        with self._lock:
            self._cut = True
            forwarded, self._forwarded = self._forwarded, set()
        for sock in forwarded:
            _close(sock)

    def restore(self) -> None:
        """Forward again; the connections held meanwhile are closed."""
        with self._lock:
            self._cut = False
            held, self._held = self._held, set()
        for sock in held:
            _close(sock)

    def close(self) -> None:
        self.cut()
        self.restore()
        _close(self._listener)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            with self._lock:
                if self._cut:
                    self._held.add(client)
                    continue
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._forwarded |= {client, server}
            for source, target in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(source, target), daemon=True).start()


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        _close(source)
        _close(target)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def objects(s3, bucket: str) -> dict[str, tuple[str, object]]:
    """``{key: (etag, last modified)}`` of every object in the bucket."""
    found = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            found[item["Key"]] = (item["ETag"], item["LastModified"])
    return found


def wait_for_commit(s3, bucket: str, prefix: str, process: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "host A ended before its first checkpoint"
        listing = s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
        if any(item["Key"].endswith("/commit.json") for item in listing.get("Contents", [])):
            return
        time.sleep(0.05)
    raise AssertionError("host A committed no checkpoint in time")


def test_a_host_cut_off_from_the_store_writes_nothing_beside_the_host_that_took_over(
    tmp_path, run_env, s3_server, s3_env, s3_bucket
):
    cpanel = SMALL_SAC
    run(train_command(tmp_path / "local", "straight", "params.pendulum_sac", cpanel), run_env)

    s3 = boto3.client("s3", endpoint_url=s3_server.endpoint)
    url = f"s3://{s3_bucket}/sessions"
    base = {**run_env, **s3_env, "PYTHONPATH": str(REPO), LEASE_TTL_VARIABLE: "30"}  # the shortest allowed
    proxy = CuttableProxy(s3_server.endpoint)
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    a_log = first / "stderr.txt"
    with a_log.open("w") as a_stderr:
        host_a = subprocess.Popen(
            train_command(url, "cut", "params.pendulum_sac", cpanel),
            cwd=first,
            env={**base, "PREFECT_HOME": str(first / "prefect"), "AWS_ENDPOINT_URL": proxy.endpoint},
            stdout=subprocess.DEVNULL,
            stderr=a_stderr,
        )
        try:
            wait_for_commit(s3, s3_bucket, "sessions/cut/checkpoints/", host_a)
            proxy.cut()
            # A can no longer renew: its last record is final; it may be taken over after expiry + skew
            record = json.loads(
                s3.get_object(Bucket=s3_bucket, Key=f"sessions/cut/{LEASE_FILE}")["Body"].read()
            )
            time.sleep(max(0.0, float(record["expires"]) + DEFAULT_CLOCK_SKEW + 0.5 - time.time()))
            at_takeover = objects(s3, s3_bucket)

            resumed = subprocess.run(
                resume_command(url, "cut"),
                cwd=second,
                env={**base, "PREFECT_HOME": str(second / "prefect")},
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert resumed.returncode == 0, resumed.stderr[-3000:]
            # A stopped itself when its lease ran out, so B finds it dead on this machine (or expired)
            took_over = re.search(r"took over the (expired )?session lease", resumed.stderr)
            assert took_over, resumed.stderr[-3000:]
            after_b = objects(s3, s3_bucket)

            proxy.restore()  # A reaches the store again
            host_a.wait(timeout=300)
        finally:
            if host_a.poll() is None:
                host_a.kill()
                host_a.wait()
            proxy.close()
    a_output = a_log.read_text()

    # A stopped with an error saying why, and wrote nothing after B took over
    assert host_a.returncode == LEASE_LOST_EXIT, a_output[-3000:]
    assert "lost the session lease" in a_output, a_output[-3000:]
    now = objects(s3, s3_bucket)
    written = sorted(key for key in now.keys() | after_b.keys() if now.get(key) != after_b.get(key))
    assert not written, f"host A wrote to the session after it was taken over: {written}"
    changed = {key for key, value in after_b.items() if at_takeover.get(key) != value}
    assert changed, "B wrote nothing"

    # B's session ends exactly where a run never interrupted ends: nothing of A's got in B's way
    assert Location(f"{url}/cut/done.json").exists()
    straight_info, straight = load_checkpoint(
        latest_checkpoint(tmp_path / "local" / "straight" / "checkpoints").path
    )
    cut_info, cut = load_checkpoint(latest_checkpoint(f"{url}/cut/checkpoints").path)
    assert straight_info["iteration"] == cut_info["iteration"] == 8
    assert_same_training(straight, cut)
    assert straight["memories"] == cut["memories"]
