import threading

import numpy as np
import pytest

from digideep.utility.monitoring import Monitor


def test_summary_gives_count_mean_std_min_max():
    monitor = Monitor()
    for value in (1.0, 2.0, 3.0, 4.0):
        monitor("/x", value)
    monitor("/arr", np.array([[1.0, 3.0], [5.0, 7.0]], dtype=np.float32))
    summary = monitor.summary()
    assert summary["/x"] == pytest.approx(
        {"count": 4, "mean": 2.5, "std": np.std([1, 2, 3, 4]), "min": 1.0, "max": 4.0}
    )
    assert summary["/arr"]["count"] == 4 and summary["/arr"]["mean"] == pytest.approx(4.0)


def test_reset_starts_a_new_interval_but_windows_persist():
    monitor = Monitor()
    monitor.set_window("/return", 3)
    for value in (1.0, 2.0, 3.0, 4.0):
        monitor("/return", value)
    monitor("/loss", 5.0)
    monitor.reset()
    summary = monitor.summary()
    assert "/loss" not in summary
    assert summary["/return"]["count"] == 3 and summary["/return"]["mean"] == pytest.approx(3.0)


def test_windows_survive_a_state_dict_round_trip():
    monitor = Monitor()
    monitor.set_window("/return", 2)
    monitor("/return", 1.0)
    monitor("/return", 5.0)
    restored = Monitor()
    restored.load_state_dict(monitor.state_dict())
    restored("/return", 7.0)
    assert restored.summary()["/return"]["mean"] == pytest.approx(6.0)


def test_calls_from_threads_are_all_counted():
    monitor = Monitor()

    def feed() -> None:
        for _ in range(2000):
            monitor("/x", 1.0)

    threads = [threading.Thread(target=feed) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert monitor.summary()["/x"]["count"] == 8000


def test_bad_window_is_refused():
    with pytest.raises(ValueError, match="must be >= 1"):
        Monitor().set_window("/x", 0)
