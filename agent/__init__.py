"""Search and learning: heuristic passes, random sampling, simulated annealing and PerfLLM (to come)."""
