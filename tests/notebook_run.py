"""Executing a chapter the way the book does, with deprecation warnings as errors."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
from myst_nb.core.read import read_myst_markdown_notebook
from nbclient import NotebookClient

from tests.paths import IPYTHONDIR

CELL_TIMEOUT_S = 300


def read_chapter(md: Path) -> nbformat.NotebookNode:
    # The same reader the book build uses, so the executed notebook hashes like the book's.
    return read_myst_markdown_notebook(md.read_text(encoding="utf-8"), path=str(md))


def execute(nb: nbformat.NotebookNode, cwd: Path, extra_env: dict | None = None) -> nbformat.NotebookNode:
    env = dict(os.environ, IPYTHONDIR=str(IPYTHONDIR), PYDEVD_DISABLE_FILE_VALIDATION="1",
               **(extra_env or {}))
    # record_timing=False: timestamps in cell metadata would change the hash the book cache matches on.
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(cwd)}})
    # nbclient passes the environment of this process to the kernel.
    old = dict(os.environ)
    os.environ.update(env)
    try:
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    return nb
