# rocketcluster — the two commands a fresh machine needs are `make demo` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
# uv from PyPI, run as a module of the machine's Python so no PATH setup is needed.
UV := $(PYTHON) -m uv
RUN := $(UV) run --frozen
PYTEST_ARGS ?=

.PHONY: help setup demo test lint generated typecheck unit bench sim clean

help:
	@echo "make demo   - start the embedded local runtime and show it working"
	@echo "make test   - lint, type-check and run every test (installs what it needs)"
	@echo "make bench  - benchmarks; JSON in bench/results/, a table on stdout"
	@echo "make lint   - ruff lint and format check"
	@echo "make sim    - the Raft simulator over SEEDS seeds (default 10000) from START"

# Installs uv from PyPI when missing, then the locked workspace.
setup: .venv/.synced

.venv/.synced: uv.lock pyproject.toml */pyproject.toml
	@$(UV) --version >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet 'uv>=0.9'
	$(UV) sync --frozen --all-packages
	@touch $@

demo: setup
	$(RUN) rocketctl demo cluster

lint: setup
	$(RUN) ruff check .
	$(RUN) ruff format --check .

generated: setup
	$(RUN) python -m rocketcluster.api.protogen --check

typecheck: setup
	$(RUN) mypy api/src broker/src controller/src ctl/src api/tests broker/tests controller/tests ctl/tests e2e/local

unit: setup
	$(RUN) pytest $(PYTEST_ARGS)

test: lint generated typecheck unit

bench: setup
	$(RUN) rocketctl bench store --out bench/results
	$(RUN) rocketctl bench clients --out bench/results
	$(RUN) rocketctl bench controller --out bench/results
	$(RUN) rocketctl bench replication --out bench/results

SEEDS ?= 10000
START ?= 0
sim: setup
	$(RUN) python -m rocketcluster.controller.raft.sim --seeds $(SEEDS) --start $(START)

clean:
	rm -rf .venv .mypy_cache .ruff_cache .pytest_cache .hypothesis
