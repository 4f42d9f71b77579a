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


def build(source: str, target: Target, cache_dir: Path | None = None) -> Binary:
    """The binary of `source` for `target`, compiled unless already cached."""
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
        result = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as error:
        source_tmp.unlink(missing_ok=True)
        binary_tmp.unlink(missing_ok=True)
        raise BuildError(f"cannot run {target.compiler[-1]} for target {target.name}: {error}") from error
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        source_tmp.unlink(missing_ok=True)
        binary_tmp.unlink(missing_ok=True)
        stderr = "\n".join(result.stderr.splitlines()[:_STDERR_LINES])
        raise BuildError(f"{target.compiler[-1]} failed for target {target.name} (exit {result.returncode}):\n{stderr}")
    os.replace(source_tmp, directory / f"{key}{extension}")
    os.replace(binary_tmp, path)
    return Binary(path, elapsed, False)
