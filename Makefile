# Every target sets up what it needs: `make test` alone passes on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
# Two more venvs without the dev tools: the runtime dependencies only (`pip install .`, no
# extras), and every extra (`pip install '.[all]'`): an import that only the dev extra
# satisfies fails there. Rebuilt when pyproject.toml changes, like STAMP.
RUNTIME       := .venv-runtime
RUNTIME_STAMP := $(RUNTIME)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
ALL           := .venv-all
ALL_STAMP     := $(ALL)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
# What the checks below read: they run again only when one of these changed.
SOURCES  := $(shell find eventbus scheduler domain -type f -not -path '*/__pycache__/*')
PACKAGED := pyproject.toml README.md LICENSE CHANGELOG.md \
            $(shell find eventbus scheduler -type f -not -path '*/__pycache__/*')

.PHONY: demo demo-durable test lint docs bench servers runtime-deps package screenshots clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	rm -f $(VENV)/.installed-*
	touch $@

# Built afresh: pip never removes what an older pyproject.toml required, and a leftover
# library would hide an import that the runtime dependencies no longer satisfy.
$(RUNTIME_STAMP): pyproject.toml
	rm -rf $(RUNTIME) && $(PYTHON) -m venv $(RUNTIME)
	$(RUNTIME)/bin/python -m pip install --quiet --upgrade pip
	$(RUNTIME)/bin/python -m pip install --quiet .
	touch $@

$(ALL_STAMP): pyproject.toml
	rm -rf $(ALL) && $(PYTHON) -m venv $(ALL)
	$(ALL)/bin/python -m pip install --quiet --upgrade pip
	$(ALL)/bin/python -m pip install --quiet '.[all]'
	touch $@

# Imports every module and runs each CLI's --help in both venvs (tests/runtime_deps.py says
# what is expected of each). From the repository root the working tree's code shadows the
# installed copy, so the check sees today's code.
runtime-deps: $(RUNTIME)/.checked
$(RUNTIME)/.checked: $(RUNTIME_STAMP) $(ALL_STAMP) $(SOURCES) tests/runtime_deps.py
	@for venv in $(RUNTIME) $(ALL); do \
	  flag=$$([ $$venv = $(ALL) ] && echo --all); \
	  $$venv/bin/python -m tests.runtime_deps $$flag > $$venv/last-check.txt 2>&1 \
	    || { cat $$venv/last-check.txt; exit 1; }; \
	  echo "runtime dependencies only ($$venv): $$(grep -c '^ok' $$venv/last-check.txt) checks ok, $$(grep -c '^skip' $$venv/last-check.txt) skipped (see $$venv/last-check.txt)"; \
	done
	@touch $@

# Builds the sdist and the wheel (dist/), checks them, and installs the wheel into both venvs
# to run the README's quickstart and import what it ships (tests/packaging.py).
package: dist/.checked
dist/.checked: $(STAMP) $(RUNTIME_STAMP) $(ALL_STAMP) $(PACKAGED) tests/packaging.py tests/runtime_deps.py
	@$(BIN)/python -m tests.packaging --no-extras $(RUNTIME) --all $(ALL)
	@touch $@

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

LINTED := eventbus scheduler domain tests benchmarks docs/_tooling
lint: $(STAMP)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy

# The site (mkdocs.yml, docs/) into site/: --strict fails on a broken link or anchor, a page
# left out of the nav, or a docstring whose fields do not match its signature (never --quiet:
# it hides the warnings from --strict too). A few seconds.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

test: $(STAMP) servers lint docs runtime-deps package
	$(BIN)/python -m pytest -q -p no:cacheprovider

# The screenshots of the console in the README and docs/console.md (docs/console-*.png), taken by its browser tests.
screenshots: $(STAMP) servers
	EVENTBUS_SCREENSHOTS=docs $(BIN)/python -m pytest -q -p no:cacheprovider tests/domain/test_console_browser.py

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) $(RUNTIME) $(ALL) dist site .mypy_cache .ruff_cache .pytest_cache .hypothesis
