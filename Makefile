# rocketcluster — the two commands a fresh machine needs are `make demo` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
# uv from PyPI, run as a module of the machine's Python so no PATH setup is needed.
UV := $(PYTHON) -m uv
# The virtualenv's interpreter: Debian's python3.11 (bookworm's base system, package
# python3.11-minimal), built with profile-guided and link-time optimisation. Every
# broker, controller and test process runs on it: the same cluster start and workload
# take ~13 % less CPU than on a plain source build such as pyenv's default, and the
# images run it too. VENV_PYTHON=3.11 lets uv choose any 3.11 instead.
VENV_PYTHON ?= /usr/bin/python3.11
export UV_PYTHON := $(VENV_PYTHON)
RUN := $(UV) run --frozen
PYTEST_ARGS ?=
DIST ?= dist

# Python caches compiled modules (__pycache__, git-ignored) here even where the
# environment says not to: without the cache every broker, controller and rocketctl
# process the tests and the chaos suite start compiles each module it imports again
# (grpc, protobuf, pydantic, ours) — about 1 s of CPU per process, half the CPU of a
# test that starts clusters (e2e/local/test_catalogue.py: 35 s of CPU, 18 s cached).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help setup debs node-deps test-fresh images chart demo demo-operator test lint generated typecheck unit unit-parallel unit-alone chaos chaos-logged chaos-soak chaos-soak-operated chaos-deps bench sim clean

help:
	@echo "make demo   - start the embedded local runtime and show it working"
	@echo "              SECURE=1 runs it with TLS, keys and ACLs (examples/secure.yaml)"
	@echo "make demo-operator - the operator on an emulated Kubernetes: apply, roll, scale, delete"
	@echo "make test   - lint, type-check and run every test (installs what it needs)"
	@echo "make test-fresh - make test on a fresh clone of HEAD with an empty HOME and caches"
	@echo "make bench  - benchmarks; JSON in bench/results/, a table on stdout"
	@echo "make images - build the five container images (buildah); OCI archives in dist/images/"
	@echo "              REGISTRY=ghcr.io/you tags them there, PUSH=1 pushes, ONLY=broker,operator"
	@echo "make chart  - lint and package the Helm chart into dist/"
	@echo "make lint   - ruff lint and format check"
	@echo "make sim    - the Raft simulator over SEEDS seeds (default 10000) from START"
	@echo "make chaos  - fixed fault scenarios in network namespaces; e2e/chaos/reports/latest"
	@echo "make chaos-soak FAULTS=1000 SEED=1 - random faults, replayable by seed; e2e/chaos/results/"
	@echo "              RESUME=1 goes on with a stopped run (touch OUT/STOP or Ctrl-C stops one);"
	@echo "              DURATION=1800 runs for a time instead of a number of faults"
	@echo "make chaos-soak-operated FAULTS=1000 SEED=1 - the soak with the operator on the"
	@echo "              Kubernetes emulator: its leader killed and stalled, rolls under faults"

# Installs uv from PyPI when missing, then the locked workspace.
setup: .venv/.synced

