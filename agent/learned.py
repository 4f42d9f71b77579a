"""The learned agent, whichever kind a checkpoint names: what `dojo tune --method agent`, `dojo agent
continue`, the editor's "let the agent continue" and `make demo` play.

    result = continue_agent(program, 10, evaluator)            # the shipped cost model, ten moves
    result = search_agent(program, evaluator, checkpoint=path)  # until the evaluator's budget is spent

With no checkpoint, or a cost model's file (`.npz`, `dojo costmodel train`), the cost model ranks and
the ranked searches of `agent.costmodel.search` measure only the best candidates, refitting it on
what they measure. A PerfLLM training directory or its `policy.pt` plays the Q-network's game
(`agent.perfllm`), measuring every move it tries. docs/agent.md gives the measurements behind the
default.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from codegen.targets import get_target
from dojo_ir import Program
from runner.roofline import machine_limits

from .evaluate import Evaluator
from .perfllm.game import Cost
from .perfllm.play import PlayResult, Step

if TYPE_CHECKING:
    from .costmodel.features import Host
    from .costmodel.model import CostModel


def is_cost_model(checkpoint: Path | None) -> bool:
    """Whether `checkpoint` names a cost model (None: the shipped one) rather than a PerfLLM agent."""
    return checkpoint is None or checkpoint.suffix == ".npz"


def _model_and_host(checkpoint: Path | None, target: str) -> tuple[CostModel, Host]:
    from .costmodel.features import Host
    from .costmodel.model import SHIPPED, CostModel, CostModelError

    try:
        model = CostModel.load(checkpoint or SHIPPED)
    except CostModelError as error:
        raise ValueError(str(error)) from None
    return model, Host.of(machine_limits(), get_target(target))


def continue_agent(program: Program, steps: int, evaluate: Evaluator | Cost, *, checkpoint: Path | None = None,
                   target: str = "native", prefix: Sequence[str] = (), seed: int = 0,
                   on_step: Callable[[Step], None] | None = None,
                   should_stop: Callable[[], bool] | None = None) -> PlayResult:
    """Play up to `steps` moves from `program` (which `prefix` made from its spec), measuring each with
    `evaluate`; the best program met. ValueError when the checkpoint is not an agent's or the start
    does not run."""
    if is_cost_model(checkpoint):
        from .costmodel.search import continue_ranked

        model, host = _model_and_host(checkpoint, target)
        return continue_ranked(program, model, host, steps, evaluate, target=target, prefix=prefix, seed=seed,
                               on_step=on_step, should_stop=should_stop)
    from .perfllm.play import continue_

    return continue_(program, checkpoint, steps, evaluate, target=target, seed=seed, on_step=on_step,
                     should_stop=should_stop)


def search_agent(program: Program, evaluate: Evaluator, *, checkpoint: Path | None = None, target: str = "native",
                 prefix: Sequence[str] = (), seed: int = 0,
                 should_stop: Callable[[], bool] | None = None) -> PlayResult:
    """Search from `program` until the evaluator's budget is spent (or `should_stop()`); the best program
    met. ValueError as for `continue_agent`."""
    if is_cost_model(checkpoint):
        from .costmodel.search import search_ranked

        model, host = _model_and_host(checkpoint, target)
        return search_ranked(program, model, host, evaluate, target=target, prefix=prefix, seed=seed,
                             should_stop=should_stop)
    from .perfllm.search import search

    return search(program, checkpoint, evaluate, target=target, seed=seed, should_stop=should_stop)
