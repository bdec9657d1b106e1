"""A real S3-compatible server for tests: ``moto_server`` on 127.0.0.1, one per test session.

moto's server speaks the S3 HTTP protocol and enforces conditional writes (``If-None-Match: *``
and a stale ``If-Match`` answer 412), so sessions, checkpoints and leases are tested against the
same requests a bucket on AWS or MinIO receives. Credentials and the endpoint reach botocore and
s3fs through the standard variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_ENDPOINT_URL``), exactly as a user configures a real bucket.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
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
import io
import sys
import threading

import moto.server
from moto.moto_server.werkzeug_app import DomainDispatcherApplication

one_at_a_time = threading.Lock()
handle = DomainDispatcherApplication.__call__


def serially(self, environ, start_response):
    stream = environ["wsgi.input"]  # the body is read before the lock: a client that stalls holds its own thread only
    if environ.get("wsgi.input_terminated"):
        body = stream.read()
    else:
        body = stream.read(int(environ.get("CONTENT_LENGTH") or 0))
    environ["wsgi.input"] = io.BytesIO(body)
    with one_at_a_time:
        return list(handle(self, environ, start_response))


DomainDispatcherApplication.__call__ = serially
sys.argv = ["moto_server", "-H", "127.0.0.1", "-p", sys.argv[1]]
moto.server.main()
"""
"""moto's server, handling one request at a time (connections stay concurrent, and each request's
body is read before its turn, so that a client that stalls mid-upload cannot hold every other one up).

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


class StoreOutage:
    """An S3 endpoint on 127.0.0.1 that goes down and comes back, in front of a running server.

    moto keeps its buckets in memory, so stopping the server itself would lose them; this endpoint
    forwards to it and fails the way a store that restarts fails for its clients: :meth:`stop`
    resets every open connection (``ECONNRESET``) and closes the port (``ECONNREFUSED``),
    :meth:`start` listens on the same port again. :meth:`answer` makes the next requests get an
    S3 error answer instead (``503 SlowDown`` throttling, ``403 AccessDenied``), as a real store
    sends them; :meth:`lose_answers` lets requests land and resets their connections before the
    answer comes back.
    """

    def __init__(self, upstream: S3Server) -> None:
        host, port = upstream.endpoint.rsplit("//", 1)[1].split(":")
        self.upstream = (host, int(port))
        self.port = free_port()
        self.answered = 0  # requests given a canned answer so far
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._canned: tuple[int, str] | None = None
        self._canned_left = 0
        self._lose_method, self._lose_left = b"", 0
        self._listener: socket.socket | None = None
        self.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """Variables that point boto3 and s3fs at this endpoint."""
        return {**S3_ENV, "AWS_ENDPOINT_URL": self.endpoint}

    def start(self) -> None:
        """Listen (again) on the endpoint's port."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        """Reset every open connection and stop listening: new connections are refused."""
        listener, self._listener = self._listener, None
        if listener is not None:  # shut down first: a close alone leaves a blocked accept() listening
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            connections, self._open = self._open, set()
        for sock in connections:
            _reset(sock)

    def down_for(self, seconds: float) -> threading.Thread:
        """:meth:`stop` now and :meth:`start` after ``seconds``, on a thread (returned, to join)."""
        self.stop()
        thread = threading.Timer(seconds, self.start)
        thread.start()
        return thread

    def answer(self, status: int, code: str, count: int) -> None:
        """Answer the next ``count`` requests with ``status`` and the S3 error ``code``."""
        with self._lock:
            self._canned, self._canned_left = (status, code), count

    def lose_answers(self, count: int, method: str = "PUT") -> None:
        """Let the next ``count`` ``method`` requests reach the server, then reset their connections
        instead of passing the answers on: the write lands, and its client cannot know it did."""
        with self._lock:
            self._lose_method, self._lose_left = method.encode(), count

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # stopped
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with self._lock:
            canned = self._canned if self._canned_left > 0 else None
            if canned is not None:
                self._canned_left -= 1
                self.answered += 1
            method = self._lose_method if self._lose_left > 0 else None
        lose = False
        if method is not None and canned is None:
            client.settimeout(5)
            with contextlib.suppress(OSError):
                lose = client.recv(16, socket.MSG_PEEK).startswith(method + b" ")
            client.settimeout(None)
            with self._lock:
                lose = lose and self._lose_left > 0
                self._lose_left -= lose
        if canned is not None:
            _answer_error(client, *canned)
            return
        try:
            server = socket.create_connection(self.upstream)
        except OSError:
            _reset(client)
            return
        with self._lock:
            self._open |= {client, server}
        pair = _Pair(client, server, self._forget)
        threading.Thread(target=pair.pump, args=(client, server), daemon=True).start()
        threading.Thread(target=pair.pump, args=(server, client, lose), daemon=True).start()

    def _forget(self, *sockets: socket.socket) -> None:
        with self._lock:
            self._open -= set(sockets)

    def close(self) -> None:
        self.stop()


class _Pair:
    """One proxied connection: a pump each way, both sockets closed once both pumps are done.

    An orderly close on one side is passed on as one (``shutdown(SHUT_WR)``), so that the other
    side still reads everything sent before it: moto closes each connection after its answer, and
    resetting the client at that moment made it lose answers it had not read yet (a 412 to a
    conditional write arrived as "Connection was closed", one run in ~15 on a loaded machine).
    A connection that fails on one side is reset on the other, as a crashed peer leaves it.
    """

    def __init__(self, client: socket.socket, server: socket.socket, forget: Callable[..., None]) -> None:
        self.sockets = (client, server)
        self._forget = forget
        self._left = 2
        self._lock = threading.Lock()

    def pump(self, source: socket.socket, target: socket.socket, drop: bool = False) -> None:
        """Copy ``source`` to ``target`` until ``source`` ends; ``drop``: discard it and reset
        ``target`` at the end (an answer lost on its way back)."""
        failed = drop
        try:
            while data := source.recv(65536):
                if not drop:
                    target.sendall(data)
        except OSError:
            failed = True
        if failed:
            _reset(source)
            _reset(target)
        else:
            with contextlib.suppress(OSError):
                target.shutdown(socket.SHUT_WR)
        with self._lock:
            self._left -= 1
            done = self._left == 0
        if done:
            self._forget(*self.sockets)
            for sock in self.sockets:
                sock.close()


def _answer_error(client: socket.socket, status: int, code: str) -> None:
    """Read one request's head and answer it with an S3 error document, then close."""
    client.settimeout(5)
    with contextlib.suppress(OSError):
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = client.recv(65536)
            if not chunk:
                break
            data += chunk
        body = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{code}</Message></Error>"
        head = (
            f"HTTP/1.1 {status} {code}\r\nContent-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        client.sendall((head + body).encode())
        client.shutdown(socket.SHUT_WR)
    client.close()


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset (``SO_LINGER`` 0), as a server process that died leaves its peers.

    ``shutdown(SHUT_RD)`` first wakes the other pump thread if it is blocked in ``recv`` on this
    socket: a ``close()`` alone leaves that call (and so the connection) open for good, with no file
    descriptor left to reach it. One such connection to moto, mid-request, once held its one-at-a-time
    lock for good and every later request timed out.
    """
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
    sock.close()
