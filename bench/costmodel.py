"""How well the learned cost model (agent/costmodel) ranks programs of kernels it never saw.

    python bench/costmodel.py [--logs DIR ...] [--transfer DIR ...] [--extra DIR ...] [--embeddings 20]
                              [--out bench/results/costmodel.md]

The groups are the evaluation logs (`agent.costmodel.data`: one log = one spec, target, machine and
run; programs that failed left out), by default every log in the repository. They are split by spec
into `--folds` parts; a model is trained on all but one part and scored on that one, so every group
is scored by a model that never saw its spec (nor, with `--by kernel`, any shape of its kernel).
Reported, as TenSet reports them, as means over groups: pairwise accuracy (of the pairs whose times
differ, the share ordered right), top-1 and top-5 recall (whether the fastest program is the one, or
among the five, the model puts first). Beside the model, on the same splits:

- chance: the expected figures of a random order (top-k recall = k / programs);
- the roofline of the loop structure alone: the feature `program.bound_s` (each operation's slowest
  of its flops at the lanes and cores its scopes use and its traffic between the cache levels and
  from memory at their measured bandwidths);
- XGBoost (rank:pairwise) on the same features, the model class of TenSet's and Ansor's cost models.
- the cost model blind to the derivation's moves (`no-moves`: their entries zeroed, in training and
  scoring, with the `--extra` logs when there are): whether reading the moves as a sequence adds to
  what the loop structure says.

`--transfer` logs (e.g. a library built on another machine or from real models) are scored by a model
trained on every `--logs` group. `--extra` logs are training data only, never scored: the cost
model is cross-validated and transferred again with them added to every training set, so that the
two rows say what they add to the ranking of kernels outside them (`make agent`'s random kernels of
the ONNX catalogue, `dojo costmodel kernels`). `--embeddings N` asks whether the agent's text embeddings
(agent/perfllm/embed.py, all-MiniLM-L6-v2) add to the ranking: on at most N programs of each group,
the model is trained with the features alone and with the features plus the embedding reduced to 16
principal components, on the same splits.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.costmodel.data import Group, read_groups, rebuilt  # noqa: E402
from agent.costmodel.features import NAMES, Host  # noqa: E402
from agent.costmodel.metrics import Ranking, ranking  # noqa: E402
from agent.costmodel.model import CostModel, Training  # noqa: E402
from bench.sections import machine, write_section  # noqa: E402
from codegen.targets import get_target  # noqa: E402
from runner.roofline import machine_limits  # noqa: E402

LOGS = ("bench/results/agent_heldout_runs", "bench/results/convergence_runs/logs", "bench/results/tuned/logs")
RANKERS = ("model", "no-moves", "xgboost", "roofline")
_MOVE_ENTRIES = [i for i, name in enumerate(NAMES) if name.startswith("moves.") or name == "program.log_moves"]


def folds(groups: list[Group], by: str, count: int, seed: int) -> list[set[str]]:
    """The held-out keys of each fold: specs (or kernel names), shuffled and dealt out."""
    keys = sorted({_key(g, by) for g in groups})
    order = np.random.default_rng(seed).permutation(keys)
    return [set(order[k::count]) for k in range(count)]


def _key(group: Group, by: str) -> str:
    return group.spec_hash if by == "spec" else group.name


def cross_validate(groups: list[Group], train, by: str, count: int, seed: int) -> Ranking:
    """Every group scored by the model `train` made of the folds that do not hold its key."""
    scored = []
    for held in folds(groups, by, count, seed):
        score = train([g for g in groups if _key(g, by) not in held])
        scored += [(score(g.features), g.times_s) for g in groups if _key(g, by) in held]
    return ranking(scored)


def without_moves(features: np.ndarray) -> np.ndarray:
    """`features` with the entries that read the derivation's moves zeroed: the loop structure alone."""
    blind = features.copy()
    blind[..., _MOVE_ENTRIES] = 0
    return blind


def mlp(steps: int, seed: int, extra: list[Group] = (), moves: bool = True):
    """The cost model's training; without `moves`, blind to the derivation (`without_moves`)."""
    def train(groups: list[Group]):
        training = [*groups, *extra]
        if moves:
            return CostModel.train(training, Training(steps=steps, seed=seed)).score_features
        model = CostModel.train([replace(g, features=without_moves(g.features)) for g in training],
                                Training(steps=steps, seed=seed))
        return lambda features: model.score_features(without_moves(features))
    return train


