""""auto" mode on article pages: ``<article>`` is trusted only when it is the page's article."""

from __future__ import annotations

import pytest

from scrapy_neardup.core.article import ARTICLE_SHARE
from scrapy_neardup.core.sketch import Sketcher

STORY = (
    "The city council voted on Tuesday to extend the river walk by two miles, a plan that residents have argued "
    "about for a decade. Supporters said the path would bring visitors to the old mill district.",
    "Opponents worried about the cost, which the council put at four million dollars over five years, and about "
    "parking near the northern end of the route, where streets are narrow.",
    "Construction is expected to start next spring, once the state approves the environmental review that the "
    "council ordered last year.",
)
OTHER = (
    "A small bakery on Elm Street has won a regional award for its sourdough, beating forty other entries from "
    "three counties in a blind tasting held at the fairgrounds.",
    "The owners, who opened the shop six years ago, said they would use the prize money to buy a second oven and "
    "hire two apprentices from the vocational school.",
    "They plan to keep prices the same, they said, because their customers stood by them in lean years.",
)


def paragraphs(texts: tuple[str, ...]) -> str:
    return "".join(f"<p>{text}</p>" for text in texts)


def page(content: str, head: str = "") -> bytes:
    return f"<html><head><meta charset=utf-8><title>News</title></head><body>{head}{content}</body></html>".encode()


def text(html: bytes) -> str:
    return Sketcher().text(html).decode()


def test_teaser_cards_are_not_the_article() -> None:
    cards = "".join(f"<article><h2><a href=/t{i}>Trending story {i}</a></h2><p>Teaser {i} of a story.</p></article>"
                    for i in range(4))
    out = text(page(f"<div>{paragraphs(STORY)}</div><div class=sidebar-box>{cards}</div>"))
    assert "council voted" in out


def test_one_large_article_among_teaser_cards_is_the_article() -> None:
    cards = "".join(f"<article><p>Teaser {i} of another story.</p></article>" for i in range(3))
    out = text(page(f"<div><article>{paragraphs(STORY)}</article></div><div>{cards}</div>"))
    assert "council voted" in out and "teaser" not in out
    assert ARTICLE_SHARE > 0.5


def test_distinct_articles_in_one_template_stay_distinct() -> None:
    chrome = "<div class=c1><a href=/>Home</a> <a href=/x>Local</a> <a href=/y>Sport</a></div>"
    a = page(f"<div class=c2>{paragraphs(STORY)}</div>", chrome)
    b = page(f"<div class=c2>{paragraphs(OTHER)}</div>", chrome)
    assert Sketcher().jaccard(a, b) < 0.1


def test_distinct_articles_of_a_site_whose_articles_are_teaser_cards_stay_distinct() -> None:
    """The same sidebar of teaser cards on two pages with different stories: each is sketched on its own story,
    not on the cards (which would make the two pages one)."""
    cards = "".join(f"<article><h2><a href=/t{i}>Trending story {i}</a></h2><p>Teaser {i} of a story that is read "
                    f"by many people today.</p></article>" for i in range(4))
    a = page(f"<div>{paragraphs(STORY)}</div><div class=sidebar-box>{cards}</div>")
    b = page(f"<div>{paragraphs(OTHER)}</div><div class=sidebar-box>{cards}</div>")
    assert Sketcher().jaccard(a, b) < 0.5


@pytest.mark.parametrize("tag", ["article", "ARTICLE"])  # read by the article extraction / by the lexbor walk
def test_cards_nested_in_an_article_do_not_count_for_it(tag: str) -> None:
    """A post beside an ``<article>`` of "you may also like" cards, each card an ``<article>`` inside it (a real
    blog's layout): the wrapper is measured by its own words, so the post is the page's article, however long the
    cards' teasers are."""
    cards = "".join(f"<{tag}><h3><a href=/c{i}>Card {i}</a></h3>{paragraphs(OTHER)}</{tag}>" for i in range(4))
    out = text(page(f"<{tag}>{paragraphs(STORY)}</{tag}><{tag}><h2>You may also like</h2>{cards}</{tag}>"))
    assert "council voted" in out and "bakery" not in out
