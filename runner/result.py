"""`RunResult`: one measured and verified run of a kernel, as the runner reports it.

The local runner and the remote service give the same record; the service sends it as `to_json()`.
Times are in seconds. A run that failed (compile error, crash, time limit, bad output) has `error`
set and no times; `verified` is None when the outputs were not compared at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RunResult:
    target: str
    median_s: float | None
    min_s: float | None
    max_s: float | None
    repeats: int
    compile_s: float  # the build of this call: near zero when the binary came from the cache
    verified: bool | None
    max_error: float | None  # the largest absolute difference from the spec's outputs
    error: str | None
    times: tuple[float, ...] = ()  # every timed run, in order

    @property
    def ok(self) -> bool:
        """Measured and verified: the only result a search may use."""
        return self.error is None and self.verified is True

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "median_s": self.median_s,
            "min_s": self.min_s,
            "max_s": self.max_s,
            "repeats": self.repeats,
            "compile_s": self.compile_s,
            "verified": self.verified,
            # JSON has no infinity; an infinite error (a NaN where the spec has a number) is sent as null
            # with verified false, which says the same
            "max_error": self.max_error if self.max_error is None or self.max_error != float("inf") else None,
            "error": self.error,
            "times": list(self.times),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RunResult:
        return cls(
            target=d["target"],
            median_s=d["median_s"],
            min_s=d["min_s"],
            max_s=d["max_s"],
            repeats=d["repeats"],
            compile_s=d["compile_s"],
            verified=d["verified"],
            max_error=d.get("max_error"),
            error=d.get("error"),
            times=tuple(d.get("times", ())),
        )

    @classmethod
    def failed(cls, target: str, error: str, repeats: int = 0, compile_s: float = 0.0) -> RunResult:
        """A run that produced no times."""
        return cls(target, None, None, None, repeats, compile_s, None, None, error)


def format_time(seconds: float | None) -> str:
    """A time for people, to 3 significant digits: 1.23 s, 45.6 ms, 789 µs, 12 ns; - when unknown.
    Every front door and report writes times with this."""
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"
