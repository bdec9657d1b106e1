"""The metric sender keeps values while the store is unreachable and sends them in order later."""

from __future__ import annotations

import socket
import uuid

import pytest
from mlflow.entities import Metric

from digideep.tracking.mlflow_logger import MlflowTracker, TrackingUnavailableError
from digideep.tracking.sender import MetricSender


class FlakyStore:
    """A store that is down for the first ``down`` calls, then records every batch it receives."""

    def __init__(self, down: int) -> None:
        self.down = down
        self.batches: list[list[int]] = []

    def log_batch(self, batch: list[Metric]) -> None:
        if self.down > 0:
            self.down -= 1
            raise ConnectionError("connection refused")
        self.batches.append([m.step for m in batch])


def _metrics(steps: range) -> list[Metric]:
    return [Metric("a", float(step), 0, step) for step in steps]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_values_wait_for_the_store_and_arrive_in_order(asynchronous: bool) -> None:
    store = FlakyStore(down=1)
    sender = MetricSender(store.log_batch, asynchronous=asynchronous, retry_after=0.0)
    sender.add(_metrics(range(0, 3)))
    assert not sender.drain(timeout=10)  # the store is down: the values stay
    assert sender.pending == 3 and sender.failures == 1
    sender.add(_metrics(range(3, 5)))
    assert sender.drain(timeout=10)
    assert store.batches == [[0, 1, 2, 3, 4]]
    assert sender.close() == 0


def test_batches_hold_at_most_1000_values_and_overflow_drops_the_oldest() -> None:
    store = FlakyStore(down=0)
    sender = MetricSender(store.log_batch, asynchronous=False, max_pending=2500)
    sender.add(_metrics(range(3000)))
    assert sender.dropped == 500
    sender.flush()
    assert [len(b) for b in store.batches] == [1000, 1000, 500] and store.batches[0][0] == 500
    assert sender.close() == 500


def test_a_server_that_never_answers_fails_the_start() -> None:
    with socket.socket() as listener:  # accepts connections (kernel backlog) but never replies
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        uri = f"http://127.0.0.1:{listener.getsockname()[1]}"
        tracker = MlflowTracker(f"exp-{uuid.uuid4().hex[:8]}", tracking_uri=uri, connect_timeout=1)
        with pytest.raises(TrackingUnavailableError, match=uri.replace(".", r"\.")):
            tracker.start({}, {})
