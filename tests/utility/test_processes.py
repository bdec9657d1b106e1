"""wait_for_http against real child processes: a server that answers, one that dies, one that is mute."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from digideep.utility.processes import stop_tree, wait_for_http
from tests.helpers import free_port


@contextmanager
def child(*code: str) -> Iterator[subprocess.Popen]:
    process = subprocess.Popen([sys.executable, *code], start_new_session=True)
    try:
        yield process
    finally:
        stop_tree(process, grace=5)


def test_it_returns_once_the_server_answers() -> None:
    port = free_port()
    with child("-m", "http.server", str(port), "--bind", "127.0.0.1") as server:
        wait_for_http(f"http://127.0.0.1:{port}/", server, "the file server", timeout=60)


def test_a_server_that_exits_is_reported_at_once_with_its_log(tmp_path) -> None:
    with child("-c", "raise SystemExit(3)") as dead, pytest.raises(ValueError) as raised:
        dead.wait()
        wait_for_http(
            "http://127.0.0.1:9/", dead, "the server", log=tmp_path / "server.log", error=ValueError
        )
    assert str(raised.value) == f"the server exited while starting; see {tmp_path / 'server.log'}"


def test_a_server_that_never_answers_times_out() -> None:
    port = free_port()
    with (
        child("-c", "import time; time.sleep(60)") as mute,
        pytest.raises(RuntimeError, match="did not answer"),
    ):
        wait_for_http(f"http://127.0.0.1:{port}/", mute, "the mute server", timeout=1.5)
