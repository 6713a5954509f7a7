"""The open-web benchmark's scoring (``benchmarks/bench_openweb.py``): kept-recall overall, by kind and by page type."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_openweb import Page, score  # noqa: E402


def _pages() -> list[Page]:
    # Gold article 0 (an article page) and 1 (a forum topic), each an original and its print copy.
    return [Page("https://a.example/0", 0, "original", b""), Page("https://a.example/1", 1, "original", b""),
            Page("https://a.example/print/0", 0, "print", b""), Page("https://a.example/print/1", 1, "print", b"")]


def test_kept_recall_is_split_by_page_type_when_there_are_several() -> None:
    # The article's print copy is dropped naming its original; the forum topic's print copy is kept too.
    decisions = {"https://a.example/0": None, "https://a.example/1": None,
                 "https://a.example/print/0": "https://a.example/0", "https://a.example/print/1": None}
    row = score(_pages(), decisions, lambda i, j: i != j, ["article", "forum"])
    assert row["kept_recall"] == 0.5 and row["by_kind"]["print"] == "1/2"
    assert row["kept_recall_by_type"] == {"article": 1.0, "forum": 0.0}
    assert row["precision"] == 1.0 and row["distinct_dropped"] == 0
    # One page type (the other data sets): no split.
    assert "kept_recall_by_type" not in score(_pages(), decisions, lambda i, j: i != j, ["article", "article"])
    assert "kept_recall_by_type" not in score(_pages(), decisions, lambda i, j: i != j)
