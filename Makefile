# Every target sets up what it needs: `make test` alone passes on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
# A second venv with the runtime dependencies only (`pip install .`, no extras): an import
# that only an extra satisfies fails there. Rebuilt when pyproject.toml changes, like STAMP.
RUNTIME       := .venv-runtime
RUNTIME_STAMP := $(RUNTIME)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo demo-durable test lint bench servers runtime-deps screenshots clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,bench,web]'
	rm -f $(VENV)/.installed-*
	touch $@

$(RUNTIME_STAMP): pyproject.toml
	test -x $(RUNTIME)/bin/python || $(PYTHON) -m venv $(RUNTIME)
	$(RUNTIME)/bin/python -m pip install --quiet --upgrade pip
	$(RUNTIME)/bin/python -m pip install --quiet .
	rm -f $(RUNTIME)/.installed-*
	touch $@

# Imports every module and runs each CLI's --help in that venv. From the repository root the
# working tree's code shadows the installed copy, so the check sees today's code.
runtime-deps: $(RUNTIME_STAMP)
	@$(RUNTIME)/bin/python -m tests.runtime_deps > $(RUNTIME)/last-check.txt 2>&1 \
	  || { cat $(RUNTIME)/last-check.txt; exit 1; }
	@echo "runtime dependencies only: $$(grep -c '^ok' $(RUNTIME)/last-check.txt) checks ok, $$(grep -c '^skip' $(RUNTIME)/last-check.txt) skipped (see $(RUNTIME)/last-check.txt)"

# Throwaway redis-server and PostgreSQL servers are started by the test session itself
# (tests/conftest.py, on free loopback ports), and the console's browser tests drive Debian's
# headless Chromium through chromedriver; this only makes sure the binaries are there,
# installing Debian's packages when missing (CI runs as root on a fresh machine).
PG_BIN := /usr/lib/postgresql/15/bin
servers:
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	test -x $(PG_BIN)/initdb || missing="$$missing postgresql-15"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null 2>&1 || missing="$$missing chromium-driver"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian's packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  service redis-server stop >/dev/null 2>&1 || true; \
	  service postgresql stop >/dev/null 2>&1 || true; \
	fi

# `make demo DEMO_ARGS=--web` serves the web application on 127.0.0.1 instead.
demo: $(STAMP)
	$(BIN)/python -m domain $(DEMO_ARGS)

# Two processes and a throwaway redis-server: order.paid committed by one, handled by the other.
demo-durable: $(STAMP) servers
	$(BIN)/python -m domain.durable_demo

lint: $(STAMP)
	$(BIN)/ruff check eventbus scheduler domain tests benchmarks
	$(BIN)/ruff format --check eventbus scheduler domain tests benchmarks
	$(BIN)/mypy

test: $(STAMP) servers lint runtime-deps
	$(BIN)/python -m pytest -q -p no:cacheprovider

# The README's screenshots of the console (docs/console-*.png), taken by its browser tests.
screenshots: $(STAMP) servers
	EVENTBUS_SCREENSHOTS=docs $(BIN)/python -m pytest -q -p no:cacheprovider tests/domain/test_console_browser.py

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) $(RUNTIME) .mypy_cache .ruff_cache .pytest_cache .hypothesis
