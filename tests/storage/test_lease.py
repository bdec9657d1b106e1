"""The session lease on a real S3 server (moto on 127.0.0.1, which enforces conditional writes).

What a user relies on: a second run on a held session is refused in one line naming the holder;
a host that died frees its session after the lease's ttl and a retry elsewhere takes it over; of
many starters exactly one wins, on a free and on an expired lease; a live holder keeps its lease by
heartbeat; a holder that was cut off and replaced notices and never writes over its successor.
"""

from __future__ import annotations

import json
import logging
import math
import multiprocessing
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import boto3
import pytest

from digideep.errors import UsageError
from digideep.storage.held_lease import Lease, LeaseLostError
from digideep.storage.lease import DEFAULT_CLOCK_SKEW, acquire_session_lease
from digideep.storage.lease_holder import this_process
from digideep.storage.lease_store import LEASE_FILE, store_for
from digideep.storage.retry import BOTOCORE_RETRIES
from tests.s3 import StoreOutage, moto_server

REPO = Path(__file__).resolve().parents[2]
STARTERS = 8
TRIALS = 10


def read_record(bucket: str, prefix: str) -> dict | None:
    client = boto3.client("s3")
    try:
        return json.loads(client.get_object(Bucket=bucket, Key=f"{prefix}/{LEASE_FILE}")["Body"].read())
    except client.exceptions.NoSuchKey:
        return None


def write_record(bucket: str, prefix: str, **fields) -> dict:
    """Write a lease record of another (possibly dead) host, unconditionally."""
    now = time.time()
    record = {"owner": uuid.uuid4().hex, "host": "elsewhere", "pid": 4242, "flow_run_id": "other-run",
              "info": {}, "ttl": 120.0, "created": now, "renewed": now, "expires": now + 120, **fields}  # fmt: skip
    boto3.client("s3").put_object(Bucket=bucket, Key=f"{prefix}/{LEASE_FILE}", Body=json.dumps(record))
    return record


def wait_until(condition, timeout: float = 60.0, step: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(step)


def test_a_held_session_is_refused_in_one_line_naming_the_holder_and_released_once(s3_bucket):
    url = f"s3://{s3_bucket}/sessions/run-1"
    lease = acquire_session_lease(url, {"flow_run_id": "run-abc", "session": "run-1"})
    record = read_record(s3_bucket, "sessions/run-1")
    assert record["owner"] == lease.owner and record["flow_run_id"] == "run-abc"
    assert record["pid"] == os.getpid() and record["info"] == {"session": "run-1"}
    assert record["expires"] == record["created"] + 120

    with pytest.raises(UsageError) as refused:
        acquire_session_lease(url, {"flow_run_id": "run-def"})
    message = str(refused.value)
    assert "\n" not in message and url in message
    assert f"host {record['host']}" in message and "flow run run-abc" in message
    free_at = math.ceil(record["expires"] + DEFAULT_CLOCK_SKEW)  # when a retry would take it over
    stated = datetime.fromtimestamp(free_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert f"a retry can take it over from {stated} (in " in message

    lease.release()
    assert read_record(s3_bucket, "sessions/run-1") is None
    lease.release()  # idempotent
    with acquire_session_lease(url, {}) as again:  # the session is free again
        assert again.took_over is None
    assert read_record(s3_bucket, "sessions/run-1") is None


HOLDER = """
import sys, time
from digideep.storage.lease import acquire_session_lease
lease = acquire_session_lease(sys.argv[1], {"flow_run_id": "dead-run"}, ttl=2.0, clock_skew=0.5)
print(lease.owner, flush=True)
time.sleep(600)
"""


def test_a_holder_killed_on_this_machine_is_taken_over_at_once_with_one_line(s3_bucket, s3_env, caplog):
    """kill -9 of the holder, then a start right away: the dead pid is proven dead, not waited out."""
    url = f"s3://{s3_bucket}/sessions/dead"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **s3_env, "PYTHONPATH": str(REPO)},
    )
    try:
        dead_owner = holder.stdout.readline().strip()
    finally:
        holder.send_signal(signal.SIGKILL)  # no release, no more heartbeats
        holder.wait()
    record = read_record(s3_bucket, "sessions/dead")
    assert record["owner"] == dead_owner and record["process"]["pid"] == holder.pid
    assert record["process"] == {**this_process(), "pid": holder.pid, "started": record["process"]["started"]}

    with caplog.at_level(logging.WARNING, logger="digideep.storage.lease"):
        lease = acquire_session_lease(url, {"flow_run_id": "retry"}, ttl=120.0)  # far from expiry
    try:
        assert time.time() < record["expires"]
        assert lease.took_over["owner"] == dead_owner
        assert read_record(s3_bucket, "sessions/dead")["owner"] == lease.owner
        lines = [r.getMessage() for r in caplog.records if "took over" in r.getMessage()]
        assert lines == [
            f"took over the session lease {url}/{LEASE_FILE} of host {record['host']} (flow run dead-run, "
            f"pid {holder.pid}): that process no longer runs on this machine"
        ]
    finally:
        lease.release()


