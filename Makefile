# The two Quick start commands: `make demo` and `make test`. Both bootstrap .venv themselves.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

.PHONY: install demo test lint types unit bench
install: $(STAMP)

demo: $(STAMP)
	$(BIN)/heron demo

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

types: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -n auto -q

test: lint types unit

bench: $(STAMP)
	$(BIN)/python bench/loop_overhead.py
	$(BIN)/python bench/fanout.py
