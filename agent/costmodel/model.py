"""The cost model: a small network that scores programs, lower for faster, trained to rank.

    model = CostModel.train(groups)                 # groups: agent.costmodel.data.read_groups
    model.score(programs, host)                     # np.ndarray, one score a program: lower = faster
    model = model.refit(new_groups, steps=200)      # go on from its weights with new measurements
    model.save(path); CostModel.load(path)

The network reads each operation's row of the features with the program's entries beside it and
gives that operation's predicted log time; the program's score is the log of the sum of their
exponentials, the log of the sum of its operations' predicted times, as Ansor's model sums its
statements' (Zheng et al., OSDI 2020). With one vector a program, averaged over its operations, a
move that made one of softmax's four nests eight times faster read as a speed-up of the whole,
and a search guided by it played such moves from one nest after another.

Scores are predicted log times up to a constant of each spec: only their differences within one
spec (and target and machine) mean anything, and exp(a - b) is how many times slower the program
of score a is predicted to be than that of score b. That is what the training asks of them: within
each group (one log: one spec, target, machine and run) pairs of programs are drawn, and the loss
is RankNet's (the logistic loss of the score difference on which program was faster, each pair
weighted by how far apart their times are, so that pairs within the timer's noise count little)
plus a small squared error between the score difference and the log time ratio, which keeps the
scale of the differences readable as a speed-up. Groups are drawn alike whatever their size, so a
log of a thousand evaluations does not drown one of thirty.

Training takes torch; scoring does not: the network is a few matrix products in numpy, so the
editor loads a model in milliseconds and scores a thousand programs in milliseconds once their
features are computed.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from dojo_ir import Program
from runner.files import write_atomically

from .data import Group
from .features import NAMES, OP_NAMES, SHARED_NAMES, SLOTS, WIDTH, Host, features, op_rows

HIDDEN = (64,)
SHIPPED = Path(__file__).with_name("trained") / "costmodel.npz"  # the model that comes with PerfDojo
_FORMAT = "perfdojo-costmodel-2"
_ABSENT = -1e4  # an empty slot's output: nothing in a sum of exponentials, and no NaN when all are empty
_NOISE = 0.05  # log time ratio under which a pair's order counts less than fully: the timer's noise


class CostModelError(Exception):
    """A model file that is not one, or one made for other features."""


@dataclass(frozen=True)
class Training:
    """How a model is trained: gradient `steps`, `groups_per_step` groups and `pairs` pairs of each a
    step, Adam's `learning_rate`, `weight_decay`, the weight of the log-ratio error (`regression`),
    and the `seed` of the draws."""

    steps: int = 1500
    groups_per_step: int = 32
    pairs: int = 64
    learning_rate: float = 1e-3
    weight_decay: float = 1e-3
    regression: float = 0.1
    seed: int = 0


@dataclass(frozen=True)
class CostModel:
    """The network's layers (weights, biases) and the input's mean and scale; `info` says what it was
    trained on."""

    layers: tuple[tuple[np.ndarray, np.ndarray], ...]
    mean: np.ndarray
    scale: np.ndarray
    info: dict

    # -- scoring -----------------------------------------------------------------------------

    def score_features(self, x: np.ndarray) -> np.ndarray:
        """Scores of feature rows `x` (programs, WIDTH): lower = predicted faster."""
        h = _inputs((np.asarray(x, dtype=np.float32) - self.mean) / self.scale)
        for k, (weight, bias) in enumerate(self.layers):
            h = h @ weight + bias
            if k < len(self.layers) - 1:
                np.maximum(h, 0, out=h)
        per_op = np.where(_present(x), h[..., 0], _ABSENT)
        top = per_op.max(axis=1, keepdims=True)
        return (top[:, 0] + np.log(np.exp(per_op - top).sum(axis=1))).astype(np.float64)

    def score(self, programs: Sequence[Program], host: Host,
              moves: Sequence[Sequence[str] | None] | None = None) -> np.ndarray:
        """Scores of `programs` on `host`, each with its derivation's `moves` (by default its own):
        lower = predicted faster; differences are predicted log time ratios."""
        if not programs:
            return np.zeros(0)
        chosen = moves if moves is not None else [None] * len(programs)
        return self.score_features(np.stack([features(p, host, m) for p, m in zip(programs, chosen, strict=True)]))

    # -- training ----------------------------------------------------------------------------

    @classmethod
    def train(cls, groups: Sequence[Group], training: Training = Training()) -> CostModel:
        """A new model trained on `groups` (those with two programs or more)."""
        # the width is the data's: WIDTH for a model to save, more for an experiment with other inputs
        rows = np.concatenate([g.features for g in groups]) if groups else np.zeros((0, WIDTH), np.float32)
        mean, scale = _scaling(rows)
        rng = np.random.default_rng(training.seed)
        sizes = (len(OP_NAMES) + len(SHARED_NAMES), *HIDDEN, 1)
        layers = tuple((rng.normal(0, np.sqrt(2 / a), (a, b)).astype(np.float32), np.zeros(b, np.float32))
                       for a, b in zip(sizes, sizes[1:], strict=False))
        start = cls(layers, mean.astype(np.float32), scale.astype(np.float32), {})
        return start.refit(groups, training)

    def refit(self, groups: Sequence[Group], training: Training = Training()) -> CostModel:
        """This model trained further on `groups` (its input scaling kept, so that its scores and the
        new model's compare): what a search calls after each batch of measurements."""
        import torch

        usable = [g for g in groups if len(g) >= 2]
        if not usable:
            return self
        torch.manual_seed(training.seed)
        rng = np.random.default_rng(training.seed)
        # one thread: the network is small, and threads that wait for each other on a busy machine cost
        # more than they save (1,500 steps: 52 s on two threads, 19 s on one, with another job running)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._refit(usable, training, rng)
        finally:
            torch.set_num_threads(threads)

    def _refit(self, usable: list[Group], training: Training, rng: np.random.Generator) -> CostModel:
        import torch

        net = _torch_net(self.layers)
        optimiser = torch.optim.Adam(net.parameters(), lr=training.learning_rate, weight_decay=training.weight_decay)
        raw = np.concatenate([g.features for g in usable])
        x = torch.from_numpy(_inputs((raw - self.mean) / self.scale))
        present = torch.from_numpy(_present(raw))
        log_t = torch.from_numpy(np.concatenate([np.log(g.times_s) for g in usable])).float()
        starts = np.cumsum([0] + [len(g) for g in usable])[:-1]
        sizes = np.asarray([len(g) for g in usable])
        for _ in range(training.steps):
            # the same number of pairs from each group drawn, whatever its size
            chosen = np.repeat(rng.choice(len(usable), size=min(training.groups_per_step, len(usable)),
                                          replace=False), training.pairs)
            i = torch.from_numpy(starts[chosen] + rng.integers(0, sizes[chosen]))
            j = torch.from_numpy(starts[chosen] + rng.integers(0, sizes[chosen]))
            ds, dt = _torch_score(net, x[i], present[i]) - _torch_score(net, x[j], present[j]), log_t[i] - log_t[j]
            weight = (dt.abs() / _NOISE).clamp(max=1.0)
            faster = (dt < 0).float()  # i ran faster than j: its score should be lower
            ranknet = torch.nn.functional.binary_cross_entropy_with_logits(-ds, faster, weight=weight)
            loss = ranknet + training.regression * ((ds - dt) ** 2).mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        layers = tuple((m.weight.detach().numpy().T.copy(), m.bias.detach().numpy().copy())
                       for m in net if isinstance(m, torch.nn.Linear))
        info = {**self.info, "groups": self.info.get("groups", 0) + len(usable),
                "programs": self.info.get("programs", 0) + sum(len(g) for g in usable),
                "specs": sorted(set(self.info.get("specs", [])) | {g.name for g in usable})}
        return replace(self, layers=layers, info=info)

    # -- files -------------------------------------------------------------------------------

    def save(self, path: Path) -> None:
        """Write the model to `path` (numpy's .npz), atomically."""
        arrays = {"mean": self.mean, "scale": self.scale}
        for k, (weight, bias) in enumerate(self.layers):
            arrays[f"w{k}"], arrays[f"b{k}"] = weight, bias
        meta = {"format": _FORMAT, "features": list(NAMES), "info": self.info}
        buffer = io.BytesIO()
        np.savez_compressed(buffer, meta=np.array(json.dumps(meta)), **arrays)
        write_atomically(path, buffer.getvalue())

    @classmethod
    def load(cls, path: Path) -> CostModel:
        """The model at `path`; CostModelError if it is not one, or reads other features than these."""
        try:
            with np.load(path, allow_pickle=False) as saved:
                meta = json.loads(str(saved["meta"]))
                count = sum(1 for k in saved.files if k.startswith("w"))
                layers = tuple((saved[f"w{k}"], saved[f"b{k}"]) for k in range(count))
                mean, scale = saved["mean"], saved["scale"]
        except (OSError, ValueError, KeyError) as error:
            raise CostModelError(f"{path} is not a cost model: {error}") from None
        if meta.get("format") != _FORMAT or meta.get("features") != list(NAMES):
            raise CostModelError(f"{path} was made for other features than these; retrain it "
                                 "(`dojo costmodel train`)")
        return cls(layers, mean, scale, meta.get("info", {}))


def _torch_net(layers: tuple[tuple[np.ndarray, np.ndarray], ...]):
    import torch

    modules: list[torch.nn.Module] = []
    for k, (weight, bias) in enumerate(layers):
        linear = torch.nn.Linear(*weight.shape)
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(weight.T.copy()))
            linear.bias.copy_(torch.from_numpy(bias))
        modules.append(linear)
        if k < len(layers) - 1:
            modules.append(torch.nn.ReLU())
    return torch.nn.Sequential(*modules)