def xgboost(groups: list[Group]):
    import xgboost as xgb

    x = np.concatenate([g.features for g in groups])
    # relevance: a program's rank within its group, the fastest highest
    y = np.concatenate([len(g) - np.argsort(np.argsort(g.times_s)) for g in groups])
    qid = np.concatenate([np.full(len(g), k) for k, g in enumerate(groups)])
    booster = xgb.train({"objective": "rank:pairwise", "max_depth": 6, "eta": 0.1, "nthread": 1},
                        xgb.DMatrix(x, label=y, qid=qid), 300)
    return lambda f: -booster.predict(xgb.DMatrix(f))


def roofline(groups: list[Group]):
    column = NAMES.index("program.bound_s")
    return lambda f: f[:, column].astype(np.float64)


def chance(groups: list[Group]) -> Ranking:
    return Ranking(0.5, float(np.mean([1 / len(g) for g in groups])),
                   float(np.mean([min(1.0, 5 / len(g)) for g in groups])), len(groups))


def embedded(groups: list[Group], most: int, seed: int) -> tuple[list[Group], np.ndarray]:
    """At most `most` programs of each group, and each one's text embedding (rebuilt from its moves),
    reduced to 16 principal components over all of them."""
    from agent.perfllm.embed import shared

    rng = np.random.default_rng(seed)
    kept = []
    for group in groups:
        chosen = np.sort(rng.choice(len(group), size=min(most, len(group)), replace=False))
        kept.append(replace(group, moves=tuple(group.moves[i] for i in chosen), features=group.features[chosen],
                            times_s=group.times_s[chosen]))
    texts = [program for group in kept for program in rebuilt(group)]
    vectors = shared().embed_many(texts).numpy()
    centred = vectors - vectors.mean(axis=0)
    _, _, components = np.linalg.svd(centred, full_matrices=False)
    return kept, centred @ components[:16].T


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--logs", nargs="+", default=list(LOGS), metavar="DIR")
    parser.add_argument("--transfer", nargs="*", default=[], metavar="DIR")
    parser.add_argument("--extra", nargs="*", default=[], metavar="DIR", help="logs to train on, never scored")
    parser.add_argument("--folds", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=2, help="splits (and training seeds) to average over")
    parser.add_argument("--steps", type=int, default=Training().steps)
    parser.add_argument("--embeddings", type=int, default=0, metavar="N")
    parser.add_argument("--by", nargs="*", choices=("spec", "kernel"), default=["spec", "kernel"],
                        help="what the cross-validation holds out (nothing: the `--transfer` rows alone)")
    parser.add_argument("--rankers", nargs="+", choices=RANKERS, default=list(RANKERS),
                        help="the rankers to cross-validate (the cost model trains for a minute or two a fold)")
    parser.add_argument("--out", default="bench/results/costmodel.md")
    args = parser.parse_args(argv)

    host = Host.of(machine_limits(), get_target("native"))
    started = time.monotonic()
    groups = read_groups([Path(p) for p in args.logs], host)
    read_s = time.monotonic() - started
    programs = sum(len(g) for g in groups)
    extra = read_groups([Path(p) for p in args.extra], host)
    with_extra = f"cost model, trained with the {len(extra)} `--extra` logs too"
    rows = []
    rankers = {"model": [("cost model (MLP, RankNet)", lambda seed: mlp(args.steps, seed)),
                         *([(with_extra, lambda seed: mlp(args.steps, seed, extra))] if extra else [])],
               "no-moves": [("cost model blind to the moves (their entries zeroed)"
                             + (", with the `--extra` logs" if extra else ""),
                             lambda seed: mlp(args.steps, seed, extra, moves=False))],
               "xgboost": [("XGBoost rank:pairwise, same features", lambda seed: xgboost)],
               "roofline": [("roofline of the loop structure (`program.bound_s`)", lambda seed: roofline)]}
    for by in args.by:
        for label, make in (ranker for name in args.rankers for ranker in rankers[name]):
            results = [cross_validate(groups, make(seed), by, args.folds, seed) for seed in range(args.seeds)]
            rows.append((by, label, *(float(np.mean([getattr(r, f) for r in results]))
                                      for f in ("pairwise", "top1", "top5"))))
            print(rows[-1], flush=True)
        rows.append((by, "chance", *(getattr(chance(groups), f) for f in ("pairwise", "top1", "top5"))))
    lines = [
        "# The cost model: ranking programs of kernels it never saw",
        "",
        f"`{shlex.join(['python', 'bench/costmodel.py', *(sys.argv[1:] if argv is None else argv)])}`. "
        f"Machine: {machine()}; features scaled by its limits "
        f"(`dojo machine`: {host.peak_flops / 1e9:.0f} GFLOP/s, {host.bandwidth_Bps / 1e9:.1f} GB/s, "
        f"{host.cores} cores, {host.vector_bytes}-byte vectors, L1d {host.l1d >> 10} KiB, L2 {host.l2 >> 20} MiB).",
        "",
        f"Data: {len(groups)} evaluation logs ({', '.join(args.logs)}), {programs:,} programs that ran, "
        f"{len({g.spec_hash for g in groups})} specs of {len({g.name for g in groups})} kernels; read and "
        f"featurised in {read_s:.0f} s ({1e3 * read_s / programs:.1f} ms a program, replaying its moves "
        "included). A log is one run on one machine (those in the repository were measured on a Zen 4, "
        "AMD EPYC with AVX-512, 2 cores; `make agent`'s in build/agent on the machine that ran it). Held out by spec: "
        f"{args.folds} folds of the specs; by kernel: {args.folds} folds of the kernels' names (no shape "
        f"of a held-out kernel seen). Means over groups, then over {args.seeds} splits.",
        "",
        "| held out by | ranker | pairwise accuracy | top-1 recall | top-5 recall |",
        "|---|---|---|---|---|",
        *(f"| {by} | {label} | {p:.3f} | {t1:.3f} | {t5:.3f} |" for by, label, p, t1, t5 in rows),
        "| (reference) | TenSet's XGBoost, TenSet CPU | 0.85 | 0.83 | 0.91 |",
        "",
    ]
    if extra:
        lines += [f"The `--extra` logs ({', '.join(args.extra)}): {len(extra)} logs, {sum(len(g) for g in extra):,} "
                  f"programs of {len({g.name for g in extra})} kernels, only ever trained on.", ""]
    if args.transfer:
        transfer = read_groups([Path(p) for p in args.transfer], host)
        lines += [f"Scored on {len(transfer)} other logs ({', '.join(args.transfer)}; "
                  f"{sum(len(g) for g in transfer):,} programs, {len({g.name for g in transfer})} kernels, a median "
                  f"of {int(np.median([len(g) for g in transfer]))} programs a log; chance top-1 "
                  f"{chance(transfer).top1:.3f}), by a model trained on:", "",
                  "| trained on | pairwise accuracy | top-1 recall | top-5 recall |", "|---|---|---|---|"]
        trainings = [("every group above", lambda seed: mlp(args.steps, seed))]
        if extra:
            trainings.append(("every group above and the `--extra` logs", lambda seed: mlp(args.steps, seed, extra)))
        if "no-moves" in args.rankers:
            trainings.append(("the same, blind to the moves (their entries zeroed)",
                              lambda seed: mlp(args.steps, seed, extra, moves=False)))
        for label, make in trainings:
            results = [ranking([(score(g.features), g.times_s) for g in transfer])
                       for score in (make(seed)(groups) for seed in range(args.seeds))]
            lines.append(f"| {label} | " + " | ".join(f"{np.mean([getattr(r, f) for r in results]):.3f}"
                                                      for f in ("pairwise", "top1", "top5")) + " |")
        bound = ranking([(roofline(transfer)(g.features), g.times_s) for g in transfer])
        lines += [f"| nothing: the roofline of the loop structure (`program.bound_s`) | {bound.pairwise:.3f} | "
                  f"{bound.top1:.3f} | {bound.top5:.3f} |", ""]
    if args.embeddings:
        kept, vectors = embedded(groups, args.embeddings, 0)
        offsets = np.cumsum([0] + [len(g) for g in kept])
        plus = [replace(g, features=np.concatenate([g.features, vectors[a:b].astype(np.float32)], axis=1))
                for g, a, b in zip(kept, offsets, offsets[1:], strict=False)]
        figures = {name: [cross_validate(sample, mlp(args.steps, s), "spec", args.folds, s) for s in range(args.seeds)]
                   for name, sample in (("alone", kept), ("plus", plus))}
        alone, both = ({f: float(np.mean([getattr(r, f) for r in figures[name]])) for f in ("pairwise", "top1", "top5")}
                       for name in ("alone", "plus"))
        lines += ["Do the agent's text embeddings add to the ranking? On "
                  f"{sum(len(g) for g in kept):,} programs (at most {args.embeddings} of each group), held out by "
                  "spec, the model with the features alone and with the embedding's 16 principal components "
                  "(over these programs) as 16 more inputs:", "",
                  "| inputs | pairwise accuracy | top-1 recall | top-5 recall |", "|---|---|---|---|",
                  *(f"| {label} | {r['pairwise']:.3f} | {r['top1']:.3f} | {r['top5']:.3f} |"
                    for label, r in (("features", alone), ("features + embedding", both))), ""]
    write_section(Path(args.out), "\n".join(lines))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
