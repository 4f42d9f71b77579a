"""Search and learning: heuristic passes, random sampling, simulated annealing, and PerfLLM.

    evaluate.py   Evaluator: time a candidate once (cached by canonical text), log it, resume
    legal.py      the moves a search for a target considers
    passes/       naive, greedy, heuristic: a program in, moves out (section 4.1); the heuristic's
                  steps one module each (loop order, register tiles, fusion, accumulation,
                  vectorisation, row padding, parallelisation) over their shared state
    blocking.py   the order of a register-blocked reduction's blocks, from the host's caches
    search.py     random sampling and simulated annealing over the edges or heuristic graph (4.2)
    tune.py       tune(): the one entry point for `dojo tune` and the editor
    perfllm/      the learned agent: embeddings, Max-Q deep Q-learning, a gymnasium env (section 3)
    costmodel/    a learned cost model that ranks programs without running them: loop-structure
                  features against the machine's limits, a ranking network, data from evaluation logs
"""
