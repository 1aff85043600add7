# Every target bootstraps .venv from requirements.txt first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
CHROMIUM := /usr/bin/chromium
JB     := $(BIN)/jupyter-book build . --builder html -W -n --keep-going

.PHONY: venv book test unit notebooks browser sync lab bench clean

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	touch $@

venv: $(STAMP)

# Headless Chromium for the page tests, from Debian (a downloaded browser is not used).
$(CHROMIUM):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

# Executes every chapter (or reuses the cached outputs of unchanged ones) and writes _build/html.
book: $(STAMP)
	$(JB)

# Unit tests, every chapter executed, pairing checks; then the book (reusing those
# executions) and every page opened in a real browser.
test: $(STAMP) $(CHROMIUM)
	$(BIN)/pytest -n auto --durations=15 tests --ignore=tests/browser
	$(JB)
	$(BIN)/pytest tests/browser

sync: $(STAMP)
	$(BIN)/jupytext --sync notebooks/*.md

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf _build .pytest_cache .hypothesis build dist *.egg-info
	find . -name __pycache__ -not -path './$(VENV)/*' -prune -exec rm -rf {} +
