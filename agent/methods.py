"""The names of the ways to tune, the one list that `dojo tune`, `dojo library build` and the
editor offer. A module of names only, so that a front door can list them without loading the
passes or the searches (the agent must work with agent/passes absent)."""

PASSES = ("naive", "greedy", "heuristic")  # agent/passes: a program in, moves out
SEARCHES = ("random", "sa")  # agent/search.py: random sampling, simulated annealing
AGENT = "agent"  # the learned agent (agent/perfllm)
# Every method, in the order a menu offers them: the first is the one to try first.
METHODS = ("heuristic", "sa", "random", "greedy", "naive", AGENT)

# The graphs a search walks. The first, the heuristic graph (whole candidate sequences that the
# passes' heuristics propose), is what a search walks when not told: far better within a small
# budget (the paper's Figure 13). "edges", one legal move at a time, is the uninformed game, for
# research and for the agent, which always plays it.
GRAPHS = ("heuristic", "edges")
GRAPH = GRAPHS[0]
# `dojo model tune`'s default method: on each kernel, a race between these (libgen/onnx/race.py)
AUTO = "auto"
CONTENDERS = ("sa", AGENT)
# What needs nothing but a budget: the editor's `dojo.tune` offers these (the agent has commands of its own).
TUNE_METHODS = tuple(m for m in METHODS if m != AGENT)
