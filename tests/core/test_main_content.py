""""auto" mode on pages that declare themselves articles: the article, without what surrounds it."""

from __future__ import annotations

import pytest

from scrapy_neardup.core.main_content import MIN_MAIN_WORDS, is_article_page
from scrapy_neardup.core.sketch import Sketcher

STORY = ("The city council voted on Tuesday to extend the river walk by two miles, a plan that residents have argued "
         "about for a decade. Supporters said the path would bring visitors to the old mill district. Opponents "
         "worried about the cost, which the council put at four million dollars over five years.")
OG = '<meta property="og:type" content="article">'


def page(body: str, head: str = OG) -> str:
    return f"<html><head><title>News</title>{head}</head><body>{body}</body></html>"


def text(html: str) -> str:
    return Sketcher().text(html).decode()


@pytest.mark.parametrize(("head", "body", "declared"), [
    (OG, "<p>x</p>", True),
    ('<script type="application/ld+json">{"@type": "NewsArticle"}</script>', "<p>x</p>", True),
    ('<script type="application/ld+json">{"@type":"BlogPosting"}</script>', "<p>x</p>", True),
    ("", "<article><p>x</p></article>", True),
    ('<meta property="og:type" content="website">', "<main><p>x</p></main>", False),
    ("", "<div class=articles><p>x</p></div>", False),
])
def test_pages_that_declare_themselves_articles(head: str, body: str, declared: bool) -> None:
    assert is_article_page(page(body, head).encode()) is declared


def test_comments_share_blocks_and_bylines_go_inside_and_outside_the_article() -> None:
    comments = "".join(f"<div class=comment><p>Reader {i} says the council should pave it instead.</p></div>"
                       for i in range(8))
    html = page(
        f"<header class=site-header><a href=/>Daily Planet</a></header>"
        f"<article><h1>River walk to grow</h1><div class=byline>By Jane Roe, 148,531 views</div><p>{STORY}</p>"
        f"<div class=share-buttons><a href=/f>Share on Facebook</a> <a href=/t>Share on Twitter</a></div>"
        f"<section id=comments class=comments>{comments}</section></article>"
        f"<aside><h2>Trending</h2><p>Something else entirely</p></aside>")
    out = text(html)
    assert "council voted" in out and "river walk to grow" in out
    for gone in ("reader", "share on", "148 531", "daily planet", "trending"):
        assert gone not in out, gone


def test_an_article_and_its_copy_with_a_comment_thread_are_one_page() -> None:
    plain = page(f"<article><h1>River walk</h1><p>{STORY}</p></article>")
    thread = "".join(f"<li class=comment>Reader {i} wrote a long reply about parking and the mill.</li>"
                     for i in range(30))
    commented = page(f"<article><h1>River walk</h1><p>{STORY}</p></article><ol class=comment-list>{thread}</ol>")
    assert Sketcher().jaccard(plain, commented) == 1.0


def test_lists_inside_the_article_stay() -> None:
    items = "".join(f"<li>Step {i}: fold the paper along line {i} and press it flat</li>" for i in range(5))
    out = text(page(f"<article><p>{STORY}</p><ul>{items}</ul></article>"))
    assert "step 4 fold the paper along line 4" in out


def test_an_empty_xhtml_anchor_does_not_make_the_rest_link_text() -> None:
    html = page(f'<div><h2><a id="s1"/>Section one</h2><p>{STORY}</p><p>{STORY.upper()}</p></div>')
    assert text(html).count("council voted") == 2


def test_a_page_whose_main_content_is_short_is_read_whole() -> None:
    html = page('<div class=site-footer><p>Uses of Widget: no usage of Widget in this library</p></div>')
    out = text(html)
    assert len(out.split()) >= MIN_MAIN_WORDS - 1 and "no usage of widget" in out


def test_an_article_pages_removed_share_counts_the_comment_thread_it_left_out() -> None:
    """An article's extraction leaves text out inside the page too (here a comment thread): the page's words are
    its visible words (scripts aside), so the evidence's share removed counts the thread."""
    thread = "".join(f"<li class=comment>Reader {i} wrote a long reply about parking</li>" for i in range(10))
    head = f'{OG}<script>var tracking = "{"x " * 200}";</script>'
    plain = page(f"<article><h1>River walk</h1><p>{STORY}</p></article>", head)
    commented = page(f"<article><h1>River walk</h1><p>{STORY}</p></article><ol class=comment-list>{thread}</ol>",
                     head)
    story_words = 2 + len(STORY.replace(",", " ").replace(".", " ").split())  # the heading, then the story
    thread_words = 10 * 8  # "reader N wrote a long reply about parking"
    a, b = Sketcher().sketch_many([plain, commented])
    assert (a.sketched, a.words, a.page_words, a.removed) == ("main content", story_words, story_words, 0.0)
    assert (b.words, b.page_words) == (story_words, story_words + thread_words)
    assert b.removed == round(1 - story_words / (story_words + thread_words), 2)
