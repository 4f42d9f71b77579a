"""Search and learning: heuristic passes, random sampling, simulated annealing (PerfLLM to come).

    evaluate.py   Evaluator: time a candidate once (cached by canonical text), log it, resume
    passes.py     naive, greedy, heuristic: a program in, moves out (section 4.1)
    search.py     random sampling and simulated annealing over the edges or heuristic graph (4.2)
    tune.py       tune(): the one entry point for `dojo tune` and the editor
"""
