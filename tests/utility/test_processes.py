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


def in_a_new_session(script: str, *args: str) -> list[str]:
    """The words ``python -c script args`` prints, run in a session of its own."""
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        start_new_session=True,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.split()


def niced_session_leader(increment: int) -> tuple[bool, int, int]:
    """A child in a session of its own, niced by ``increment``, calls autogroup_follows_nice: what it
    returned, the child's niceness, its group's niceness after."""
    changed, nice, group_nice = in_a_new_session(AUTOGROUP_CHILD, str(increment))
    return changed == "True", int(nice), int(group_nice)


SESSION_SHARER = """
import subprocess, sys
def group_nice():
    return open("/proc/self/autogroup").read().split()[-1]
before = group_nice()
out = subprocess.run([sys.executable, "-c", sys.argv[1], sys.argv[2]], capture_output=True, text=True, check=True)
print(before, out.stdout.strip(), group_nice())
"""


def niced_child_in_a_shared_session(increment: int) -> tuple[int, bool, int, int]:
    """A new session leader (at this process's niceness, in a group of its own) starts a child in its
    session, niced by ``increment``, which calls autogroup_follows_nice: the leader's group niceness
    before, what the child's call returned, the child's group's niceness after, the leader's after.
    A new leader, not this process: a process that never left the system's first session (a
    container's, CI's) is in the root group, whose /proc file is empty."""
    before, changed, _, group_nice, after = in_a_new_session(SESSION_SHARER, AUTOGROUP_CHILD, str(increment))
    assert group_nice == after, "the child and its session leader are in different groups"
    return int(before), changed == "True", int(group_nice), int(after)


@no_autogroups
def test_a_niced_session_leader_gives_its_group_its_niceness() -> None:
    changed, nice, group_nice = niced_session_leader(7)
    assert changed and nice >= 7 and group_nice == nice


@no_autogroups
def test_a_process_sharing_the_session_of_its_parent_leaves_their_group_alone() -> None:
    before, changed, group_nice, after = niced_child_in_a_shared_session(7)
    assert not changed and group_nice == before == after


@no_autogroups
def test_a_session_leader_at_niceness_0_changes_nothing() -> None:
    if os.getpriority(os.PRIO_PROCESS, 0) != 0:
        pytest.skip("the tests run niced: a child of theirs cannot run at niceness 0")
    assert niced_session_leader(0) == (False, 0, 0)
