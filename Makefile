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

# redis-server backs the multi-replica session tests; chromium the inspector's browser tests.
system-deps:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "installing redis-server"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq redis-server >/dev/null; }
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing chromium"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

run: deps
	@echo "starting the referee (strict local upstream) on 127.0.0.1:$(REFEREE_PORT)"
	@$(BIN)/gateway referee --port $(REFEREE_PORT) & REF=$$!; \
	  trap 'kill $$REF 2>/dev/null' EXIT INT TERM; \
	  $(BIN)/gateway serve --config $(CONFIG)

lint: deps
	$(BIN)/ruff check gateway tests benchmarks

typecheck: deps
	$(BIN)/mypy --strict gateway

pytest: deps system-deps
	$(BIN)/pytest

test: lint typecheck pytest

bench: deps
	$(BIN)/python benchmarks/overhead.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
