# PerfDojo. `make demo` and `make test` set everything up on a fresh machine.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint bench clean

install: $(STAMP)

# Reinstalls only when the project's metadata changes; the package itself is
# installed editable, so source edits need no reinstall.
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

demo: install
	$(BIN)/python -m server.demo

test: install
	$(BIN)/python -m ruff check .
	$(BIN)/python -m pytest

lint: install
	$(BIN)/python -m ruff check .

bench: install
	$(BIN)/python bench/parse_speed.py
	$(BIN)/python bench/moves_speed.py
	$(BIN)/python bench/fuzz_moves.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .hypothesis
