# Every target bootstraps its virtual environment first.
#   .venv         the book's environment: the newest JAX, which needs Python >= 3.12, at the versions
#                 pinned in requirements-lock.txt (with only an older Python: the ranges of requirements.txt)
#   .venv-oldest  the oldest JAX requirements.txt admits (constraints-oldest.txt), for `make test`

# The first Python >= 3.12 on PATH or among pyenv's versions; else python3.
FIND_PYTHON := for p in python3.12 python3.13 python3.14 $(wildcard $(HOME)/.pyenv/versions/3.1[2-9]*/bin/python3) python3; do \
	"$$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null && { command -v "$$p"; exit 0; }; done; command -v python3
PYTHON ?= $(shell $(FIND_PYTHON))
OLDEST_PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
OLDEST := .venv-oldest
OLDEST_STAMP := $(OLDEST)/.installed
CHROMIUM := /usr/bin/chromium
JB     := $(BIN)/jupyter-book build . --builder html -W -n --keep-going
SAY_JAX = $(1)/python -c 'import sys, jax; print(f"== {sys.executable}: Python {sys.version.split()[0]}, JAX {jax.__version__} ==")'

.PHONY: venv book test unit notebooks browser sync lab bench lock clean

$(STAMP): requirements.txt requirements-lock.txt pyproject.toml
	@if [ -x $(BIN)/python ] && [ "$$($(BIN)/python -V)" != "$$($(PYTHON) -V)" ]; then \
		echo "Re-creating $(VENV) with $$($(PYTHON) -V)"; rm -rf $(VENV); fi
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@if $(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then \
		echo "Installing the pinned versions of requirements-lock.txt"; \
		$(BIN)/python -m pip install -q -r requirements-lock.txt -e . ; \
	else \
		echo "No Python >= 3.12 found: $$($(BIN)/python -V) takes the newest JAX it admits (requirements.txt ranges)"; \
		$(BIN)/python -m pip install -q -r requirements.txt ; \
	fi
	@$(call SAY_JAX,$(BIN))
	touch $@

$(OLDEST_STAMP): requirements.txt constraints-oldest.txt pyproject.toml
	test -x $(OLDEST)/bin/python || $(OLDEST_PYTHON) -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install -q --upgrade pip
	$(OLDEST)/bin/python -m pip install -q -r requirements.txt -c constraints-oldest.txt
	touch $@

venv: $(STAMP)

# Headless Chromium for the page tests, from Debian (a downloaded browser is not used).
$(CHROMIUM):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

# Executes every chapter (or reuses the cached outputs of unchanged ones) and writes _build/html.
book: $(STAMP)
	@$(call SAY_JAX,$(BIN))
	$(JB)

# Unit tests and every chapter executed, on the book's JAX and again on the oldest JAX admitted;
# then the book (reusing the first run's executions) and every page opened in a real browser.
test: $(STAMP) $(OLDEST_STAMP) $(CHROMIUM)
	@$(call SAY_JAX,$(BIN))
	$(BIN)/lint-imports --no-cache
	$(BIN)/pytest -n auto --durations=15 tests --ignore=tests/browser
	@$(call SAY_JAX,$(OLDEST)/bin)
	BOOK_CACHE=0 $(OLDEST)/bin/pytest -n auto --durations=5 tests --ignore=tests/browser --ignore=tests/test_colab_like.py
	$(JB)
	$(BIN)/pytest -n auto tests/browser

sync: $(STAMP)
	$(BIN)/jupytext --sync notebooks/*.md

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

# Re-pins the book's build after a change to requirements.txt (run with a Python >= 3.12).
lock: $(STAMP)
	$(BIN)/python -m pip install -q --upgrade -r requirements.txt
	{ echo "# The published book's build: $$($(BIN)/python -V), made by 'make lock' from requirements.txt."; \
	  $(BIN)/python -m pip freeze --exclude-editable; } > requirements-lock.txt

clean:
	rm -rf _build .pytest_cache .hypothesis build dist *.egg-info
	find . -name __pycache__ -not -path './$(VENV)/*' -not -path './$(OLDEST)/*' -prune -exec rm -rf {} +