def test_a_reused_pid_or_a_live_holder_on_this_machine_is_not_taken_for_dead(s3_bucket):
    """The pid alone proves nothing: a process started at another time under it is another process."""
    url = f"s3://{s3_bucket}/sessions/reused"
    here = this_process()
    live = write_record(s3_bucket, "sessions/reused", process=here, pid=here["pid"])
    with pytest.raises(UsageError, match=f"pid {here['pid']}"):
        acquire_session_lease(url, {})  # this very process holds it: alive
    reused = {**here, "started": here["started"] - 1}  # the pid's holder started at another time
    write_record(s3_bucket, "sessions/reused", process=reused, pid=here["pid"])
    with acquire_session_lease(url, {}) as lease:
        assert lease.took_over["process"] == reused and lease.took_over["owner"] != live["owner"]


def test_a_holder_on_another_machine_is_refused_until_the_time_the_message_states(s3_bucket):
    """Another boot (another host, a rebooted one): never proven dead; the message's time is exact."""
    url = f"s3://{s3_bucket}/sessions/elsewhere"
    other = {**this_process(), "boot_id": uuid.uuid4().hex}
    now = time.time()
    # expired 1 s ago, still inside the clock-skew margin: the old message said "(in 0 s)" here
    record = write_record(s3_bucket, "sessions/elsewhere", process=other, ttl=3.0, expires=now - 1.0)
    with pytest.raises(UsageError) as refused:
        acquire_session_lease(url, {}, clock_skew=6.0)
    message = str(refused.value)
    free_at = math.ceil(record["expires"] + 6.0)
    stated = datetime.fromtimestamp(free_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    seconds = int(message.split(" (in ", 1)[1].split(" s)", 1)[0])
    assert f"from {stated} (in {seconds} s)" in message and "\n" not in message
    assert 1 <= seconds <= math.ceil(free_at - now)
    assert "(in 0 s)" not in message
    time.sleep(max(0.0, free_at - time.time() - 2.0))  # before the time stated: still refused
    with pytest.raises(UsageError):
        acquire_session_lease(url, {}, clock_skew=6.0)
    time.sleep(max(0.0, free_at - time.time() + 0.05))  # at the time stated: taken over
    with acquire_session_lease(url, {}, clock_skew=6.0) as lease:
        assert lease.took_over["owner"] == record["owner"]


def test_a_dead_hosts_lease_expires_and_the_next_starter_takes_it_over(s3_bucket):
    """A record that proves nothing about its holder (another host): taken over after its ttl."""
    url = f"s3://{s3_bucket}/sessions/dead-host"
    record = write_record(
        s3_bucket, "sessions/dead-host", flow_run_id="dead-run", ttl=2.0, expires=time.time() + 2
    )

    def take() -> Lease | None:
        try:
            return acquire_session_lease(url, {"flow_run_id": "retry"}, ttl=2.0, clock_skew=0.5)
        except UsageError as error:
            assert time.time() <= record["expires"] + 0.5 + 1, "an expired lease was refused"
            assert "flow run dead-run" in str(error)
            return None

    taken: list[Lease] = []
    wait_until(lambda: taken.append(lease) or True if (lease := take()) else False)
    lease = taken[0]
    assert lease.took_over["owner"] == record["owner"]
    assert read_record(s3_bucket, "sessions/dead-host")["owner"] == lease.owner
    lease.release()


def _starter(urls, barrier, results, failures):
    try:
        for url in urls:
            barrier.wait(timeout=120)
            lease = None
            try:
                lease = acquire_session_lease(url, {"flow_run_id": f"run-{os.getpid()}"}, clock_skew=0.5)
                results.put((url, "held", os.getpid()))
            except UsageError as error:
                results.put((url, "refused", str(error)))
            except Exception as error:
                results.put((url, "error", repr(error)))
            barrier.wait(timeout=120)  # the others have tried while the winner still holds the lease
            if lease is not None:
                lease.release()
    except BaseException:
        failures.put(traceback.format_exc())
        os._exit(1)
    results.close()
    results.join_thread()
    os._exit(0)


def _race(urls: list[str]) -> dict[str, list[tuple]]:
    context = multiprocessing.get_context("fork")
    barrier, results, failures = context.Barrier(STARTERS), context.Queue(), context.Queue()
    starters = [
        context.Process(target=_starter, args=(urls, barrier, results, failures)) for _ in range(STARTERS)
    ]
    for starter in starters:
        starter.start()
    outcomes: dict[str, list[tuple]] = {url: [] for url in urls}
    try:
        for _ in range(STARTERS * len(urls)):
            url, *outcome = results.get(timeout=120)
            outcomes[url].append(tuple(outcome))
    finally:
        for starter in starters:
            starter.join(timeout=120)
    codes = [starter.exitcode for starter in starters]
    assert codes == [0] * STARTERS, (codes, [failures.get(timeout=5) for _ in range(failures.qsize())])
    return outcomes


@pytest.mark.parametrize("case", ["fresh", "expired"])
def test_exactly_one_of_eight_simultaneous_starters_takes_the_lease(s3_bucket, case):
    """The test server makes conditional writes atomic, as S3 does (see ``tests/s3.py``)."""
    prefixes = [f"race-{case}/s{trial}" for trial in range(TRIALS)]
    if case == "expired":
        for prefix in prefixes:
            write_record(s3_bucket, prefix, expires=time.time() - 60)
    outcomes = _race([f"s3://{s3_bucket}/{prefix}" for prefix in prefixes])
    for url, trial in outcomes.items():
        held = [pid for kind, pid in trial if kind == "held"]
        refused = [message for kind, message in trial if kind == "refused"]
        assert len(held) == 1, (url, trial)
        assert len(refused) == STARTERS - 1, (url, trial)
        assert all(f"flow run run-{held[0]}" in message for message in refused), (url, trial)
    for prefix in prefixes:
        assert read_record(s3_bucket, prefix) is None  # each winner released its own record


def test_the_heartbeat_keeps_a_lease_past_its_ttl(s3_bucket):
    url = f"s3://{s3_bucket}/sessions/alive"
    with acquire_session_lease(
        url, {"flow_run_id": "alive"}, ttl=2.0, heartbeat=0.25, clock_skew=0.5
    ) as lease:
        first = read_record(s3_bucket, "sessions/alive")
        wait_until(lambda: time.time() > first["expires"] + 0.5 + 0.5)  # the first record has expired
        assert not lease.lost.is_set(), lease.lost_reason
        renewed = read_record(s3_bucket, "sessions/alive")
        assert renewed["owner"] == lease.owner and renewed["expires"] > first["expires"]
        with pytest.raises(UsageError, match="flow run alive"):
            acquire_session_lease(url, {}, clock_skew=0.5)
        lease.ensure_held()


def test_a_holder_that_was_replaced_notices_and_never_overwrites_its_successor(s3_bucket):
    url = f"s3://{s3_bucket}/sessions/cut-off"
    lease = acquire_session_lease(url, {"flow_run_id": "first"}, ttl=3.0, heartbeat=0.2)
    reasons: list[str] = []
    called = threading.Event()
    lease.on_lost(lambda reason: (reasons.append(reason), called.set()))
    successor = write_record(s3_bucket, "sessions/cut-off", host="host-b", flow_run_id="retry")

    assert lease.lost.wait(timeout=30) and called.wait(timeout=30)
    assert "host-b" in reasons[0] and "flow run retry" in reasons[0]
    with pytest.raises(LeaseLostError):
        lease.ensure_held()
    assert lease.renew() is False
    lease.release()
    assert read_record(s3_bucket, "sessions/cut-off") == successor


def test_a_holder_cut_off_from_the_store_past_its_ttl_loses_the_lease(tmp_path, s3_env, monkeypatch):
    server = moto_server(tmp_path / "moto.log")
    endpoint = next(server).endpoint
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    bucket = f"cut-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    lease = acquire_session_lease(f"s3://{bucket}/s", {}, ttl=1.5, heartbeat=0.3)
    server.close()  # the store is unreachable from now on
    assert lease.lost.wait(timeout=60)
    assert "could not renew" in lease.lost_reason
    lease.release()


def test_bad_locations_fail_at_once_in_one_line_naming_the_url(s3_env, monkeypatch):
    url = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/sessions/x"
    with pytest.raises(UsageError, match="does not exist") as missing:
        acquire_session_lease(url, {})
    assert url in str(missing.value) and "\n" not in str(missing.value)
    assert s3_env["AWS_SECRET_ACCESS_KEY"] not in str(missing.value)

    with pytest.raises(UsageError, match="gs:// URLs are not supported"):
        acquire_session_lease("gs://bucket/sessions/x", {})
    with pytest.raises(UsageError, match="heartbeat < ttl"):
        acquire_session_lease("s3://bucket/x", {}, ttl=1.0, heartbeat=2.0)

    with closed_port() as port:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
        with pytest.raises(UsageError, match="cannot reach the object store") as unreachable:
            acquire_session_lease("s3://bucket/sessions/x", {})
    assert "s3://bucket/sessions/x" in str(unreachable.value)


@contextmanager
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 that nothing listens on (bound but never listening, while in use)."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        yield bound.getsockname()[1]


def test_a_retry_of_the_holding_flow_run_waits_out_its_lease_and_takes_over(s3_bucket):
    """Prefect retried the run whose host died: the retry waits for the dead attempt's lease, others are refused."""
    url = f"s3://{s3_bucket}/sessions/retried"
    dead = write_record(
        s3_bucket, "sessions/retried", flow_run_id="run-7", ttl=2.0, expires=time.time() + 2.0
    )
    with pytest.raises(UsageError, match="flow run run-7"):
        acquire_session_lease(url, {"flow_run_id": "run-8"}, clock_skew=0.5)
    lease = acquire_session_lease(url, {"flow_run_id": "run-7"}, clock_skew=0.5)
    try:
        assert lease.took_over["owner"] == dead["owner"]
        assert read_record(s3_bucket, "sessions/retried")["owner"] == lease.owner
    finally:
        lease.release()


def test_the_lease_store_leaves_retrying_to_storage_retry_and_never_draws_from_the_global_random(
    s3_server, s3_bucket, s3_env, monkeypatch
):
    """botocore's retries drew their jitter from Python's global ``random`` on the heartbeat's thread,
    a stream that checkpoints hold: a store that answered 503 made a resumed run differ."""
    outage = StoreOutage(s3_server)  # in front of the test's server: answers 503 when told to
    for key, value in outage.env.items():
        monkeypatch.setenv(key, value)
    url = f"s3://{s3_bucket}/sessions/jitter"
    try:
        assert store_for(url).client.meta.config.retries == BOTOCORE_RETRIES  # one attempt each
        random.seed(12345)
        before = random.getstate()
        outage.answer(503, "SlowDown", 1)  # the first request (the read of the lease) is throttled
        lease = acquire_session_lease(url, {}, ttl=30.0, heartbeat=20.0)
        outage.answer(503, "SlowDown", 1)
        assert lease.renew()
        lease.release()
        assert random.getstate() == before
        assert read_record(s3_bucket, "sessions/jitter") is None  # taken, renewed and released all the same
    finally:
        outage.close()


@pytest.mark.parametrize("flow_run_id", [None, "3f0c2a9e-flow-run"])
def test_writes_that_landed_though_their_answers_were_lost_are_recognised_as_ours(
    s3_server, s3_bucket, monkeypatch, flow_run_id
):
    """A connection reset after the store applied a conditional write: the retry gets 412. Taking,
    renewing and releasing must each see that the record is their own, not another holder's (taking
    it once refused the run as held by itself)."""
    outage = StoreOutage(s3_server)
    for key, value in outage.env.items():
        monkeypatch.setenv(key, value)
    prefix = f"sessions/lost-answers-{uuid.uuid4().hex[:6]}"
    try:
        outage.lose_answers(1, "PUT")  # the create lands; its answer does not come back
        info = {"flow_run_id": flow_run_id}  # a flow run's own earlier record would be waited out
        started = time.monotonic()
        lease = acquire_session_lease(f"s3://{s3_bucket}/{prefix}", info, ttl=30.0, heartbeat=20.0)
        assert time.monotonic() - started < 15  # taken at once, not after waiting for its own ttl
        assert outage._lose_left == 0  # the answer was lost indeed
        assert read_record(s3_bucket, prefix)["owner"] == lease.owner
        outage.lose_answers(1, "PUT")  # a renewal lands; its answer does not come back
        assert lease.renew() and not lease.lost.is_set()
        expires = read_record(s3_bucket, prefix)["expires"]
        assert lease.renew()  # and the next one still holds the right token
        assert read_record(s3_bucket, prefix)["expires"] > expires
        outage.lose_answers(1, "DELETE")
        lease.release()
        assert read_record(s3_bucket, prefix) is None
    finally:
        outage.close()