def _scaling(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each input's mean and scale: the program's entries over the programs, an operation's over the
    operations present (whichever slot holds them), repeated for each slot."""
    shared = len(SHARED_NAMES)
    ops = op_rows(rows)
    present = ops[..., 0] > 0.5
    op_values = ops[present] if present.any() else np.zeros((1, len(OP_NAMES)))
    mean = np.concatenate([rows[:, :shared].mean(axis=0) if len(rows) else np.zeros(shared),
                           np.tile(op_values.mean(axis=0), SLOTS)])
    scale = np.concatenate([rows[:, :shared].std(axis=0) if len(rows) else np.ones(shared),
                            np.tile(op_values.std(axis=0), SLOTS)])
    return mean.astype(np.float32), np.maximum(scale, 1e-3).astype(np.float32)


def _inputs(scaled: np.ndarray) -> np.ndarray:
    """What the network reads of scaled feature rows (programs, WIDTH): for each slot, the operation's
    entries followed by the program's (programs, SLOTS, inputs)."""
    shared = len(SHARED_NAMES)
    program = np.broadcast_to(scaled[:, None, :shared], (len(scaled), SLOTS, shared))
    return np.concatenate([op_rows(scaled), program], axis=2).astype(np.float32)


def _present(raw: np.ndarray) -> np.ndarray:
    """Which slots of unscaled feature rows hold an operation (programs, SLOTS)."""
    return op_rows(np.asarray(raw))[..., 0] > 0.5


def _torch_score(net, x, present):
    """Scores of the network's inputs `x` (programs, SLOTS, inputs): the log of the sum over the
    operations present of exp(the network's output), as `CostModel.score_features` computes it."""
    import torch

    per_op = net(x).squeeze(-1).masked_fill(~present, _ABSENT)
    return torch.logsumexp(per_op, dim=1)
