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

SYSTEM_STAMP := $(VENV)/.system

$(SYSTEM_STAMP): scripts/bootstrap-system.sh scripts/install-mcp-test-servers.sh $(STAMP)
	bash scripts/bootstrap-system.sh
	touch $(SYSTEM_STAMP)

.PHONY: install system demo test lint types unit bench
install: $(STAMP)

system: $(SYSTEM_STAMP)

demo: $(STAMP)
	$(BIN)/heron demo

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

types: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP) $(SYSTEM_STAMP)
	$(BIN)/pytest -n auto -q -m "not conformance"
	$(BIN)/pytest -q -m conformance

test: lint types unit

# Figures beside their targets, the peers first (docs/performance.md); never part of `make test`.
# The kill -9 crash-point sweep runs first: no figure counts if durability gave way for it.
# Not figure scripts: modules the others import, the discovery catalogue's generator (it takes a
# command), and the tools that chose the discovery engine's knobs on the tune split.
BENCH_NOT_FIGURES := discovery_catalogue discovery_common webhook_request discovery_models \
	discovery_tune discovery_tune_fusion discovery_waits
BENCH_FIGURES := $(filter-out $(BENCH_NOT_FIGURES:%=bench/%.py),$(sort $(wildcard bench/*.py)))

bench: $(STAMP) $(SYSTEM_STAMP)
	uptime
	$(BIN)/pytest -q -p no:randomly tests/unit/test_bus_crash.py tests/unit/test_session_repair.py
	$(BIN)/python bench/peers/run.py
	status=0; for script in $(BENCH_FIGURES); do echo "== $$script"; \
	  $(BIN)/python $$script || { echo "== FAILED: $$script"; status=1; }; done; \
	uptime; exit $$status
