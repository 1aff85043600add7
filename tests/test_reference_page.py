"""The reference pages document every name shardlab exports, once, each on the page of its subpackage."""

import re

import shardlab
from tests.paths import ROOT

INDEX = ROOT / "book" / "reference.md"
PAGES = ROOT / "book" / "reference"
# Data is documented from the module that defines it, where its doc comment (#:) is.
DIRECTIVE = re.compile(r"^\.\. auto(?:function|class|data):: (shardlab(?:\.\w+)*)\.(\w+)$", re.M)
SUBPACKAGE = re.compile(r"^\.\. automodule:: shardlab\.(\w+)$", re.M)


def _defined_in(name: str) -> str:
    return getattr(shardlab, name).__module__ if hasattr(getattr(shardlab, name), "__module__") else ""


def test_every_export_is_documented_once_on_its_subpackages_page():
    documented = []
    for page in sorted(PAGES.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        assert SUBPACKAGE.findall(text)[:1] == [page.stem], f"{page.name} must open with its subpackage's docstring"
        for path, name in DIRECTIVE.findall(text):
            documented.append(name)
            module = _defined_in(name) if path == "shardlab" else path
            # a class or function names its module; data (dicts, tuples) is documented from its module's path
            assert module.startswith(f"shardlab.{page.stem}.") or not module.startswith("shardlab"), \
                f"{name} is documented on {page.name} but lives in {module}"
    assert sorted(documented) == sorted(shardlab.__all__), (
        f"missing: {sorted(set(shardlab.__all__) - set(documented))}, "
        f"not exported: {sorted(set(documented) - set(shardlab.__all__))}")
    assert len(documented) == len(set(documented)), "a name documented twice"


def test_the_index_lists_every_subpackage_page_in_the_toc_order():
    listed = re.findall(r"^\| \{doc\}`shardlab\.(\w+) <reference/(\w+)>` \|", INDEX.read_text(encoding="utf-8"), re.M)
    assert listed and all(a == b for a, b in listed)
    toc = re.findall(r"file: book/reference/(\w+)", (ROOT / "_toc.yml").read_text(encoding="utf-8"))
    assert [a for a, _ in listed] == toc
    assert sorted(toc) == sorted(p.stem for p in PAGES.glob("*.md"))
    assert DIRECTIVE.search(INDEX.read_text(encoding="utf-8")) is None, "the index documents no name itself"
