"""`dojo-lsp` for the tests of the ranked quick-fixes: its agents read programs with the tests'
FakeEmbedder (tests/test_perfllm_fakes.py) instead of the transformer, so that a checkpoint
trained on it in a test loads, and every rating takes `--delay` seconds longer, so that a test
can ask before one is ready.

    python tests/lsp/fake_agent.py --delay 2 [dojo-lsp's arguments]
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent.perfllm import rating  # noqa: E402
from dojo_ir import Program  # noqa: E402
from server.lsp.main import main  # noqa: E402
from tests.test_perfllm_fakes import FakeEmbedder  # noqa: E402


class SlowFakeEmbedder(FakeEmbedder):
    def __init__(self, delay_s: float):
        super().__init__()
        self.delay_s = delay_s

    def embed_many(self, items: Sequence[Program | str]) -> torch.Tensor:
        time.sleep(self.delay_s)
        return super().embed_many(items)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--delay", type=float, default=0.0, metavar="S")
    ours, theirs = parser.parse_known_args()
    rating.Rater.__init__ = functools.partialmethod(rating.Rater.__init__, embedder=SlowFakeEmbedder(ours.delay))
    sys.exit(main(theirs))
