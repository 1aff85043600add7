"""Where things are, for the tests."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
CHAPTERS = sorted(NOTEBOOKS.glob("*.md"))  # every executed page: numbered chapters and notebook pages
NUMBERED = [md for md in CHAPTERS if md.stem[:2].isdigit()]  # the chapters, each ending with exercises
IPYTHONDIR = Path(__file__).resolve().parent / "ipython"
EXECUTED = ROOT / "_build" / "executed"
CACHE = ROOT / "_build" / ".jupyter_cache"
# The book is built with the newest JAX; a test run under another JAX (the oldest the requirements
# admit) sets BOOK_CACHE=0 so that its executions never reach the book.
HAND_TO_BOOK = os.environ.get("BOOK_CACHE", "1") != "0"
