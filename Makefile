# Every target sets up what it needs: `make test` alone passes on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test lint bench redis-server clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,bench,web]'
	rm -f $(VENV)/.installed-*
	touch $@

# A throwaway redis-server is started by the test session itself (tests/conftest.py);
# this only makes sure the binary is there, installing Debian's package when missing.
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "redis-server missing: installing Debian's package"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; \
	  systemctl stop redis-server >/dev/null 2>&1 || service redis-server stop >/dev/null 2>&1 || true; }

# `make demo DEMO_ARGS=--web` serves the web application on 127.0.0.1 instead.
demo: $(STAMP)
	$(BIN)/python -m domain $(DEMO_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check eventbus scheduler domain tests benchmarks
	$(BIN)/ruff format --check eventbus scheduler domain tests benchmarks
	$(BIN)/mypy

test: $(STAMP) redis-server lint
	$(BIN)/python -m pytest -q -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
