"""Compile generated source into a binary, once per distinct build.

The cache is keyed by sha256 of (source, compiler, its version, flags): the generator
names everything deterministically, so the same program for the same target
is built once. A build compiles to a unique temporary name in the cache
directory and renames it into place, so concurrent builds of one source (in
threads or processes) never see a half-written binary; the last rename wins,
and every winner is the same program. The source is kept next to the binary
(`KEY.c`) for reading.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from .targets import Target

_EXTENSIONS = {"c": ".c", "cuda": ".cu", "hip": ".hip"}
_STDERR_LINES = 30
_TIMEOUT_S = 600


@dataclass(frozen=True)
class Binary:
    path: Path
    compile_s: float  # 0 when cached
    cached: bool


class BuildError(Exception):
    """The compiler failed; the message holds the first lines of its stderr."""


def default_cache_dir() -> Path:
    """$DOJO_CACHE if set, else ~/.cache/perfdojo/build."""
    env = os.environ.get("DOJO_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "perfdojo" / "build"


@cache
def compiler_version(compiler: tuple[str, ...]) -> str:
    """The compiler's own `--version` text, so that an upgraded compiler
    builds afresh instead of reusing binaries of the old one."""
    try:
        return subprocess.run([*compiler, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def cache_key(source: str, target: Target) -> str:
    identity = [source, target.compiler, target.flags, compiler_version(target.compiler)]
    return hashlib.sha256(json.dumps(identity).encode()).hexdigest()


def build(source: str, target: Target, cache_dir: Path | None = None, time_limit_s: float = _TIMEOUT_S) -> Binary:
    """The binary of `source` for `target`, compiled unless already cached. A compiler still
    running after `time_limit_s` is killed with everything it started (gcc's cc1 would go on
    alone) and the build fails: a program with large scopes unrolled can take gcc minutes."""
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    key = cache_key(source, target)
    path = directory / key
    if path.exists():
        return Binary(path, 0.0, True)
    extension = _EXTENSIONS[target.language]
    unique = f".{os.getpid()}.{uuid.uuid4().hex}"
    source_tmp = directory / f"{key}{unique}{extension}"
    binary_tmp = directory / f"{key}{unique}.tmp"
    source_tmp.write_text(source)
    command = [*target.compiler, str(source_tmp), "-o", str(binary_tmp), *target.flags]
    start = time.perf_counter()
    try:
        returncode, stderr = _compile(command, time_limit_s)
    except (OSError, subprocess.TimeoutExpired) as error:
        source_tmp.unlink(missing_ok=True)
        binary_tmp.unlink(missing_ok=True)
        if isinstance(error, subprocess.TimeoutExpired):
            raise BuildError(f"{target.compiler[-1]} did not finish compiling for target {target.name} within "
                             f"{time_limit_s:g} s, killed (a program with large scopes unrolled is long to compile)"
                             ) from None
        raise BuildError(f"cannot run {target.compiler[-1]} for target {target.name}: {error}") from error
    elapsed = time.perf_counter() - start
    if returncode != 0:
        source_tmp.unlink(missing_ok=True)
        binary_tmp.unlink(missing_ok=True)
        stderr = "\n".join(stderr.splitlines()[:_STDERR_LINES])
        raise BuildError(f"{target.compiler[-1]} failed for target {target.name} (exit {returncode}):\n{stderr}")
    os.replace(source_tmp, directory / f"{key}{extension}")
    os.replace(binary_tmp, path)
    return Binary(path, elapsed, False)


def _compile(command: list[str], time_limit_s: float) -> tuple[int, str]:
    """Run the compiler in a session of its own, so that a time limit kills the whole of it."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        _, stderr = process.communicate(timeout=time_limit_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    return process.returncode, stderr
