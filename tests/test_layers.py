"""shardlab's layers: import-linter's contracts kept, no import circle, no import hidden in a function,
no private name used outside its subpackage. Each check is also shown failing on a broken copy."""

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(root: Path) -> subprocess.CompletedProcess:
    # lint-imports reads pyproject.toml in its working directory and puts that directory first on the path.
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, capture_output=True, text=True, timeout=300)


@pytest.fixture
def broken_copy(tmp_path):
    """A copy of the package and its contracts, for one test to break."""
    shutil.copytree(REPO / "shardlab", tmp_path / "shardlab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _add_line(path: Path, line: str) -> None:
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_contracts_are_kept():
    r = _lint(REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 kept, 0 broken" in r.stdout


def test_an_upward_import_breaks_the_layers(broken_copy):
    # The program reader must know no model: an import of the time model from it is refused.
    _add_line(broken_copy / "shardlab/programs/hlo.py", "from shardlab.models import time_model  # noqa")
    r = _lint(broken_copy)
    assert r.returncode != 0
    assert "1 kept, 1 broken" in r.stdout
    assert "shardlab.programs.hlo -> shardlab.models.time_model" in r.stdout


def test_a_picture_that_compiles_breaks_its_contract(broken_copy):
    _add_line(broken_copy / "shardlab/pictures/draw.py", "from shardlab.programs.compile import compile_for  # noqa")
    r = _lint(broken_copy)
    assert r.returncode != 0 and "Pictures draw what they are given: they never compile BROKEN" in r.stdout


def test_models_and_pictures_do_not_import_each_other(broken_copy):
    _add_line(broken_copy / "shardlab/models/ring_matmul.py", "from shardlab.pictures import display  # noqa")
    r = _lint(broken_copy)
    assert r.returncode != 0 and "shardlab.models.ring_matmul -> shardlab.pictures.display" in r.stdout


def _circles(root: Path) -> list[list[str]]:
    """Groups of shardlab modules that import each other in a circle (Tarjan's strongly connected components)."""
    # In a fresh Python started in ``root``, so that it is that copy of the package that is read.
    script = ("import grimp, json; g = grimp.build_graph('shardlab', cache_dir=None); "
              "print(json.dumps({m: sorted(g.find_modules_directly_imported_by(m)) for m in g.modules}))")
    r = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(root)})
    assert r.returncode == 0, r.stderr
    edges = {m: imported for m, imported in json.loads(r.stdout).items() if m != "shardlab"}
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w == "shardlab":
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return found


def test_no_module_imports_itself_through_a_circle():
    assert _circles(REPO) == []


def test_a_circle_within_one_layer_is_found(broken_copy):
    # Inside one layer the layers contract allows any import; a circle there is caught here instead.
    _add_line(broken_copy / "shardlab/programs/hlo.py", "from shardlab.programs import loops  # noqa")
    assert any("shardlab.programs.hlo" in group and "shardlab.programs.loops" in group
               for group in _circles(broken_copy))


def _subpackage(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def _offences(source: str, module: str) -> list[str]:
    """Imports of shardlab inside a function, and private shardlab names imported from another subpackage."""
    found = []
    tree = ast.parse(source)
    for func in ast.walk(tree):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(func):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("shardlab") or \
                        isinstance(node, ast.Import) and any(a.name.startswith("shardlab") for a in node.names):
                    found.append(f"{module}:{node.lineno}: import inside {func.name}")
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("shardlab."):
            if _subpackage(node.module) != _subpackage(module):
                found += [f"{module}:{node.lineno}: private {a.name} from {node.module}"
                          for a in node.names if a.name.startswith("_")]
    return found


def test_no_import_inside_a_function_and_no_private_name_across_subpackages():
    offences = []
    for path in sorted((REPO / "shardlab").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        offences += _offences(path.read_text(), module)
    assert offences == []


def test_the_source_checks_catch_what_they_look_for():
    hidden = "def f():\n    from shardlab.programs.hlo import parse_module\n    return parse_module\n"
    private = "from shardlab.hardware.chips import _secret\n"
    within = "from shardlab.programs.hlo import _secret\n"
    assert _offences(hidden, "shardlab.models.time_model") == ["shardlab.models.time_model:2: import inside f"]
    assert _offences(private, "shardlab.models.time_model") == [
        "shardlab.models.time_model:1: private _secret from shardlab.hardware.chips"]
    assert _offences(within, "shardlab.programs.loops") == []
