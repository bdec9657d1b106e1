"""Which process holds a session lease, and whether it provably died: a holder on this machine.

A lease record names its holder's process by what makes a pid unique across time on one machine:
the kernel's boot id (a new one at every boot), the pid namespace (containers have their own pids),
the pid, and the process's start time (field 22 of ``/proc/<pid>/stat``, clock ticks since boot,
which tells a reused pid from the original). A starter on the same boot and namespace can prove the
holder dead (see :func:`dead_here`) and take its lease over at once; see :mod:`digideep.storage.lease`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["BOOT_ID", "dead_here", "describe_holder", "this_process"]

BOOT_ID = "/proc/sys/kernel/random/boot_id"
"""This boot's id: a pid names the same process only within one boot."""


def this_process() -> dict[str, Any] | None:
    """What proves later whether this process still runs: boot id, pid namespace, pid, start time.

    None where ``/proc`` does not tell (not Linux): such a holder is never proven dead.
    """
    pid = os.getpid()
    try:
        return {
            "boot_id": Path(BOOT_ID).read_text().strip(),
            "pid_namespace": os.readlink("/proc/self/ns/pid"),
            "pid": pid,
            "started": _start_time(pid),
        }
    except (OSError, ValueError, IndexError):
        return None


def dead_here(record: dict[str, Any]) -> bool:
    """Whether the record's holder was a process of this machine (same boot, same pid namespace)
    that no longer runs: its pid is gone, or belongs to a process started at another time."""
    held_by = record.get("process")
    here = this_process()
    if not isinstance(held_by, dict) or here is None:
        return False
    if (held_by.get("boot_id"), held_by.get("pid_namespace")) != (here["boot_id"], here["pid_namespace"]):
        return False
    try:
        pid, started = int(held_by["pid"]), int(held_by["started"])
    except (KeyError, TypeError, ValueError):
        return False
    try:
        return _start_time(pid) != started
    except FileNotFoundError:  # no such process
        return True
    except (OSError, ValueError, IndexError):  # unreadable: not proven
        return False


def describe_holder(record: dict[str, Any]) -> str:
    """The holder of a lease record in words: ``host h (flow run r, pid p)``."""
    return (
        f"host {record.get('host', '?')} (flow run {record.get('flow_run_id') or 'none'}, "
        f"pid {record.get('pid', '?')})"
    )


def _start_time(pid: int) -> int:
    """Field 22 of ``/proc/<pid>/stat``: when the process started, in clock ticks since boot.

    The fields are counted after the command name's closing parenthesis (the name may hold spaces).
    A zombie (killed, not yet reaped) still has its entry: state ``Z`` counts as not running.
    """
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        raise FileNotFoundError(pid)
    return int(fields[19])
