"""Eight starters released together onto one session: exactly one may hold it.

The starters are forked processes (digideep and torch are imported once, by the test) that wait on
a barrier, try to open the session at the same instant, and then wait on a second barrier while
still holding what they got, so that two holders at once would both be counted.
"""

import json
import logging
import multiprocessing
import os
import traceback

import pytest

from digideep.errors import UsageError
from digideep.storage.session import Session

STARTERS = 8
TRIALS = 20


def _start(root, name, resume, barrier, results, failures):
    # Forked from the test process, a starter inherits the log handlers of earlier tests, some of
    # them on streams those tests closed: it logs nothing, and reports any failure of its own.
    logging.disable(logging.CRITICAL)
    try:
        barrier.wait(timeout=120)
        session = None
        try:
            session = Session(root=root, name=name, resume=resume)
            results.put(("held", os.getpid()))
        except UsageError as error:
            results.put(("refused", str(error)))
        except Exception as error:
            results.put(("error", repr(error)))
        barrier.wait(timeout=120)  # every other starter has tried while the holder holds the session
        if session is not None:
            session.close()
    except BaseException:
        failures.put(traceback.format_exc())
        results.close()
        failures.close()
        os._exit(1)
    # leave without the exit hooks inherited from the test process (Prefect's threads, when a flow
    # test ran before this one, make a normal exit of a forked child fail)
    results.close()
    results.join_thread()
    os._exit(0)


def _race(root, name, resume):
    context = multiprocessing.get_context("fork")
    barrier, results, failures = context.Barrier(STARTERS), context.Queue(), context.Queue()
    starters = [
        context.Process(target=_start, args=(root, name, resume, barrier, results, failures))
        for _ in range(STARTERS)
    ]
    for starter in starters:
        starter.start()
    outcomes = [results.get(timeout=120) for _ in starters]
    for starter in starters:
        starter.join(timeout=120)
    codes = [starter.exitcode for starter in starters]
    assert codes == [0] * STARTERS, (codes, [failures.get(timeout=5) for _ in range(failures.qsize())])
    return outcomes


def _dead_pid():
    process = multiprocessing.get_context("fork").Process(target=os._exit, args=(0,))
    process.start()
    process.join()
    return process.pid


@pytest.mark.parametrize("case", ["fresh", "stale", "new"])
def test_exactly_one_of_eight_simultaneous_starters_holds_the_session(tmp_path, case):
    dead = _dead_pid()
    for trial in range(TRIALS):
        name = f"s{trial}"
        folder = tmp_path / name
        if case != "new":
            folder.mkdir()
        if case == "stale":  # what a crashed holder leaves: the lock file and its pid, now gone
            (folder / ".lock").write_text("")
            (folder / ".lock.json").write_text(json.dumps({"pid": dead, "host": os.uname().nodename}))
        outcomes = _race(tmp_path, name, resume=case != "new")
        held = [value for kind, value in outcomes if kind == "held"]
        refused = [value for kind, value in outcomes if kind == "refused"]
        assert len(held) == 1 and len(refused) == STARTERS - 1, f"trial {trial}: {outcomes}"
        reason = "already exists" if case == "new" else "is in use by"
        for message in refused:
            assert "\n" not in message and f"session '{folder}' {reason}" in message
        with Session(root=tmp_path, name=name, resume=True):  # released at the end
            pass
