"""`PerfDojo-v0`: the game as a gymnasium environment, for any agent.

    import gymnasium
    import agent.perfllm.env                     # registers PerfDojo-v0
    env = gymnasium.make("PerfDojo-v0", program=spec, evaluate=cost, max_steps=20)
    observation, info = env.reset(seed=0)
    observation["program"]       # the canonical text of the current program
    observation["moves"]         # ("stop", "join_scopes(op=e, depth=0)", ...)
    observation["action_mask"]   # int8[max_actions]: 1 at each index of `moves`
    observation, reward, terminated, truncated, info = env.step(2)

The action is an index into observation["moves"]: 0 stops, which ends the episode (terminated),
and k plays moves[k], the legal moves for `target` in `dojo_ir.moves.find`'s order (as many as
fit in `max_actions - 1`). An index past the list changes nothing and earns 0, with
info["invalid"] set; the mask tells which indices are valid. An episode is truncated after
`max_steps` actions.

The reward is c / T, T the time of the program after the action (of the current program for
stop), c `scale` or else the start's time, so that a reward is a speed-up over the start; a
program that fails earns 0. info["time_s"] is T in seconds (None when it failed) and
info["move"] the move played (None for stop and invalid indices). `program` is a Program or its
text; `evaluate` an `agent.evaluate.Evaluator` whose start is `program`, a function of the moves
from `program` to seconds, or None for an Evaluator with the local runner.
"""

from __future__ import annotations

import math
import string
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from dojo_ir import Program, load
from dojo_ir.moves import Move, apply
from dojo_ir.paths import without_comments

from ..evaluate import Evaluator
from .embed import canonical_text
from .game import Cost, Costs, legal_moves

STOP = "stop"
_CHARSET = frozenset(string.printable)


class PerfDojoEnv(gymnasium.Env):
    """The game from `program`; see the module's docstring."""

    # a text has no frame rate to keep, but gymnasium's checker asks for one
    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, program: Program | str, evaluate: Evaluator | Cost | None = None, *, max_steps: int = 20,
                 target: str = "native", scale: float | None = None, max_actions: int = 512,
                 max_text: int = 100_000, render_mode: str | None = None):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of {self.metadata['render_modes']}, not {render_mode!r}")
        if max_steps < 1 or max_actions < 1:
            raise ValueError(f"max_steps and max_actions must be at least 1, not {max_steps} and {max_actions}")
        self.start = without_comments(load(program) if isinstance(program, str) else program)
        self.costs = Costs(self.start, evaluate if evaluate is not None else Evaluator(self.start))
        self.max_steps, self.target, self.scale, self.max_actions = max_steps, target, scale, max_actions
        self.render_mode = render_mode
        self.observation_space = spaces.Dict({
            "program": spaces.Text(max_text, charset=_CHARSET),
            "moves": spaces.Sequence(spaces.Text(max_text, charset=_CHARSET)),
            "action_mask": spaces.MultiBinary(max_actions),
        })
        self.action_space = spaces.Discrete(max_actions)
        self._program, self._moves, self._steps, self._c = self.start, (), 0, 1.0
        self._legal: list[Move] = []

    def _observe(self) -> dict[str, Any]:
        self._legal = legal_moves(self._program, self.target)[:self.max_actions - 1]
        mask = np.zeros(self.max_actions, dtype=np.int8)
        mask[:len(self._legal) + 1] = 1
        return {"program": canonical_text(self._program), "moves": (STOP, *map(str, self._legal)),
                "action_mask": mask}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self._program, self._moves, self._steps = self.start, (), 0
        start = self.costs([], self.start)
        if math.isinf(start):
            raise ValueError("the starting program failed or did not verify, so it has no time to measure against")
        self._c = self.scale if self.scale is not None else start
        return self._observe(), {"time_s": start, "move": None, "invalid": False}

    def step(self, action: int) -> tuple[dict, float, bool, bool, dict]:
        index = int(action)
        self._steps += 1
        truncated = self._steps >= self.max_steps
        if not 0 <= index <= len(self._legal):
            return self._observe(), 0.0, False, truncated, {"time_s": None, "move": None, "invalid": True}
        move = None
        if index > 0:
            move = str(self._legal[index - 1])
            self._program, self._moves = apply(self._program, self._legal[index - 1]), (*self._moves, move)
        time_s = self.costs(self._moves, self._program)
        reward = 0.0 if math.isinf(time_s) else self._c / time_s
        info = {"time_s": None if math.isinf(time_s) else time_s, "move": move, "invalid": False}
        return self._observe(), reward, index == 0, truncated and index != 0, info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return canonical_text(self._program)
        return None


gymnasium.register(id="PerfDojo-v0", entry_point="agent.perfllm.env:PerfDojoEnv")
