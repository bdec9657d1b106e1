"""wait_for_http and autogroup_follows_nice against real child processes: a server that answers, one
that dies, one that is mute; niced children in a session of their own and in this one."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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


AUTOGROUP_CHILD = """
import os, sys
from digideep.utility.processes import autogroup_follows_nice
nice = os.nice(int(sys.argv[1]))
changed = autogroup_follows_nice()
print(changed, nice, open("/proc/self/autogroup").read().split()[-1])
"""
no_autogroups = pytest.mark.skipif(
    not Path("/proc/self/autogroup").exists()
    or Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() != "1",
    reason="the kernel does not group processes by session here (sched_autogroup_enabled)",
)


def niced_child(increment: int, new_session: bool) -> tuple[bool, int, int]:
    """A child niced by ``increment`` calls autogroup_follows_nice: what it returned, the child's
    niceness, its group's niceness after."""
    result = subprocess.run(
        [sys.executable, "-c", AUTOGROUP_CHILD, str(increment)],
        start_new_session=new_session,
        capture_output=True,
        text=True,
        check=True,
    )
    changed, nice, group_nice = result.stdout.split()
    return changed == "True", int(nice), int(group_nice)


def own_group_nice() -> int:
    return int(Path("/proc/self/autogroup").read_text().split()[-1])


@no_autogroups
def test_a_niced_session_leader_gives_its_group_its_niceness() -> None:
    changed, nice, group_nice = niced_child(7, new_session=True)
    assert changed and nice >= 7 and group_nice == nice


@no_autogroups
def test_a_process_sharing_the_session_of_its_parent_leaves_their_group_alone() -> None:
    before = own_group_nice()
    changed, _, group_nice = niced_child(7, new_session=False)
    assert not changed and group_nice == before == own_group_nice()


@no_autogroups
def test_a_session_leader_at_niceness_0_changes_nothing() -> None:
    if os.getpriority(os.PRIO_PROCESS, 0) != 0:
        pytest.skip("the tests run niced: a child of theirs cannot run at niceness 0")
    assert niced_child(0, new_session=True) == (False, 0, 0)
