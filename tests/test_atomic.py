import pytest

from zoo.atomic import atomic_path, write_bytes_atomic, write_text_atomic


def test_writes_whole_files(tmp_path):
    write_text_atomic(tmp_path / "a" / "x.txt", "hello")
    assert (tmp_path / "a" / "x.txt").read_text() == "hello"


def test_a_failure_mid_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "x.bin"
    write_bytes_atomic(path, b"old")
    with pytest.raises(RuntimeError):
        with atomic_path(path) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("interrupted")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.bin"]
