"""Where things are, for the tests."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
CHAPTERS = sorted(NOTEBOOKS.glob("*.md"))
IPYTHONDIR = Path(__file__).resolve().parent / "ipython"
EXECUTED = ROOT / "_build" / "executed"
CACHE = ROOT / "_build" / ".jupyter_cache"
