"""Copies of real pages in several languages and scripts, altered character by character (``folding.py``): with the
default settings at least 95% of the copies of each trick family are found, at a realistic and at a spammy rate, and
no drop names a distinct page."""

from __future__ import annotations

import os
from collections import defaultdict

import pytest
from corpora import CorpusUnavailable
from folding import RATES, SOURCES, TRICKS, Outcome, load_pages, measure

#: Pages per source: enough for a share per family over every source (8 sources), small enough for CI.
PAGES = 25


@pytest.fixture(scope="module")
def outcomes() -> list[Outcome]:
    try:
        pages = {source.name: load_pages(source, PAGES) for source in SOURCES}
    except CorpusUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"the folding corpora are needed in CI: {exc}")
        pytest.skip(f"the folding corpora cannot be had here: {exc}")
    return [measure(source, pages[source.name], family, rate)
            for source in SOURCES for family in TRICKS for rate in RATES]


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("family", list(TRICKS))
def test_each_trick_family_is_found(outcomes: list[Outcome], family: str, rate: str) -> None:
    chosen = [outcome for outcome in outcomes if outcome.family == family and outcome.rate == rate]
    copies, found = sum(o.copies for o in chosen), sum(o.found for o in chosen)
    assert copies >= 100
    assert found >= 0.95 * copies, [(o.source, o.found, o.copies) for o in chosen if o.found < o.copies]


def test_no_drop_names_a_distinct_page(outcomes: list[Outcome]) -> None:
    false = defaultdict(int)
    for outcome in outcomes:
        false[outcome.source] += outcome.false_pairs
    assert sum(false.values()) == 0, dict(false)
