"""Search and learning: passes, random sampling, simulated annealing and PerfLLM. Arrive with the search and agent issues."""