.venv/.synced: uv.lock pyproject.toml */pyproject.toml
	@$(UV) --version >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet 'uv>=0.9'
	@case "$(VENV_PYTHON)" in /usr/bin/*) [ -x "$(VENV_PYTHON)" ] || { \
	  echo "installing $(notdir $(VENV_PYTHON)) (apt-get)"; export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q --no-install-recommends $(notdir $(VENV_PYTHON)) >/dev/null 2>&1 \
	    || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends $(notdir $(VENV_PYTHON)) >/dev/null; }; };; esac
	$(UV) sync --frozen --all-packages
	@touch $@

# SECURE=1: the same story on examples/secure.yaml (TLS, AK/SK signatures, ACLs).
demo: setup
	$(RUN) rocketctl demo cluster$(if $(filter 1,$(SECURE)), -f examples/secure.yaml)

# The real operator, controllers and brokers against the API server emulator and the
# pod realiser (e2e/), narrated: apply -> Ready -> roll under load -> scale -> delete.
demo-operator: setup
	$(RUN) python -m rocketcluster.e2e.k8s.demo

lint: setup
	$(RUN) ruff check .
	$(RUN) ruff format --check .

generated: setup
	$(RUN) python -m rocketcluster.api.protogen --check
	$(RUN) python -m rocketcluster.api.crdgen --check
	$(RUN) python -m rocketcluster.operator.monitoring.generate --check

typecheck: setup
	$(RUN) mypy api/src broker/src console/src controller/src ctl/src operator/src e2e/src spark-jobs/src \
	  api/tests broker/tests console/tests controller/tests ctl/tests operator/tests e2e/tests e2e/local e2e/k8s e2e/monitoring spark-jobs/tests

# Three pytest-xdist workers on two cores: while one waits on a failover, a roll or a
# long poll, the others compute (e2e/src/rocketcluster/e2e/test_order.py: slow files
# start first, the Spark tests share one worker's session). With two, the cores stood
# idle a fifth of the time; a fresh clone's parallel step took 19:20 with two and
# 17:20 with three, the chaos suite beside both. Tests marked `alone` compare rates
# measured one after the other, which a neighbour's changing load would skew: they run
# after, in one process, beside the Raft simulator's further seeds, a load that does
# not change (scripts/alone-beside-sim.sh). TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 3
unit: unit-parallel
	@$(MAKE) --no-print-directory unit-alone

unit-parallel: setup debs node-deps
ifeq ($(TEST_WORKERS),0)
	$(RUN) pytest $(PYTEST_ARGS)
else
	$(RUN) pytest -n $(TEST_WORKERS) --dist loadfile -m "not alone" $(PYTEST_ARGS)
endif

# (Nothing to do with TEST_WORKERS=0: unit-parallel ran the alone tests too.)
unit-alone: setup debs node-deps
ifneq ($(TEST_WORKERS),0)
	$(RUN) scripts/alone-beside-sim.sh $(PYTEST_ARGS)
endif

# Debian packages the tests use, installed when missing: buildah and mmdebstrap build
# the images, docker-registry is the registry the image test pushes to; prometheus
# brings promtool and the server the monitoring suite scrapes with; chromium is the
# headless browser the health report is opened in (Playwright drives it: its own
# browser download is not reachable); nats-server is the JetStream R3 cluster
# `rocketctl bench cpu` measures beside ours.
DEBS := buildah mmdebstrap docker-registry prometheus chromium nats-server
debs:
	@missing=""; for p in $(DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing (apt-get)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q --no-install-recommends $$missing >/dev/null 2>&1 \
	    || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends $$missing >/dev/null; }; \
	fi

# The official Node.js client the e2e tests drive and axe-core, the accessibility
# checker the console's browser tests inject (e2e/node): exactly what its lock file
# names, from the npm registry; Node.js and npm from Debian when missing.
NODE_DIR := e2e/node
node-deps: $(NODE_DIR)/node_modules/.installed

$(NODE_DIR)/node_modules/.installed: $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "installing nodejs npm (apt-get)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q --no-install-recommends nodejs npm >/dev/null 2>&1 \
	    || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends nodejs npm >/dev/null; }; }
	npm ci --prefix $(NODE_DIR) --no-audit --no-fund --ignore-scripts --loglevel=error
	@touch $@

# The static checks and the chaos suite run beside the parallel tests: they fill the
# cores the tests leave idle while they wait. The chaos verdict does not hang on speed
# (nothing lost, duplicated or out of order; every group drained within 10 s of a
# fault healing, against ~2 s seen; healthy within 60 s), and a loaded machine is
# where a cluster lives anyway. Its log goes to e2e/chaos/reports/latest.log and its
# summary to the terminal when it ends. The tests marked `alone` come last, after both.
# Set-up happens first, once, so parallel jobs never install at the same time.
test: setup debs node-deps chaos-deps
	@$(MAKE) --no-print-directory -j5 lint generated typecheck unit-parallel chaos-logged
	@$(MAKE) --no-print-directory unit-alone

# `make test` on a fresh clone of HEAD with an empty HOME, caches and buildah storage:
# what CI and a new machine see (scripts/test-fresh.sh). Run it before every stop.
test-fresh:
	@scripts/test-fresh.sh

# The chaos suite (e2e/chaos/README.md). Network faults need iptables: installed here
# when missing; a run whose network faults could not run fails (unless --loopback).
chaos-deps:
	@command -v iptables >/dev/null 2>&1 \
	  || apt-get install -y -q iptables >/dev/null 2>&1 \
	  || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q iptables >/dev/null 2>&1; } \
	  || { echo "iptables could not be installed (apt-get install iptables): the chaos suite's network faults need it"; exit 1; }
	@command -v mkfs.ext4 >/dev/null 2>&1 \
	  || apt-get install -y -q e2fsprogs >/dev/null 2>&1 \
	  || { echo "mkfs.ext4 could not be installed (apt-get install e2fsprogs): the chaos suite's disk faults need it"; exit 1; }

CHAOS_FIXED := python -m rocketcluster.ctl.chaos.run --scenarios fixed --seed 1 \
  --out e2e/chaos/reports/latest
chaos: setup chaos-deps
	$(RUN) $(CHAOS_FIXED)

# `make chaos` with its log in a file (beside other output in `make test`): the
# summary when it ends, the last 60 lines when it fails before one.
CHAOS_LOG := e2e/chaos/reports/latest.log
chaos-logged: setup chaos-deps
	@mkdir -p $(dir $(CHAOS_LOG)); echo "chaos: fixed scenarios started, log in $(CHAOS_LOG)"
	@if $(RUN) $(CHAOS_FIXED) >$(CHAOS_LOG) 2>&1; then status=0; else status=$$?; fi; \
	  if grep -q '^chaos fixed ' $(CHAOS_LOG); then sed -n '/^chaos fixed /,$$p' $(CHAOS_LOG); \
	  else tail -n 60 $(CHAOS_LOG); fi; exit $$status

# A soak: FAULTS faults (or DURATION seconds of them), its report, state and disks in
# OUT; RESUME=1 goes on with a run stopped there. Reports of record are committed
# from e2e/chaos/results/ (summary, report, timeline, state; histories and data stay
# out of git).
FAULTS ?= 1000
SEED ?= 1
DURATION ?=
SOAK_LENGTH = $(if $(DURATION),--duration $(DURATION),--faults $(FAULTS))
OUT ?= e2e/chaos/results/soak-seed$(SEED)-$(if $(DURATION),$(DURATION)s,$(FAULTS)faults)
# A resumed run keeps its own seed and length (state.json): only OUT is passed.
chaos-soak: setup chaos-deps
	$(RUN) python -m rocketcluster.ctl.chaos.run --scenarios soak --out $(OUT) \
	  $(if $(RESUME),--resume,--seed $(SEED) $(SOAK_LENGTH))

# The soak where the operator runs the cluster on the Kubernetes emulator (its pods real
# processes): pod and operator kills and pauses, rolls with the operator killed under
# them. Its cluster lives one session (each ends with its own audit); RESUME=1 goes on.
OPERATED_OUT ?= e2e/chaos/results/soak-operated-seed$(SEED)-$(if $(DURATION),$(DURATION)s,$(FAULTS)faults)
chaos-soak-operated: setup chaos-deps
	$(RUN) python -m rocketcluster.e2e.k8s.chaos_soak --scenarios soak --out $(OPERATED_OUT) \
	  $(if $(RESUME),--resume,--seed $(SEED) $(SOAK_LENGTH))

bench: setup debs
	$(RUN) rocketctl bench cpu --out bench/results --profile
	$(RUN) rocketctl bench store --out bench/results
	$(RUN) rocketctl bench tier --out bench/results
	$(RUN) rocketctl bench clients --out bench/results
	$(RUN) rocketctl bench controller --out bench/results
	$(RUN) rocketctl bench console --out bench/results
	$(RUN) rocketctl bench replication --out bench/results
	$(RUN) rocketctl bench pop-rebuild --out bench/results
	$(RUN) rocketctl bench drain --out bench/results
	$(RUN) rocketctl bench switchover --out bench/results
	$(RUN) rocketctl bench security --out bench/results
	$(RUN) rocketctl bench spark --out bench/results
	$(RUN) rocketctl bench scale --out bench/results
	$(RUN) rocketctl bench front-channel --out bench/results
	$(RUN) python -m rocketcluster.e2e.k8s.catalogue_bench --out bench/results

# The container images (images/README.md): a Debian base made with mmdebstrap, the
# locked wheels fetched on the host, `buildah bud` offline; cached when nothing changed.
IMAGES_OUT ?= $(DIST)/images
REGISTRY ?=
PUSH ?=
ONLY ?=
images: setup debs
	$(RUN) python -m rocketcluster.e2e.images build --out $(IMAGES_OUT) \
	  $(if $(ONLY),--only $(ONLY)) $(if $(REGISTRY),--registry $(REGISTRY)) \
	  $(if $(filter 1 yes true,$(PUSH)),--push)

# The Helm chart, linted and packaged: dist/rocketcluster-operator-<version>.tgz. helm
# from PATH, else the one the tests use (from a locked dev dependency, unpacked into
# the virtualenv: e2e/src/rocketcluster/e2e/kube/binaries.py).
chart: setup
	$(RUN) python -m rocketcluster.api.crdgen --check
	@helm=$$(command -v helm || $(RUN) python -c 'from rocketcluster.e2e.kube.binaries import ensure_binaries; print(ensure_binaries().helm)'); \
	  "$$helm" lint --strict charts/rocketcluster-operator; \
	  "$$helm" package charts/rocketcluster-operator --destination $(DIST)

SEEDS ?= 10000
START ?= 0
sim: setup
	$(RUN) python -m rocketcluster.controller.raft.sim --seeds $(SEEDS) --start $(START)

clean:
	rm -rf .venv .mypy_cache .ruff_cache .pytest_cache .hypothesis $(NODE_DIR)/node_modules
