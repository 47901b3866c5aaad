# Two commands set everything up: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
# The whole suite runs its modules side by side (pytest-xdist): about 8 instead of 13 minutes on 2 cores.
# A module stays on one worker, so its fixtures are built once.
TESTFLAGS ?= -n auto --maxprocesses 4 --dist loadfile
BIN    := $(VENV)/bin
# Separate stamps: `make run` installs the package alone; `make test` adds the test extra.
RUN_STAMP  := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test test-fast bench clean test-explain

$(BIN)/python:
	@echo "make: creating the virtual environment $(VENV)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# What the simulation needs: the package and its dependencies (no torch).
$(RUN_STAMP): pyproject.toml | $(BIN)/python
	@echo "make: installing rollmux into $(VENV) (pip install -e .: what the simulation needs, no extras)"
	$(BIN)/pip install --quiet -e .
	touch $(RUN_STAMP)

# What the tests need: the test extra (pytest, hypothesis, and the demo and trl extras: torch, TRL).
$(TEST_STAMP): pyproject.toml | $(BIN)/python
	@echo "make: installing rollmux with the test extra into $(VENV) (pip install -e '.[test]': about 2.2 GB)"
	$(BIN)/pip install --quiet -e ".[test]"
	touch $(TEST_STAMP)

## Install the package alone, then simulate the embedded 200-job Philly-driven trace with rollmux, solo-d and verl.
run: $(RUN_STAMP)
	@echo "make: rollmux simulate (the embedded trace; about a minute)"
	$(BIN)/rollmux simulate

test-explain:
	@echo "make test installs, before it runs the whole suite:"
	@echo "  - the test extra (pip install -e '.[test]' into $(VENV), about 2.2 GB): pytest, pytest-xdist and hypothesis, and"
	@echo "    torch, TRL and veRL, because the job, adapter and weight-sync tests run real models;"
	@echo "  - redis-server (the Redis journal tests), chromium (the dashboard tests) and kubectl (renders"
	@echo "    deploy/k8s), with apt-get where they are missing: that needs root (run make test as root, or"
	@echo "    install them first)."
	@echo "  make run needs none of this; make test-fast runs the unit tests without Redis or Chromium."

## Install the test extra, redis-server and chromium (apt-get: root), then run the whole test suite.
test: test-explain $(TEST_STAMP)
	@echo "make: checking for redis-server and chromium"
	@command -v redis-server >/dev/null || { [ "$$(id -u)" = 0 ] || { echo "make: redis-server is missing and apt-get needs root: run make test as root, or apt-get install redis-server"; exit 2; }; echo "make: apt-get install redis-server"; apt-get update -qq && apt-get install -y -qq redis-server; }
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] || { echo "make: chromium is missing and apt-get needs root: run make test as root, or apt-get install chromium"; exit 2; }; echo "make: apt-get install chromium"; apt-get update -qq && apt-get install -y -qq chromium; }
	@command -v kubectl >/dev/null || { [ "$$(id -u)" = 0 ] || { echo "make: kubectl (kubectl kustomize renders deploy/k8s) is missing and apt-get needs root: run make test as root, or apt-get install kubernetes-client"; exit 2; }; echo "make: apt-get install kubernetes-client (kubectl, to render deploy/k8s)"; apt-get update -qq && apt-get install -y -qq kubernetes-client; }
	@echo "make: running the whole test suite (pytest, a module per worker on up to 4 cores: TESTFLAGS=-n0 runs it in one)"
	$(BIN)/python -m pytest $(TESTFLAGS)

## Install, then run the fast subset: the unit tests that are not slow (no Redis or Chromium needed).
test-fast: $(TEST_STAMP)
	@echo "make: running the unit tests that are not slow"
	$(BIN)/python -m pytest -m "unit and not slow" $(TESTFLAGS)

## Install, then run the benchmarks (see benchmarks/README.md).
bench: $(TEST_STAMP)
	@echo "make: running the benchmarks"
	$(BIN)/python benchmarks/placement_latency.py
	$(BIN)/python benchmarks/simulate_wall_time.py
	$(BIN)/python benchmarks/acceptance.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
