"""runner/files.write_atomically: whole or not at all, and otherwise like writing the file in place:
the mode stays, a symbolic link stays a link to its target, a new file gets the umask's mode."""

from __future__ import annotations

import io
import os
import stat
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from dojo_ir.library import KERNELS
from runner.files import read_arrays, write_arrays, write_atomically
from server.cli import main


@pytest.fixture
def umask() -> Iterator[None]:
    old = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mode", [0o644, 0o755, 0o600, 0o664])
def test_an_existing_file_keeps_its_mode(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "kernel.dojo"
    path.write_bytes(b"old")
    path.chmod(mode)
    write_atomically(path, b"new")
    assert (path.read_bytes(), _mode(path)) == (b"new", mode)


def test_a_new_file_gets_the_mode_of_the_umask(tmp_path: Path, umask: None) -> None:
    path = tmp_path / "new.dojo"
    write_atomically(path, b"text")
    assert _mode(path) == 0o640  # 0666 less 027, not mkstemp's 0600


def test_a_symbolic_link_is_written_through_and_stays_a_link(tmp_path: Path) -> None:
    target = tmp_path / "real" / "kernel.dojo"
    target.parent.mkdir()
    target.write_bytes(b"old")
    target.chmod(0o644)
    link = tmp_path / "link.dojo"
    link.symlink_to(target)
    write_atomically(link, b"new")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert (target.read_bytes(), _mode(target)) == (b"new", 0o644)
    assert sorted(p.name for p in target.parent.iterdir()) == ["kernel.dojo"]  # no temporary left


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "kernel.dojo"
    path.write_bytes(b"old")
    with pytest.raises(TypeError):
        write_atomically(path, "not bytes")  # type: ignore[arg-type]
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["kernel.dojo"]


def test_fmt_write_formats_the_target_of_a_link(tmp_path: Path) -> None:
    canonical = KERNELS["relu"].small()
    target = tmp_path / "relu.dojo"
    target.write_text(canonical.replace("heap\n", "heap   \n", 1) + "\n\n")
    target.chmod(0o644)
    link = tmp_path / "link.dojo"
    link.symlink_to(target)
    assert main(["fmt", "--write", str(link)]) == 0
    assert link.is_symlink()
    assert target.read_text() == canonical and _mode(target) == 0o644


def test_a_character_device_is_written_in_place_and_stays_a_device() -> None:
    write_atomically(Path("/dev/null"), b"discarded")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_pipe_is_written_in_place(tmp_path: Path) -> None:
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(pipe.read_bytes()))
    reader.start()
    write_atomically(pipe, b"through the pipe")
    reader.join(timeout=10)
    assert received == [b"through the pipe"] and stat.S_ISFIFO(pipe.stat().st_mode)


def test_a_directory_is_refused_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "inside").write_text("kept")
    with pytest.raises(OSError, match="a directory: refusing to replace it"):
        write_atomically(tmp_path, b"new")
    assert (tmp_path / "inside").read_text() == "kept"


def test_the_command_line_names_a_target_it_cannot_write(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["kernels", "softmax", "--quick", "-o", str(tmp_path)]) == 1
    assert f"dojo kernels: error: {tmp_path}: a directory: refusing to replace it" in capsys.readouterr().err


def _npz(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def _npy_header(shape: tuple[int, ...]) -> bytes:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return np.lib.format.magic(1, 0) + header.getvalue()[8:]


def test_named_arrays_are_read_back(tmp_path: Path) -> None:
    write_arrays(tmp_path / "a.npz", {"x": np.arange(6, dtype=np.float32).reshape(2, 3)})
    assert read_arrays(tmp_path / "a.npz")["x"].tolist() == [[0, 1, 2], [3, 4, 5]]


def test_an_array_claiming_more_than_the_limit_is_refused_before_its_data_is_read(tmp_path: Path) -> None:
    path = _npz(tmp_path / "in.npz", {"x.npy": _npy_header((2,)) + bytes(8),
                                      "extra.npy": _npy_header((2**40, 25)) + bytes(8)})  # 100 TiB
    with pytest.raises(ValueError, match="more than the limit of 17,179,869,184 bytes, at member `extra.npy`"):
        read_arrays(path)


def test_a_member_that_is_not_an_array_or_a_pipe_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="member `evil.pkl` is not an array"):
        read_arrays(_npz(tmp_path / "in.npz", {"evil.pkl": b"..."}))
    os.mkfifo(tmp_path / "pipe.npz")
    with pytest.raises(ValueError, match="not a regular file"):
        read_arrays(tmp_path / "pipe.npz")
