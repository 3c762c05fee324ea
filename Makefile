# The two commands of the quick start: `make run` and `make test`. Both create or reuse .venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
RUN_STAMP := $(VENV)/.run-stamp

.PHONY: run test quick bench install clean e2e-tools

# `make test` (what CI runs) runs the tests side by side on six pytest-xdist workers: about 8
# minutes on 2 cores (tests/conftest.py hands modules out slowest first and lets at most three
# `heavy` end-to-end tests run at once; docs/benchmarks.md, issue 37). `make test TEST_WORKERS=0`
# runs one test at a time (about 21 minutes).
TEST_WORKERS ?= 6

# `make test` installs everything (test tools, PySpark for the pipeline); `make run` only what the
# broker needs, unless everything is there already.
$(STAMP): pyproject.toml setup.py src/cohort/assignors/_uniform_native.c
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,fast,pipeline]'
	@touch $(STAMP) $(RUN_STAMP)

$(RUN_STAMP): pyproject.toml setup.py src/cohort/assignors/_uniform_native.c
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[fast]'
	@touch $(RUN_STAMP)

install: $(STAMP)

run: $(RUN_STAMP)
	$(BIN)/cohort serve

# Bytecode is written (the test modules' rewritten asserts and every server process's imports are
# compiled once, not in each of the workers and processes), whatever the environment says.
test: $(STAMP) e2e-tools
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

# The contributors' inner loop: unit and property tests, no end-to-end clients, Spark or upstreams.
QUICK_PATHS := tests/assignors tests/coordinator tests/log tests/protocol tests/broker tests/transactions \
	tests/security tests/server tests/test_cli_assign.py tests/test_import_cycles.py
QUICK_WORKERS ?= 2
quick: $(STAMP)
	$(BIN)/python -m pytest -n $(QUICK_WORKERS) -m "not e2e" $(QUICK_PATHS) $(PYTEST_ARGS)

# Clients the e2e tests run besides the Python ones: kcat (Debian) and kafkajs (npm, project-local);
# Debian's chromium and chromedriver for the dashboard test.
NODE_DIR := tests/e2e/node
e2e-tools: $(NODE_DIR)/node_modules/.installed-stamp
	@command -v kcat >/dev/null || apt-get install -y kcat || (apt-get update && apt-get install -y kcat)
	@(command -v chromium && command -v chromedriver) >/dev/null || apt-get install -y chromium chromium-driver \
		|| (apt-get update && apt-get install -y chromium chromium-driver)

$(NODE_DIR)/node_modules/.installed-stamp: $(NODE_DIR)/package.json
	cd $(NODE_DIR) && npm install --no-audit --no-fund
	@touch $@

bench: $(STAMP)
	$(BIN)/python bench/assignors.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .hypothesis $(NODE_DIR)/node_modules
