# Two commands set everything up: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test test-fast bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test]"
	touch $(STAMP)

## Install, then simulate the embedded 200-job Philly-driven trace with rollmux, solo-d and verl.
run: $(STAMP)
	$(BIN)/rollmux simulate

## Install, then run the whole test suite.
test: $(STAMP)
	command -v redis-server >/dev/null || (apt-get update -qq && apt-get install -y -qq redis-server)
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)
	$(BIN)/python -m pytest

## Install, then run the fast subset: the unit tests that are not slow (no Redis or Chromium needed).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "unit and not slow"

## Install, then run the benchmarks (see benchmarks/README.md).
bench: $(STAMP)
	$(BIN)/python benchmarks/placement_latency.py
	$(BIN)/python benchmarks/simulate_wall_time.py
	$(BIN)/python benchmarks/acceptance.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
