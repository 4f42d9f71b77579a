"""The learned cost model: it ranks programs without running them (docs/agent.md).

    features.py   a program's loop structure and derivation's moves, against the machine's limits
    model.py      CostModel: a small ranking network (torch to train, numpy to score), its file
    data.py       groups of measured programs, rebuilt from the evaluation logs any command writes
    metrics.py    TenSet's pairwise accuracy and top-k recall
    rank.py       a program's moves rated by the model (the editor's quick-fixes, `dojo costmodel moves`)
"""
