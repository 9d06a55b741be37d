# Two commands for a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONFIG ?= configs/gateway.yaml
REFEREE_PORT ?= 4001

.PHONY: run test lint typecheck pytest deps system-deps bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

deps: $(STAMP)

# redis-server backs the multi-replica session tests; chromium drives the inspector page tests.
system-deps:
	@missing=""; \
	  command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	  command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	  if [ -n "$$missing" ]; then \
	    echo "installing$$missing"; \
	    SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	  fi

run: deps
	@echo "starting the referee (strict local upstream) on 127.0.0.1:$(REFEREE_PORT)"
	@$(BIN)/gateway referee --port $(REFEREE_PORT) & REF=$$!; \
	  trap 'kill $$REF 2>/dev/null' EXIT INT TERM; \
	  $(BIN)/gateway serve --config $(CONFIG)

lint: deps
	$(BIN)/ruff check gateway tests benchmarks

typecheck: deps
	$(BIN)/mypy --strict gateway

# Suites run in parallel over the cores (pytest-xdist); slow ones are marked, not dropped.
pytest: deps system-deps
	$(BIN)/pytest -n $${PYTEST_WORKERS:-2}

test: lint typecheck pytest

bench: deps
	$(BIN)/python benchmarks/bench.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
