"""The background sender survives a store that is away, retries later and stops at a refusal."""

from __future__ import annotations

import socket
import uuid

import pytest
from mlflow.exceptions import MlflowException

from digideep.tracking.mlflow_logger import MlflowTracker, TrackingUnavailableError
from digideep.tracking.sender import BackgroundSender


class FlakyStore:
    """A send function that fails for the first ``down`` calls, then counts its successful calls."""

    def __init__(self, down: int, error: Exception | None = None) -> None:
        self.down = down
        self.error = error or ConnectionError("connection refused")
        self.calls = 0

    def send(self) -> None:
        if self.down > 0:
            self.down -= 1
            raise self.error
        self.calls += 1


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_failed_send_is_retried_after_the_pause(asynchronous: bool) -> None:
    store = FlakyStore(down=1)
    sender = BackgroundSender(store.send, asynchronous=asynchronous, retry_after=0.0)
    assert not sender.drain(timeout=10)  # the store is down
    assert sender.failures == 1 and store.calls == 0
    assert sender.drain(timeout=10)
    assert sender.close() and store.calls == 2


def test_no_attempt_during_the_pause_but_one_last_at_close() -> None:
    store = FlakyStore(down=1)
    sender = BackgroundSender(store.send, asynchronous=True, retry_after=3600)
    assert not sender.drain(timeout=10)
    assert not sender.drain(timeout=10) and sender.failures == 1  # paused: not even tried
    assert sender.close(timeout=10) and store.calls == 1


def test_a_refusal_stops_sending() -> None:
    store = FlakyStore(down=1, error=MlflowException.invalid_parameter_value("run is deleted"))
    sender = BackgroundSender(store.send, asynchronous=False, retry_after=0.0)
    assert not sender.drain() and sender.refused
    assert not sender.close() and store.calls == 0


def test_a_server_that_never_answers_fails_the_start() -> None:
    with socket.socket() as listener:  # accepts connections (kernel backlog) but never replies
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        uri = f"http://127.0.0.1:{listener.getsockname()[1]}"
        tracker = MlflowTracker(f"exp-{uuid.uuid4().hex[:8]}", tracking_uri=uri, connect_timeout=1)
        with pytest.raises(TrackingUnavailableError, match=uri.replace(".", r"\.")):
            tracker.start({}, {})
