import pytest

from zoo.files.atomic import atomic_path, write_bytes_atomic, write_text_atomic


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


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_files_written_whole_follow_the_umask(tmp_path, umask, mode):
    import os
    import stat

    old = os.umask(umask)
    try:
        path = write_text_atomic(tmp_path / "x.txt", "hello")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == mode
