"""The server's settings: the `dojo` section of the client's configuration.

They arrive as `initializationOptions`, then from `workspace/configuration`
whenever the client says they changed. A value of the wrong type is reported
and its default kept, so one typo never disables the server.

The user's settings (`USER_KEYS`: where programs and the token go, which
token file is read, which checkpoint is unpickled) come only from
`initializationOptions`, which the editor's plugin fills from the user's own
configuration. A `workspace/configuration` answer (or a pushed
`didChangeConfiguration`) can hold a cloned repository's settings
(`.vscode/settings.json`, a project-local config), so what it says about them
is ignored, whatever the client.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from codegen.targets import TARGETS

SECTION = "dojo"


@dataclass(frozen=True)
class Settings:
    target: str = "native"  # what hover, generated code and measurements are for
    runner_url: str = ""  # a `dojo-runner` service; empty: measure on this machine (the user's: USER_KEYS)
    runner_token_file: str = ""  # the user's
    repetitions: int = 10  # timed repetitions of `dojo.benchmark` (the runner adds more to fill a second)
    measure_automatically: bool = True  # measure in the background for the inlay hint
    tune_budget: int = 100  # evaluations of `dojo.tune` when the command does not say
    agent_checkpoint: str = ""  # a cost model or what `dojo agent train` wrote, for `dojo.agent.continue` (the user's)
    agent_steps: int = 10  # moves of `dojo.agent.continue` when the command does not say
    rank_quick_fixes: bool = True  # order the quick-fixes by the cost model's predicted speed-up

    @property
    def runner_name(self) -> str:
        return self.runner_url or "this machine"


# setting name (as the client writes it under `dojo`) -> (field, check, what is expected)
_KEYS = {
    "target": ("target", lambda v: isinstance(v, str) and v in TARGETS, f"one of {', '.join(TARGETS)}"),
    "runner.url": ("runner_url", lambda v: isinstance(v, str), "a URL or an empty string"),
    "runner.tokenFile": ("runner_token_file", lambda v: isinstance(v, str), "a path"),
    "repetitions": ("repetitions", lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1000,
                    "an integer from 1 to 1000"),
    "measure.automatic": ("measure_automatically", lambda v: isinstance(v, bool), "true or false"),
    "tune.budget": ("tune_budget", lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 100_000,
                    "an integer from 1 to 100000"),
    "agent.checkpoint": ("agent_checkpoint", lambda v: isinstance(v, str), "a file, a directory or an empty string"),
    "agent.steps": ("agent_steps", lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 10_000,
                    "an integer from 1 to 10000"),
    "agent.rankQuickFixes": ("rank_quick_fixes", lambda v: isinstance(v, bool), "true or false"),
}


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """`{"runner": {"url": u}}` and `{"runner.url": u}` alike, as dotted keys."""
    if not isinstance(value, dict):
        return {prefix: value} if prefix else {}
    flat: dict[str, Any] = {}
    for key, inner in value.items():
        flat.update(_flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
    return flat


USER_KEYS = frozenset({"runner.url", "runner.tokenFile", "agent.checkpoint"})
_USER_FIELDS = tuple(_KEYS[key][0] for key in sorted(USER_KEYS))


def read_settings(value: Any, current: Settings | None = None, *, from_user: bool) -> tuple[Settings, list[str]]:
    """Settings from the client's `dojo` section (nested or dotted keys; a
    `dojo` wrapper is accepted too), and what was wrong with it. The user's
    section (`from_user`) is read over the defaults; any other over the
    defaults but for what the user chose of `USER_KEYS` in `current`. Unknown
    keys are ignored: they may belong to the editor's side of the extension,
    and so are `USER_KEYS` unless the section comes `from_user`."""
    users = current or Settings()
    settings = Settings() if from_user else Settings(**{name: getattr(users, name) for name in _USER_FIELDS})
    if isinstance(value, dict) and isinstance(value.get(SECTION), dict):
        value = value[SECTION]
    problems = []
    for key, given in _flatten(value).items():
        if key not in _KEYS or given is None or (key in USER_KEYS and not from_user):
            continue
        name, valid, expected = _KEYS[key]
        if valid(given):
            settings = replace(settings, **{name: given})
        else:
            problems.append(f"setting `{SECTION}.{key}` is {given!r}; expected {expected}")
    return settings, problems


assert {f.name for f in fields(Settings)} == {name for name, _, _ in _KEYS.values()}
