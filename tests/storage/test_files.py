"""Atomic writes: the file is whole, with the umask's permissions or the ones asked for."""

from __future__ import annotations

import os

from digideep.storage.files import atomic_write_json, atomic_write_text


def test_a_written_file_is_whole_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "state.json"
    atomic_write_json(path, {"a": 1})
    atomic_write_json(path, {"a": 2})
    assert path.read_text() == '{\n  "a": 2\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_permissions_follow_the_umask_unless_a_mode_is_given(tmp_path):
    mask = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "plain.txt", "x")
        atomic_write_text(tmp_path / "secret.txt", "x", mode=0o600)
    finally:
        os.umask(mask)
    assert (tmp_path / "plain.txt").stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "secret.txt").stat().st_mode & 0o777 == 0o600
