"""The reference page documents every name shardlab exports, once, under a topic."""

import re

import shardlab
from tests.paths import ROOT

PAGE = ROOT / "book" / "reference.md"
# Data is documented from the module that defines it, where its doc comment (#:) is.
DIRECTIVE = re.compile(r"^\.\. auto(?:function|class|data):: shardlab\.(?:\w+\.)*(\w+)$", re.M)


def test_every_export_is_documented_once_under_a_topic():
    text = PAGE.read_text(encoding="utf-8")
    documented = DIRECTIVE.findall(text)
    assert sorted(documented) == sorted(shardlab.__all__), (
        f"missing: {sorted(set(shardlab.__all__) - set(documented))}, "
        f"not exported: {sorted(set(documented) - set(shardlab.__all__))}")
    assert len(documented) == len(set(documented)), "a name documented twice"
    first_topic = text.index("\n## ")
    assert DIRECTIVE.search(text, 0, first_topic) is None, "names before the first topic heading"
    topics = re.findall(r"^\(ref-([\w-]+)\)=\n## ", text, re.M)
    summary = re.findall(r"^\| \{ref\}`[^<`]+<ref-([\w-]+)>` \|", text, re.M)
    assert topics and summary == topics, "the summary table must list every topic, in order"
