"""The containment rule the benchmarks measure beside the product's decisions (``benchmarks/containment.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

from scrapy_neardup import Sketcher

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import containment  # noqa: E402


def _words(tag: str, count: int) -> str:
    return " ".join(f"{tag}{i}" for i in range(count))


ARTICLE = _words("article", 300)
LONGER = ARTICLE + " " + _words("byline", 100)  # holds the article; resemblance about 0.75
OTHER = _words("other", 300)


def _decide(texts: list[str], articles: list[bool] | None = None) -> tuple[dict[str, str | None], int]:
    sketcher = Sketcher()
    keys = [f"https://example.org/{i}" for i in range(len(texts))]
    return containment.decide(keys, sketcher.sketch_many(texts, is_html=False), sketcher, articles=articles)


def test_a_page_held_by_a_larger_kept_page_is_dropped_naming_it() -> None:
    sketcher = Sketcher()
    held, holder = sketcher.sketch(ARTICLE, is_html=False), sketcher.sketch(LONGER, is_html=False)
    assert held.resemblance(holder) < 0.85  # not a near-duplicate by resemblance
    decisions, contained = _decide([LONGER, OTHER, ARTICLE])
    assert decisions == {"https://example.org/0": None, "https://example.org/1": None,
                         "https://example.org/2": "https://example.org/0"}
    assert contained == 1


def test_the_larger_page_is_kept_after_the_page_it_holds() -> None:
    decisions, contained = _decide([ARTICLE, LONGER])
    assert decisions == {"https://example.org/0": None, "https://example.org/1": None}
    assert contained == 0


def test_only_article_pages_hold_others_when_told() -> None:
    assert _decide([LONGER, ARTICLE], articles=[False, False])[1] == 0
    assert _decide([LONGER, ARTICLE], articles=[True, False])[1] == 1
