# pilothouse: two commands on a fresh machine.
#   make demo   installs everything and runs the main job on the embedded local model
#   make test   installs everything and runs ruff, pyright (strict on src/, standard on tests/)
#               and pytest with coverage, one worker per core

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The prebuilt portable llama-cpp-python wheel, when the shared folder has it;
# otherwise pip builds llama.cpp from source (about 10 minutes on 2 cores).
WHEELS := ../shared/wheels
FIND_LINKS := $(if $(wildcard $(WHEELS)/llama_cpp_python-*.whl),--find-links $(WHEELS),)
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF

.PHONY: install sandbox browser screenshots test lint typecheck pytest demo serve bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	@if [ -z "$(FIND_LINKS)" ]; then \
	  echo ">>> no prebuilt llama-cpp-python wheel in $(WHEELS): building llama.cpp from source (about 10 minutes on 2 cores)"; \
	fi
	$(BIN)/python -m pip install --progress-bar off $(FIND_LINKS) -e '.[all,test]'
	touch $@

install: $(VENV)/.installed sandbox browser

# Script tools run in a bubblewrap sandbox (docs/tools.md): installed where
# apt can (root on Debian/Ubuntu); elsewhere the note says what follows.
sandbox:
	@if ! command -v bwrap >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo ">>> installing bubblewrap, the script-tool sandbox"; \
	    apt-get install -y -qq bubblewrap >/dev/null 2>&1 \
	      || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq bubblewrap >/dev/null 2>&1; } \
	      || echo ">>> could not install bubblewrap: script tools will be refused (docs/tools.md)"; \
	  else \
	    echo ">>> bubblewrap (bwrap) is not installed: script tools will be refused unless PILOTHOUSE_SCRIPT_TOOLS=trusted (docs/tools.md)"; \
	  fi; \
	fi

# The playground's browser test drives Debian's Chromium through Playwright
# (docs/playground.md); Playwright itself never downloads a browser.
browser:
	@if ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo ">>> installing chromium, for the playground's browser test"; \
	    apt-get install -y -qq chromium >/dev/null 2>&1 \
	      || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1; } \
	      || echo ">>> could not install chromium: the playground's browser test will be skipped"; \
	  else \
	    echo ">>> chromium is not installed: the playground's browser test will be skipped (docs/playground.md)"; \
	  fi; \
	fi

# Regenerates the screenshots of docs/playground.md with the browser tests.
screenshots: install
	PILOTHOUSE_SCREENSHOTS=docs/playground $(BIN)/python -m pytest tests/real/test_playground_browser.py tests/real/test_playground_ui_browser.py tests/real/test_ui_workbench_browser.py -q -p no:cacheprovider

lint: install
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: install
	$(BIN)/pyright

# The line coverage of src/pilothouse that the suite must keep (the measured
# level, rounded down; `make test` prints the level it measured).
COV_FLOOR := 91

pytest: install
	@# Exit code 5 means pytest collected no tests; that is not a failure of the code.
	@# One worker per core (pytest-xdist); a module's tests stay on one worker,
	@# so a module-scoped real component (a llama.cpp server) starts once. The
	@# slow modules go first (tests/conftest.py), so xdist's own reorder is off.
	@# Bytecode is cached even where the environment says not to
	@# (PYTHONDONTWRITEBYTECODE, common in container images): the suite starts
	@# hundreds of Python processes that import the same modules, and pytest
	@# rewrites the asserts of ~600 modules per worker. The 30 slowest tests are
	@# listed at the end, so every CI log says where the suite's time goes.
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n auto --dist loadscope --no-loadscope-reorder \
	  --durations=30 --cov --cov-report=term --cov-fail-under=$(COV_FLOOR); \
	  rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

test: lint typecheck pytest

# The demo keeps its own database so it never mixes with yours.
DEMO := $(BIN)/pilothouse --database-url sqlite+aiosqlite:///.pilothouse/demo.db
BRAND := examples/documents/acme-brand.md

demo: install
	@rm -f .pilothouse/demo.db .pilothouse/demo.db-wal .pilothouse/demo.db-shm
	@echo ">>> importing the example catalog (examples/catalog/)"
	$(DEMO) catalog import examples/catalog
	@echo ">>> action SUMBRAND: summarize a brand document (streamed from the local Qwen2.5-Coder-0.5B model)"
	$(DEMO) run SUMBRAND --agent WRITER --input document=@$(BRAND) "Summarize the brand document." --timeline
	@echo ">>> action COMPETITORS: extract competitors as a list of {name, website, reason}"
	$(DEMO) run COMPETITORS --agent ANALYST --input document=@$(BRAND) "Extract the competitors." --timeline
	@echo ">>> recorded conversations"
	$(DEMO) conversations list

# Creates bench/.venv and bench/.venv-litellm when missing or outdated, runs the
# harness against the peers, regenerates docs/benchmarks.md and its plots
# (about 10-15 minutes). Not part of make test, which only runs a tiny smoke load.
bench:
	PYTHON=$(PYTHON) bench/run.sh

# The embedded default as a service: SQLite, the local model, the example catalog.
SERVE := $(BIN)/pilothouse --database-url sqlite+aiosqlite:///.pilothouse/serve.db

serve: install
	$(SERVE) catalog import examples/catalog
	@echo ">>> an admin API key for tenant 'default' (shown once):"
	$(SERVE) keys create --tenant default --name make-serve --admin
	$(SERVE) serve --host 127.0.0.1 --port 8000

clean:
	rm -rf $(VENV) .pilothouse .pytest_cache .ruff_cache
