import time

from digideep.utility.profiling import KeepTime, Profiler


def test_nested_names_counts_and_totals():
    profiler = Profiler()
    for _ in range(3):
        with KeepTime("train", profiler):
            with KeepTime("explore", profiler):
                time.sleep(0.001)
            with KeepTime("update", profiler):
                pass
    summary = profiler.summary()
    assert set(summary) == {"/train", "/train/explore", "/train/update"}
    assert summary["/train/explore"]["count"] == 3
    assert summary["/train/explore"]["total"] >= 0.003
    assert summary["/train"]["total"] >= summary["/train/explore"]["total"]


def test_exception_inside_a_block_keeps_the_stack_sound():
    profiler = Profiler()
    try:
        with KeepTime("outer", profiler):
            raise RuntimeError
    except RuntimeError:
        pass
    with KeepTime("next", profiler):
        pass
    assert set(profiler.summary()) == {"/outer", "/next"}


def test_reset_clears_records():
    profiler = Profiler()
    with KeepTime("x", profiler):
        pass
    profiler.reset()
    assert profiler.summary() == {}
