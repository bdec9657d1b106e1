"""A session's reads and writes live through an object store that hiccups, on a real S3 server.

What a user relies on: a store that goes down for seconds (connections reset, then refused) or
throttles (``503 SlowDown``) costs a pause, not the run; one that stays down past the retry time
fails in one line saying how to go on; access refused or a missing bucket fails at once in one
line; and none of it touches the random streams a checkpoint holds.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator

import numpy as np
import pytest
import zarr

from digideep.errors import UsageError
from digideep.storage.location import Location
from digideep.storage.retry import RETRY_SECONDS_VARIABLE, StoreUnavailableError
from tests.s3 import S3Server, StoreOutage


@pytest.fixture
def outage(s3_server: S3Server, s3_bucket: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[StoreOutage]:
    """The test server behind an endpoint that can go down; this process's clients use it."""
    endpoint = StoreOutage(s3_server)
    for key, value in endpoint.env.items():
        monkeypatch.setenv(key, value)
    yield endpoint
    endpoint.close()


def test_a_write_and_a_read_during_an_outage_wait_for_the_store_and_succeed(outage, s3_bucket, caplog):
    url = f"s3://{s3_bucket}/sessions/s/checkpoints/checkpoint-1/states.pt"
    data = np.random.default_rng(0).bytes(300_000)
    Location(url).write_bytes(b"old")
    restart = outage.down_for(4.0)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="digideep.storage.retry"):
        Location(url).write_bytes(data)  # a fresh Location: the client's new connections are refused
    assert time.monotonic() - started >= 3.5, "the write cannot have landed while the store was down"
    restart.join()
    outage.down_for(3.0)
    assert Location(url).read_bytes() == data  # and a read
    warnings = [r.getMessage() for r in caplog.records]  # one line per request that had to wait
    assert [line.split(" (", 1)[0] for line in warnings] == [
        f"the object store failed to write {url}",
        f"the object store failed to read {url}",
    ]
    assert all(line.endswith("; retrying for up to 120 s") for line in warnings)


def test_throttling_is_retried(outage, s3_bucket):
    url = f"s3://{s3_bucket}/sessions/s/journal.jsonl"
    outage.answer(503, "SlowDown", count=12)  # past s3fs's and botocore's own retries
    Location(url).write_text("throttled\n")
    assert outage.answered == 12
    assert Location(url).read_text() == "throttled\n"


def test_an_outage_past_the_retry_time_fails_in_one_line(outage, s3_bucket, monkeypatch):
    monkeypatch.setenv(RETRY_SECONDS_VARIABLE, "3")
    url = f"s3://{s3_bucket}/sessions/s/session.json"
    location = Location(url)
    outage.stop()
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as failed:
        location.write_text("{}")
    assert time.monotonic() - started < 30
    message = str(failed.value)
    assert "\n" not in message
    assert message.startswith(f"the object store failed to write '{url}' for 3 s (")
    assert "resume it once the store answers" in message


@pytest.mark.parametrize(
    ("status", "code", "words"),
    [
        (403, "AccessDenied", "refused access (AccessDenied)"),
        (403, "InvalidAccessKeyId", "check the credentials"),
    ],
)
def test_access_refused_fails_at_once_in_one_line(outage, s3_bucket, status, code, words):
    url = f"s3://{s3_bucket}/sessions/s/session.json"
    outage.answer(status, code, count=100)
    started = time.monotonic()
    with pytest.raises(UsageError) as refused:
        Location(url).write_text("{}")
    assert time.monotonic() - started < 10, "a permanent error was retried"
    assert not isinstance(refused.value, StoreUnavailableError)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"'{url}': ") and words in message


def test_a_missing_bucket_fails_at_once_in_one_line(s3_env, s3_bucket):
    url = f"s3://{s3_bucket}-gone/sessions/s/session.json"
    started = time.monotonic()
    with pytest.raises(UsageError) as refused:
        Location(url).write_text("{}")
    assert time.monotonic() - started < 10
    assert str(refused.value) == (
        f"'{url}': bucket '{s3_bucket}-gone' does not exist; create it or fix the session path"
    )


def test_a_missing_object_is_not_an_error_of_the_store(s3_env, s3_bucket):
    with pytest.raises(FileNotFoundError):
        Location(f"s3://{s3_bucket}/nothing/here.json").read_bytes()


def test_the_memorys_zarr_store_rides_out_an_outage(outage, s3_bucket):
    """The replay memory's chunks go through zarr's fsspec store (``Location.zarr_store``), not
    ``Location``'s own reads and writes: retried all the same."""
    where = Location(f"s3://{s3_bucket}/sessions/s/memory/train.zarr")
    rows = np.arange(4096, dtype=np.float32).reshape(64, 64)
    group = where.open_group("w")
    array = group.create_array("rewards", shape=rows.shape, chunks=(16, 64), dtype="float32")
    outage.down_for(3.0)
    array[:] = rows
    outage.down_for(3.0)
    assert np.array_equal(
        zarr.open_group(store=where.zarr_store(read_only=True), mode="r")["rewards"][:], rows
    )


def test_retries_draw_from_no_global_random_stream(outage, s3_bucket):
    """The checkpointed streams (Python's and numpy's global generators) are left as they were."""
    random.seed(7)
    np.random.seed(7)
    python_state, numpy_state = random.getstate(), np.random.get_state()
    outage.answer(503, "SlowDown", count=12)
    Location(f"s3://{s3_bucket}/sessions/s/x").write_bytes(b"x")
    outage.down_for(2.0)
    Location(f"s3://{s3_bucket}/sessions/s/y").write_bytes(b"y")
    assert random.getstate() == python_state
    after = np.random.get_state()
    assert all(np.array_equal(a, b) for a, b in zip(after[1:], numpy_state[1:], strict=True))
