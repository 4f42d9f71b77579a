"""The benchmark runner: build, run, time and verify, locally or through a remote service (to come)."""
