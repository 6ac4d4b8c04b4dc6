"""bench/suite/published.py, the papers' published numbers (issue #27 item 5): every entry is well formed (a
value exactly when the text states one, unique keys, short quotes). Whether every quote is in its paper is
checked where the papers are (`python3 -m bench.suite.published`); CI machines do not have them."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from bench.suite import published  # noqa: E402


def test_entries_are_well_formed():
    assert published.verify(papers_dir=None) == []
    assert len(published.ENTRIES) > 100
    for e in published.ENTRIES:
        assert e["paper"] in published.FILES and e["figure"] and e["what"] and e["source"]["at"], e["key"]


def test_known_figures_are_there():
    assert published.entries("fast17", "Table 2")
    assert published.entries("apsys16", "Table 1")
    assert all(e["value"] is None for e in published.missing())
