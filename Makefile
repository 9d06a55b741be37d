# Two commands for a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONFIG ?= configs/gateway.yaml
REFEREE_PORT ?= 4001

.PHONY: run test lint typecheck pytest deps lock system-deps bench fuzz manifests clean

# requirements.lock pins every package (runtime + test extras) with its hashes; the project
# itself goes in editable, without resolving anything again. pip itself is pinned first: the
# pip a venv starts with (23.x) refuses a hash-pinned lock once a dependency's extra
# (litellm's httpx[http2]) has a newer release than the pin on the index.
PIP_VERSION := 26.3
$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q pip==$(PIP_VERSION)
	$(BIN)/pip install -q --require-hashes -r requirements.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

deps: $(STAMP)

# Re-resolve the locks from pyproject.toml's ranges (keeps the pinned versions it can: pass
# UPGRADE=--upgrade to take the newest allowed). requirements-runtime.lock (the image's) is
# the runtime part of requirements.lock, same versions.
UV_VERSION := 0.13.9
lock:
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q uv==$(UV_VERSION)
	$(BIN)/uv pip compile pyproject.toml --extra test --generate-hashes --universal \
	  --python-version 3.11 --no-header $(UPGRADE) -o requirements.lock
	$(BIN)/uv pip compile pyproject.toml --generate-hashes --universal \
	  --python-version 3.11 --no-header -c requirements.lock -o requirements-runtime.lock

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

# The wire fuzzer for longer (make test runs it with a few examples per route): a nightly run.
fuzz: deps
	FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-2000} $(BIN)/pytest -p no:xdist -q tests/fuzz

# deploy/kubernetes/ from the Helm chart (tests/test_deploy.py checks they agree).
manifests: deps
	$(BIN)/python deploy/render_manifests.py

bench: deps
	$(BIN)/python benchmarks/bench.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
