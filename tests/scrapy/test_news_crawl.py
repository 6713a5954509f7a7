"""A real crawl of a news site whose markup names nothing: each article served with widgets that change from page
to page, and its print version; the defaults keep each article once and drop its print version."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from neardup_testkit import CrawlResult, Page, article_words, path_of

RunCrawl = Callable[..., CrawlResult]
ARTICLES = 3


def _paragraphs(seed: int) -> str:
    words = article_words(seed, 320)
    return "".join(f"<p>{' '.join(words[i:i + 40]).capitalize()}.</p>" for i in range(0, len(words), 40))


def _article(n: int) -> str:
    """Article ``n`` as served: a date line, a share bar, a comment count and teasers of the other articles
    around it, in elements whose class names say nothing (the extraction's rules cannot read them)."""
    teasers = "".join(f"<li><a href=/a{o}.html>Story number {o} of today about another thing</a><p>"
                      f"{' '.join(article_words(100 + o, 22))}</p></li>" for o in range(ARTICLES) if o != n)
    return ("<html><head><title>Daily</title><meta property='og:type' content='article'></head><body>"
            "<div class=c1><a href=/>Home</a> <a href=/news.html>News</a> <a href=/sport.html>Sport</a></div>"
            f"<div class=c2>Updated November {n + 2}, 2026 at {n + 3}:15 pm</div>"
            "<div class=c3><a href=/share/f>Facebook</a> <a href=/share/t>Twitter</a> <a href=/share/e>Email</a></div>"
            f"<div class=c4><h1>Story number {n}</h1>{_paragraphs(n)}</div>"
            f"<div class=c5><a href=#c>{7 * n + 3} comments</a></div>"
            f"<div class=c6><h3>Related stories</h3><ul>{teasers}</ul></div>"
            f"<div class=c7><a href=/print/a{n}.html>Print</a></div></body></html>")


def _print(n: int) -> str:
    return ("<html><head><title>Print</title></head><body><div class=p1><a href='javascript:print()'>Print this page"
            f"</a></div><h1>Story number {n}</h1>{_paragraphs(n)}<div class=p2>Copyright 2026 Daily. All rights "
            "reserved.</div></body></html>")


def test_each_article_is_kept_once_and_its_print_version_dropped(run_crawl: RunCrawl, serve_site: Any) -> None:
    pages = {f"/a{n}.html": Page(_article(n)) for n in range(ARTICLES)}
    pages |= {f"/print/a{n}.html": Page(_print(n)) for n in range(ARTICLES)}
    pages["/"] = Page("<html><body><h1>Daily</h1><ul>" + "".join(
        f"<li><a href=/a{n}.html>Story number {n}</a></li>" for n in range(ARTICLES)) + "</ul></body></html>")
    server = serve_site(pages)
    result = run_crawl(spider={"start_url": server.url + "/"})
    assert result.returncode == 0, result.log[-3000:]
    kept = {path_of(item["url"]) for item in result.scraped}
    dropped = {path_of(drop["item"]["url"]): path_of(drop["duplicate_of"]) for drop in result.dropped}
    assert kept == {"/"} | {f"/a{n}.html" for n in range(ARTICLES)}, (kept, dropped)
    assert dropped == {f"/print/a{n}.html": f"/a{n}.html" for n in range(ARTICLES)}
