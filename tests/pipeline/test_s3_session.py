"""Sessions on object storage: a real S3 server (moto on 127.0.0.1), real training, real checkpoints.

The session lives under ``s3://<bucket>/sessions/<name>/``: its files, its committed checkpoints and
its metrics journal are read back from the bucket with boto3, as another machine would see them.
Checkpoints torn at each point of a save are ignored or refused; bad buckets, credentials and
endpoints fail at start in one line that names the URL.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from digideep.errors import UsageError
from digideep.pipeline.run_logging import RunLog
from digideep.storage import checkpoint as ckpt
from digideep.storage.location import Location
from digideep.storage.session import Session
from tests.agents.runner_setup import close, iterate, small_params
from tests.conftest import REPO
from tests.helpers import usage_error_line
from tests.pipeline.test_checkpoint import info, states
from tests.s3 import moto_server


@pytest.fixture
def s3(s3_env: dict[str, str]):
    """A boto3 client on the test server."""
    return boto3.client("s3")


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cwd is a scratch folder (URL sessions keep their working folder under ``data/cache``)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def keys(s3, bucket: str, prefix: str = "") -> set[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {item["Key"] for page in pages for item in page.get("Contents", [])}


def sac_params() -> dict:
    sac = {"batch_size": 16, "updates_per_iteration": 2, "learning_starts": 20, "hidden_sizes": [16]}
    return small_params("digideep.agents.sac.SAC", sac, "Pendulum-v1", 1, 20, warm_start=1, capacity=200)


def test_a_session_on_s3_keeps_every_file_in_the_bucket(s3, s3_bucket, in_tmp):
    from digideep.pipeline.devices import DeviceChoice
    from digideep.pipeline.params import write_params
    from digideep.pipeline.runner import Runner

    root = f"s3://{s3_bucket}/sessions"
    session = Session(root=root, name="run")
    run_log = RunLog(session.log_path)  # as open_run attaches it
    assert (
        session.url == f"{root}/run"
        and session.memory_location("train").url == f"{root}/run/memory/train.zarr"
    )
    write_params(session, "params.demo", {"seed": 0}, sac_params())
    runner = Runner(session, sac_params(), devices=DeviceChoice("cpu"), modes=("train",))
    iterate(runner, 2)
    first = runner.checkpoint()
    iterate(runner, 1)
    runner.checkpoint()
    runner.session.mark_done(iterations=3)
    logging.getLogger("digideep.test").warning("hello log file")
    close(runner)
    run_log.close()

    found = keys(s3, s3_bucket, "sessions/run/")
    for name in ("params.json", "cpanel.json", "session.json", "done.json", "log.txt", "metrics.jsonl"):
        assert f"sessions/run/{name}" in found, name
    for iteration in (2, 3):
        for name in ("runner.json", "states.pt", "commit.json"):
            assert f"sessions/run/checkpoints/checkpoint-{iteration}/{name}" in found
    assert first == f"{root}/run/checkpoints/checkpoint-2"
    body = s3.get_object(Bucket=s3_bucket, Key="sessions/run/params.json")["Body"].read()
    assert json.loads(body) == sac_params()
    log = s3.get_object(Bucket=s3_bucket, Key="sessions/run/log.txt")["Body"].read().decode()
    assert "hello log file" in log
    # the journal in the bucket holds the time/checkpoint record of every committed checkpoint
    journal = s3.get_object(Bucket=s3_bucket, Key="sessions/run/metrics.jsonl")["Body"].read()
    records = [json.loads(line) for line in journal.splitlines()]
    assert [r["checkpoint"] for r in records if "checkpoint" in r] == [2, 3]
    # another machine reads the newest checkpoint from the bucket alone
    newest = ckpt.latest_checkpoint(f"{root}/run/checkpoints")
    loaded_info, loaded = ckpt.load_checkpoint(newest.path)
    assert loaded_info["iteration"] == 3 and loaded["counters"]["iteration"] == 3

    with pytest.raises(UsageError, match=rf"session '{root}/run' already exists"):
        Session(root=root, name="run")
    reopened = Session(root=root, name="run", resume=True)
    try:
        assert reopened.is_done and reopened.info()["version"]
        assert (reopened.path / "metrics.jsonl").read_bytes() == journal  # downloaded for the rewind
    finally:
        reopened.close()


def commit_record(s3, bucket: str, key: str) -> dict:
    return json.loads(s3.get_object(Bucket=bucket, Key=f"{key}/commit.json")["Body"].read())


def test_torn_checkpoints_on_s3_are_ignored_or_refused(s3, s3_bucket):
    folder = f"s3://{s3_bucket}/c"
    ckpt.save_checkpoint(folder, 1, info(1), states())

    # files without a record (a save cut short before its commit): ignored, and the next save removes them
    torn = ckpt.write_checkpoint(folder, 2, info(2), states())
    assert [c.iteration for c in ckpt.find_checkpoints(folder)] == [1]
    with pytest.raises(UsageError, match=r"checkpoint-2' was never committed"):
        ckpt.load_checkpoint(torn.location.path)
    ckpt.save_checkpoint(folder, 3, info(3), states())
    assert not keys(s3, s3_bucket, "c/checkpoint-2/")
    assert [c.iteration for c in ckpt.find_checkpoints(folder)] == [1, 3]

    # a record naming a file that is gone: not resumed from; loading it names the file
    s3.delete_object(Bucket=s3_bucket, Key="c/checkpoint-3/states.pt")
    assert [c.iteration for c in ckpt.find_checkpoints(folder)] == [1]
    with pytest.raises(UsageError, match=rf"'{folder}/checkpoint-3/states.pt' is missing"):
        ckpt.load_checkpoint(f"{folder}/checkpoint-3")
    assert ckpt.incomplete_checkpoints(folder) == [Location(f"{folder}/checkpoint-3")]

    # wrong size, then right size and wrong hash: refused in one line
    data = s3.get_object(Bucket=s3_bucket, Key="c/checkpoint-1/states.pt")["Body"].read()
    s3.put_object(Bucket=s3_bucket, Key="c/checkpoint-1/states.pt", Body=data[:-10])
    with pytest.raises(
        UsageError, match=r"states.pt' is damaged or truncated \(\d+ bytes, the commit record"
    ):
        ckpt.load_checkpoint(f"{folder}/checkpoint-1")
    flipped = data[:-1] + bytes([data[-1] ^ 1])
    s3.put_object(Bucket=s3_bucket, Key="c/checkpoint-1/states.pt", Body=flipped)
    with pytest.raises(UsageError, match=r"states.pt' is damaged or truncated \(its sha256 differs"):
        ckpt.load_checkpoint(f"{folder}/checkpoint-1")
    record = commit_record(s3, s3_bucket, "c/checkpoint-1")
    assert record["files"]["states.pt"]["sha256"] == hashlib.sha256(data).hexdigest()


def test_a_checkpoint_without_a_record_is_a_save_cut_short(tmp_path):
    saved = ckpt.save_checkpoint(tmp_path, 4, info(4), states())
    (saved.path / "commit.json").unlink()  # the files, never committed
    assert ckpt.find_checkpoints(tmp_path) == []
    with pytest.raises(UsageError, match=r"was never committed \(no commit.json"):
        ckpt.load_checkpoint(saved.path)
    ckpt.save_checkpoint(tmp_path, 5, info(5), states())  # removes it as a leftover
    assert [c.iteration for c in ckpt.find_checkpoints(tmp_path)] == [5]
    assert not saved.path.exists()


def test_retention_on_s3_deletes_oldest_first_keeps_the_best_and_never_leaves_zero(s3, s3_bucket):
    folder = f"s3://{s3_bucket}/r"
    for iteration in range(1, 7):
        ckpt.save_checkpoint(folder, iteration, info(iteration), states())
    deleted = ckpt.apply_retention(folder, keep=2, best=2)
    assert deleted == [f"{folder}/checkpoint-{i}" for i in (1, 3, 4)]
    assert [c.iteration for c in ckpt.find_checkpoints(folder)] == [2, 5, 6]
    assert {k.split("/")[1] for k in keys(s3, s3_bucket, "r/")} == {
        "checkpoint-2",
        "checkpoint-5",
        "checkpoint-6",
    }
    ckpt.apply_retention(folder, keep=1)
    assert [c.iteration for c in ckpt.find_checkpoints(folder)] == [6]


# -- bad input ------------------------------------------------------------------------------------
def cli_train(cwd: Path, env: dict[str, str], session_path: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable, "-m", "digideep.main", "--params", "params.pendulum_sac", "--no-prefect",
        "--session-path", session_path, "--session-name", "s", "--cpanel", '{"number_epochs": 1}',
    ]  # fmt: skip
    environment = {**env, "PYTHONPATH": str(REPO)}
    return subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=60)


def assert_refused(result: subprocess.CompletedProcess, url: str, cwd: Path, *words: str) -> str:
    line = usage_error_line(result)
    assert f"'{url}'" in line and all(word in line for word in words), line
    assert list(cwd.iterdir()) == [], "nothing is written locally"
    return line


def test_a_missing_bucket_fails_at_start_in_one_line(s3_env, tmp_path):
    url = "s3://no-such-bucket-digideep/sessions"
    result = cli_train(tmp_path, {**os.environ, **s3_env}, url)
    assert_refused(result, url, tmp_path, "bucket 'no-such-bucket-digideep' does not exist")


def test_an_unreachable_endpoint_fails_at_start_in_one_line(s3_env, tmp_path):
    with socket_closed() as port:
        env = {**os.environ, **s3_env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
        result = cli_train(tmp_path, env, "s3://bucket/sessions")
    assert_refused(result, "s3://bucket/sessions", tmp_path, "cannot be reached")


def socket_closed():
    """A port of 127.0.0.1 where nothing listens (bound, then closed)."""
    import contextlib
    import socket

    @contextlib.contextmanager
    def closed():
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        yield port

    return closed()


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory):
    """A second moto server that checks credentials (``INITIAL_NO_AUTH_ACTION_COUNT=0``)."""
    previous = os.environ.get("INITIAL_NO_AUTH_ACTION_COUNT")
    os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
    try:
        servers = moto_server(tmp_path_factory.mktemp("moto-auth") / "moto.log")
        server = next(servers)
    finally:
        if previous is None:
            os.environ.pop("INITIAL_NO_AUTH_ACTION_COUNT")
        else:
            os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = previous
    yield server
    next(servers, None)


def test_wrong_credentials_fail_at_start_in_one_line_without_the_secret(auth_server, tmp_path):
    secret = "not-the-secret-key-1234"
    env = {**os.environ, **auth_server.env, "AWS_ACCESS_KEY_ID": "AKIAWRONG", "AWS_SECRET_ACCESS_KEY": secret}
    url = "s3://some-bucket/sessions"
    line = assert_refused(cli_train(tmp_path, env, url), url, tmp_path, "access refused")
    assert secret not in line and "AKIAWRONG" not in line


def test_without_s3fs_the_error_says_what_to_install(tmp_path, s3_env):
    code = (
        "import sys; sys.modules['s3fs'] = None; from digideep.main import main; sys.exit(main(sys.argv[1:]))"
    )
    command = [sys.executable, "-c", code, "--params", "params.pendulum_sac", "--no-prefect",
               "--session-path", "s3://bucket/sessions"]  # fmt: skip
    env = {**os.environ, **s3_env, "PYTHONPATH": str(REPO)}
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert_refused(result, "s3://bucket/sessions", tmp_path, "pip install 'digideep[s3]'")
