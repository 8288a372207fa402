# brokerbench: `make run` runs the quick suite on the local stack, `make test` runs every test.
# Both install what is missing first (idempotent): `make setup` only what the quick suite (SUITE) runs on (Kafka
# KRaft, Redis, DynamoDB Local, the Python and Node parts); a broker it leaves out (Pulsar, ZooKeeper-mode Kafka)
# is installed on its first use, with a progress line. `make setup-all` installs every broker up front, and so
# does `make test`'s install step (--with-browser), with the tests' own tools.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SUITE ?= quick

.PHONY: setup setup-all run test unit integration reliability performance lambda-lock up down clean

setup: $(VENV)/.installed node_modules/.installed
	@$(BIN)/python -m brokerbench.local.install --suite $(SUITE)

setup-all: $(VENV)/.installed node_modules/.installed
	@$(BIN)/python -m brokerbench.local.install --all

# Node tools: the local ASL interpreter and the ASL validator (versions pinned in package-lock.json).
node_modules/.installed: package.json package-lock.json $(VENV)/.installed
	@command -v npm >/dev/null || $(BIN)/python -c "from brokerbench.local.install import install_commands as i; i(['node', 'npm'])"
	npm ci --silent --no-audit --no-fund
	@touch $@

# The packages are installed by uv (its version pinned in requirements-dev.txt, itself installed by pip): the same
# pins from PyPI, downloaded and installed in parallel (about 20 s here with an empty cache, where pip took minutes).
UV_PIN = $(shell grep -m1 '^uv==' requirements-dev.txt)
$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check $(UV_PIN)
	$(BIN)/uv pip install -q --python $(BIN)/python -r requirements-dev.txt
	$(BIN)/uv pip install -q --python $(BIN)/python --no-deps -e .
	@touch $@

run: setup
	$(BIN)/brokerbench run --suite $(SUITE)

# Three pytest-xdist workers by default (WORKERS=1: one process): a module whole on one (`--dist loadfile`), the
# longest first (tests/conftest.py), each worker with its own brokers on free loopback ports. With the tests' JVMs on
# C1 much of the suite waits (heartbeat windows, a schedule's minute, cells' schedules), so three workers overlap it
# on 2 cores (docs/performance.md). PYTEST_ARGS go to pytest after these (a --junitxml file, -x, a -k expression).
WORKERS ?= 3
XDIST := $(if $(filter-out 1,$(WORKERS)),-n $(WORKERS) --dist loadfile --no-loadscope-reorder)
test: setup
	@$(BIN)/python -m brokerbench.local.install --with-browser
	$(BIN)/pytest -q --durations=40 $(XDIST) $(PYTEST_ARGS)

# The fast tier: tests/unit needs no service (the in-memory event store stands in for DynamoDB), on two workers
# (a module whole on one). `pytest -m "not slow"` runs everything but the slow tier (tests/conftest.py names its
# modules). Its wall time is measured in docs/performance.md.
unit: setup
	$(BIN)/pytest -q -n 2 --dist loadfile tests/unit

integration: setup
	$(BIN)/pytest -q tests/integration

# docs/RELIABILITY.md: the fault and bad-input tests against the real local stack, and what they observed.
reliability: setup
	$(BIN)/python bench/reliability.py

# docs/performance.md from bench/results/*.json and bench/performance/*.md (stdlib only); --check: differs? exit 1.
performance:
	$(PYTHON) bench/performance.py

# requirements-lambda.txt, the Lambda layer's lock (hashes, CPython 3.12 manylinux x86_64), from requirements.txt
# (cdk/bundling.py; needs PyPI). Run it after changing requirements.txt: tests/unit/test_lambda_lock.py says when.
lambda-lock: $(VENV)/.installed
	$(BIN)/python -c "from cdk.bundling import write_lock; write_lock()"

up: setup
	$(BIN)/brokerbench local up

down:
	$(BIN)/brokerbench local down

clean: down
	rm -rf .brokerbench reports
