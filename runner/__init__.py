"""The benchmark runner: build, run, time and verify, locally (local.py) or through the HTTP service (service.py)."""
