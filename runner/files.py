"""Files that several processes share: written whole or not at all, and locked; named arrays as
`.npz` files."""

from __future__ import annotations

import errno
import fcntl
import io
import math
import os
import secrets
import stat
import struct
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np

ARRAYS_BYTES = 2**34  # 16 GiB: the most a file of named arrays (inputs, outputs) may ask to allocate
_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves the old file or the
    new one, never half of either. A symbolic link is written through (its
    target is replaced, the link stays); an existing file keeps its mode, and
    a new one gets the mode the umask gives. A character device or a pipe is
    written in place, not replaced; any other target that is not a regular
    file is an OSError."""
    target = Path(os.path.realpath(path))
    try:
        status: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        status = None
    if status is not None and not stat.S_ISREG(status.st_mode):
        _write_in_place(target, status, data)
        return
    mode = None if status is None else stat.S_IMODE(status.st_mode)
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp")
    # created like any new file (0666 less the umask), not mkstemp's 0600
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(handle, "wb") as out:
            if mode is not None:
                os.fchmod(out.fileno(), mode)
            out.write(data)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _write_in_place(target: Path, status: os.stat_result, data: bytes) -> None:
    # A stream (`--out /dev/null`, a pipe) is written as a shell's `>` writes it: renaming a file over a
    # device would replace the device. Anything else that is not a regular file is refused.
    if not (stat.S_ISCHR(status.st_mode) or stat.S_ISFIFO(status.st_mode)):
        kind = "a directory" if stat.S_ISDIR(status.st_mode) else "not a regular file, a pipe or a character device"
        raise OSError(errno.EINVAL, f"{kind}: refusing to replace it", str(target))
    with open(target, "wb") as out:
        out.write(data)


@contextmanager
def exclusive(path: Path, shared: bool = False) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if need be) for the duration;
    with `shared`, a lock that other shared holders may hold at once, but no
    exclusive one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_arrays(path: Path, limit: int = ARRAYS_BYTES) -> dict[str, np.ndarray]:
    """The named arrays of the `.npz` file at `path`. FileNotFoundError when there is none, and
    ValueError saying why for anything else that is not such a file, or one whose arrays would take
    more than `limit` bytes: each member's header is read and checked before any data is."""
    try:
        _check_members(path, limit)
        archive = np.load(path, allow_pickle=False)
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise ValueError("it holds one array, not named arrays (write it with numpy.savez)")
        with archive:
            return {name: archive[name] for name in archive.files}
    except FileNotFoundError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as error:
        raise ValueError(f"not a .npz file of arrays: {error}") from None


def _check_members(path: Path, limit: int) -> None:
    if path.exists() and not path.is_file():  # a pipe or a device would be read forever
        raise ValueError("not a regular file")
    if not zipfile.is_zipfile(path):
        return  # numpy says what it is instead
    total = 0
    with zipfile.ZipFile(path) as archive:
        for member in archive.infolist():
            if not member.filename.endswith(".npy"):
                raise ValueError(f"member `{member.filename[:100]}` is not an array (.npy)")
            with archive.open(member) as data:
                read_header = _NPY_HEADERS.get(np.lib.format.read_magic(data))
                if read_header is None:
                    raise ValueError(f"member `{member.filename[:100]}` is of a .npy version numpy.savez "
                                     "does not write")
                shape, _, dtype = read_header(data)
            total += math.prod(shape) * dtype.itemsize
            if total > limit:
                raise ValueError(f"its arrays take more than the limit of {limit:,} bytes, at member "
                                 f"`{member.filename[:100]}`")


def write_arrays(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """`arrays` as the `.npz` file at `path`, written atomically; ValueError for a name longer than
    the zip format allows."""
    archive = io.BytesIO()
    try:
        np.savez(archive, **arrays)
    except struct.error:  # the zip format's limit on a member's name
        raise ValueError("an array name is too long for an .npz archive (at most 65,535 bytes)") from None
    write_atomically(path, archive.getvalue())
