# The two commands of the quick start: `make run` and `make test`. Both create or reuse .venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test bench install clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,fast,pipeline]'
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/cohort serve

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python bench/assignors.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .hypothesis
