import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading

import pytest

from digideep.errors import UsageError
from digideep.pipeline.params import write_params
from digideep.pipeline.run_logging import RunLog
from digideep.storage.session import Session


def test_new_session_creates_its_layout_and_files(tmp_path):
    with (
        Session(root=tmp_path, name="s1", params_name="params.demo") as session,
        RunLog(session.log_path),
    ):
        write_params(session, "params.demo", {"seed": 0}, {"runner": {"seed": 0}})
        logging.getLogger("digideep.test").warning("hello log file")
        assert (session.path / "checkpoints").is_dir() and session.videos_path.is_dir()
        assert session.memory_location("train").local == tmp_path / "s1" / "memory" / "train.zarr"
        assert json.loads((session.path / "params.json").read_text()) == {"runner": {"seed": 0}}
        assert session.info()["params_module"] == "params.demo"
    assert "hello log file" in (tmp_path / "s1" / "log.txt").read_text()
    with Session(root=tmp_path, name="s1", resume=True):  # closing released the lock
        pass


def test_generated_name_has_time_and_params_name(tmp_path):
    with Session(root=tmp_path, params_name="params.pendulum_sac") as session:
        assert session.name.endswith("-pendulum_sac")


def test_existing_session_is_not_overwritten(tmp_path):
    Session(root=tmp_path, name="s").close()
    with pytest.raises(UsageError, match="already exists"):
        Session(root=tmp_path, name="s")


def test_resume_of_a_missing_session_is_refused(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        Session(root=tmp_path, name="missing", resume=True)
    assert not (tmp_path / "missing").exists()


def test_second_process_is_refused_while_the_first_holds_the_lock(tmp_path):
    with Session(root=tmp_path, name="s"):
        code = (
            "import sys\nfrom digideep.storage.session import Session\nfrom digideep.errors import UsageError\n"
            f"try:\n    Session(root={str(tmp_path)!r}, name='s', resume=True)\n"
            "except UsageError as e:\n    print(e); sys.exit(2)\n"
        )
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stdout == (
        f"session '{tmp_path / 's'}' is in use by process {os.getpid()} on {socket.gethostname()}; "
        "wait for it to finish or stop it\n"
    )


def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
    code = f"from digideep.storage.session import Session\nSession(root={str(tmp_path)!r}, name='s')\nimport os\nos._exit(0)"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert (tmp_path / "s" / ".lock.json").exists()  # the dead process never cleaned up
    with Session(root=tmp_path, name="s", resume=True) as session:
        assert session.path.is_dir()


def test_done_marker(tmp_path):
    with Session(root=tmp_path, name="s") as session:
        assert not session.is_done
        session.mark_done(iterations=3)
        assert session.is_done


def test_reading_a_session_in_use_leaves_its_lock_alone(tmp_path):
    with Session(root=tmp_path, name="s") as holder:
        with Session(root=tmp_path, name="s", resume=True, lock=False) as reader:  # play a checkpoint
            assert reader.path == holder.path
        with pytest.raises(UsageError, match="is in use by process"):
            Session(root=tmp_path, name="s", resume=True)


def test_a_session_closed_by_another_thread_is_released(tmp_path):
    session = Session(root=tmp_path, name="s")
    closer = threading.Thread(target=session.close)  # Prefect runs task bodies in worker threads
    closer.start()
    closer.join()
    with Session(root=tmp_path, name="s", resume=True):
        pass


@pytest.mark.parametrize("name", ["../x", "a/b", "..", "."])
def test_a_new_session_is_one_folder_under_its_root(tmp_path, name):
    with pytest.raises(UsageError, match=f"session name '{re.escape(name)}' must be one folder name"):
        Session(root=tmp_path / "sessions", name=name)
    assert list(tmp_path.iterdir()) == []


def test_a_root_that_is_a_file_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / "file").write_text("kept")
    with pytest.raises(UsageError, match="is a file, not a folder"):
        Session(root=tmp_path / "file", name="s")
    with pytest.raises(UsageError, match=r"lies below '.*file', which is a file"):
        Session(root=tmp_path / "file" / "sessions", name="s")
    assert [p.name for p in tmp_path.iterdir()] == ["file"] and (tmp_path / "file").read_text() == "kept"


def test_discard_deletes_a_new_session_and_the_empty_folders_made_for_it(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "keep.txt").write_text("")
    session = Session(root=tmp_path / "data" / "sessions" / "more", name="s")
    write_params(session, "params.demo", {"seed": 0}, {"runner": {"seed": 0}})
    session.discard()
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["keep.txt"]
    Session(root=tmp_path / "data" / "sessions" / "more", name="s").close()  # the name is free again


def test_saved_run_reads_what_reopening_needs_at_once(tmp_path):
    with Session(root=tmp_path, name="s", params_name="params.demo") as session:
        write_params(session, "params.demo", {"seed": 1}, {"runner": {"seed": 1}})
        assert session.update_info(resumes=2)["resumes"] == 2
    with Session(root=tmp_path, name="s", resume=True) as session:
        saved = session.saved_run()
        assert (saved.params, saved.cpanel, saved.done) == ({"runner": {"seed": 1}}, {"seed": 1}, False)
        assert saved.info["params_module"] == "params.demo" and saved.info["resumes"] == 2
        session.mark_done()
        assert session.saved_run().done
        (session.path / "cpanel.json").write_text("{")
        with pytest.raises(UsageError, match=r"cpanel\.json' is not valid JSON"):
            session.saved_run()


def test_checkpoints_to_resume_are_read_newest_first_with_the_damage_of_each(tmp_path):
    from digideep.storage.checkpoint import save_checkpoint

    with Session(root=tmp_path, name="s") as session:
        for iteration, frames in ((10, 100), (20, 200)):
            info = {"params": {}, "counters": {"frames": frames}}
            save_checkpoint(session.checkpoints_location, iteration, info, {"x": iteration})
        (session.path / "checkpoints" / "checkpoint-20" / "states.pt").write_bytes(b"cut")
        found = session.checkpoints_to_resume()
        newest = next(found)
        assert (newest.iteration, newest.frames, newest.states) == (20, 200, None)
        assert "states.pt' is damaged or truncated" in newest.damage
        older = next(found)
        assert (older.iteration, older.frames, older.damage) == (10, 100, "")
        assert older.states == {"x": 10} and older.runner_info["iteration"] == 10
        assert next(found, None) is None
        session.clear_memories()
        assert (session.path / "memory").is_dir() and not any((session.path / "memory").iterdir())
