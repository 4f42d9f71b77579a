"""`dojo.agent.continue`: the learned agent plays N moves from the document's
kernel, measuring each, and the best program it met is applied as one
versioned edit that records its moves.

The agent (`agent.learned`) is the one of the command's `checkpoint` or else
of `dojo.agent.checkpoint` (a cost model's `.npz` or what `dojo agent train`
wrote), or the cost model shipped with PerfDojo when that is empty; it plays in a worker thread, and progress
reports each move with its time. Cancelling stops it before its next move
and keeps the best program met until then. As for `dojo.tune`, the edit is
for the version the game started from, so the editor refuses it if the
document changed meanwhile; the answer then carries the moves.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pygls.exceptions import JsonRpcInvalidParams

from dojo_ir import Program
from runner.result import format_time

from ..measurements import open_runner
from ..progress import cancellable, progress
from ..requests import apply_edit, argument, document_of, moves_edit
from ..server import DojoServer
from ..settings import Settings

if TYPE_CHECKING:
    from agent.perfllm.play import PlayResult, Step

CONTINUE = "dojo.agent.continue"


def register(server: DojoServer) -> None:
    @server.command(CONTINUE)
    @cancellable
    async def continue_command(ls: DojoServer, *args: Any) -> dict[str, Any]:
        snapshot, program = await document_of(ls, args, CONTINUE)
        options = argument(args, 1, dict, CONTINUE, "an object {steps, checkpoint}") or {}
        steps = options.get("steps", ls.settings.agent_steps)
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise JsonRpcInvalidParams(f"{CONTINUE}: steps is a positive integer")
        chosen = options.get("checkpoint", ls.settings.agent_checkpoint)
        if not isinstance(chosen, str):
            raise JsonRpcInvalidParams(f"{CONTINUE}: checkpoint is a directory that `dojo agent train` wrote")
        checkpoint = Path(chosen).expanduser() if chosen else None
        stop = threading.Event()
        loop = asyncio.get_running_loop()
        async with progress(ls, f"The agent plays {program.name} ({steps} moves)") as report:
            def on_step(step: Step) -> None:
                time_s = "failed" if step.time_s is None else format_time(step.time_s)
                loop.call_soon_threadsafe(report, f"{step.index}/{steps}: {step.move or 'stop'} -> {time_s}",
                                          int(100 * step.index / steps))

            game = ls.spawn(asyncio.to_thread(_play, ls.settings, program, checkpoint, steps, on_step, stop.is_set),
                            f"the agent playing {program.name}")
            try:
                result = await asyncio.shield(game)
            except asyncio.CancelledError:
                stop.set()  # the agent returns its best so far before its next move
                result = await game
        if isinstance(result, str):
            return {"applied": False, "reason": result}
        moves = list(result.moves)
        answer = {"steps": [s.to_json() for s in result.steps], "start_s": result.start_s, "time_s": result.time_s,
                  "speedup": result.speedup, "moves": moves, "stopped": stop.is_set()}
        if not moves:
            return answer | {"applied": False, "reason": "no faster program met"}
        applied = await apply_edit(ls, f"agent ({len(moves)} moves)", moves_edit(ls, snapshot, moves))
        return answer | {"applied": applied} | ({} if applied else {"reason": "the document changed meanwhile"})


def _play(settings: Settings, program: Program, checkpoint: Path | None, steps: int, on_step: Callable[[Step], None],
          should_stop: Callable[[], bool]) -> PlayResult | str:
    """The agent's game (agent.perfllm.continue_) measured by the configured runner, or why it
    could not start (a missing or foreign checkpoint, an unreachable runner)."""
    from agent.evaluate import Evaluator  # torch loads when first asked for
    from agent.learned import continue_agent
    from runner.client import RunnerError

    try:
        with open_runner(settings) as runner:
            evaluator = Evaluator(program, runner=runner, target=settings.target)
            prefix = program.derivation.moves if program.derivation else ()
            return continue_agent(evaluator.start, steps, evaluator, checkpoint=checkpoint, target=settings.target,
                                  prefix=prefix, on_step=on_step, should_stop=should_stop)
    except (FileNotFoundError, ValueError, RunnerError) as error:
        return f"the agent cannot play: {error}"
