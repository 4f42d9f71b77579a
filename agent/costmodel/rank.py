"""A program's moves rated by the cost model: what the editor's quick-fixes and `dojo costmodel
moves` show, and what a search can order its candidates by.

    rate_moves(model, host, program, moves)      # {move: predicted speed-up over `program`}
    rate_moves(..., deadline=time.perf_counter() + 0.05)   # those it got to by then
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence

import numpy as np

from dojo_ir import DojoError, Program
from dojo_ir.analysis import Analysis
from dojo_ir.moves import Move, apply

from .features import Host, features
from .model import CostModel

log = logging.getLogger(__name__)
_MOST = 20.0  # log speed-ups are clipped to this: a prediction, not a promise of e^40


def rate_moves(model: CostModel, host: Host, program: Program, moves: Sequence[Move | str],
               analysis: Analysis | None = None, deadline: float | None = None) -> dict[str, float]:
    """The predicted speed-up over `program` of each of `moves` (legal moves of it): exp(score before -
    score after), the derivation's moves read with the move after them. A move the model cannot read
    (a bug: it was listed legal) is logged and left out. With a `deadline` (`time.perf_counter()`),
    the moves it has not reached by then are left out too."""
    derivation = program.derivation.moves if program.derivation else ()
    analysis = analysis or Analysis(program)
    rows, rated = [features(program, host, derivation)], []
    for move in moves:
        if deadline is not None and time.perf_counter() > deadline:
            break
        try:
            rows.append(features(apply(program, move, analysis), host, (*derivation, str(move))))
        except (DojoError, ValueError, KeyError):
            log.exception("the cost model could not read %s after %s", program.name, move)
            continue
        rated.append(str(move))
    scores = model.score_features(np.stack(rows))
    return {move: math.exp(max(-_MOST, min(_MOST, scores[0] - score)))
            for move, score in zip(rated, scores[1:], strict=True)}
