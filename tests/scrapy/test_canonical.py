"""Canonical links (``<link rel="canonical">`` in the HTML, ``Link: <url>; rel="canonical"`` in the HTTP header):
reading and normalizing them, then real crawls over HTTP on 127.0.0.1, each in its own process."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from neardup_testkit import CrawlResult, Page, article_words, html_page, path_of, read_checks

from scrapy_neardup.crawl.canonical import (
    CanonicalLinks,
    canonical_from_header,
    canonical_from_html,
    normalize_url,
    resolve_canonical,
)
from scrapy_neardup.crawl.context import CrawlContext

RunCrawl = Callable[..., CrawlResult]
ADDON = {"scrapy_neardup.NearDuplicateAddon": 300}
PIPELINE = {"scrapy_neardup.NearDuplicatePipeline": 300}


# -- reading canonical links -------------------------------------------------------------------------------------


def test_normalize_url() -> None:
    assert normalize_url("HTTP://Example.COM:80/a b?x=1#frag") == "http://example.com/a%20b?x=1"
    assert normalize_url("https://example.com:8443") == "https://example.com:8443/"
    assert normalize_url("https://example.com:443/p") == "https://example.com/p"
    assert normalize_url("mailto:someone@example.com") is None and normalize_url("no-url:00ff") is None


def test_canonical_from_the_link_header() -> None:
    base = "http://example.com/dir/page.html"
    assert canonical_from_header([b'<https://example.com/a>; rel="canonical"'], base) == ["https://example.com/a"]
    header = '</b>; rel="alternate"; hreflang="de", <../c>; rel=canonical, <d>; rel="prev canonical"'
    assert canonical_from_header([header], base) == ["http://example.com/c", "http://example.com/dir/d"]
    assert canonical_from_header(['<https://example.com/a>; rel="alternate"'], base) == []


def test_canonical_from_the_html_head_only() -> None:
    base = "http://example.com/dir/page.html"
    page = ('<html><head><title>x</title><LINK REL="Canonical" HREF="/a?b=1&amp;c=2"></head>'
            '<body><link rel="canonical" href="/not-in-head"></body></html>')
    assert canonical_from_html(page, base) == ["http://example.com/a?b=1&c=2"]
    with_base = '<head><base href="http://other.test/x/"><link rel="canonical" href="y.html"></head>'
    assert canonical_from_html(with_base, base) == ["http://other.test/x/y.html"]
    assert canonical_from_html("<p>no head, no canonical</p>", base) == []


def test_which_canonical_urls_are_used() -> None:
    url = "http://example.com/a.html"
    assert resolve_canonical(url, ["http://EXAMPLE.com/b.html"]) == ("http://example.com/b.html", None)
    assert resolve_canonical(url, [url + "#top"]) == (None, None)  # itself: an ordinary page
    assert resolve_canonical(url, ["http://example.com/"]) == (None, "the home page named by another page")
    assert resolve_canonical("http://mirror.test/", ["http://example.com/"]) == ("http://example.com/", None)
    assert resolve_canonical(url, ["http://example.com/b", "http://example.com/c"]) == (None, "several canonical URLs")
    assert resolve_canonical(url, []) == (None, None)


def test_what_the_crawl_remembers() -> None:
    links = CanonicalLinks(CrawlContext())
    links.checked("http://example.com/a", "http://example.com/a", None)  # kept
    links.checked("http://example.com/a-print", "http://example.com/a", None)  # a copy of it
    assert links.holder("http://example.com/a-print") == "http://example.com/a"
    links.checked("http://example.com/copy", "http://example.com/copy", "http://example.com/orig")  # kept, names orig
    assert links.claimed_by("http://EXAMPLE.com:80/orig") == "http://example.com/copy"
    assert links.claimed_by("http://example.com/orig") is None  # once


# -- in a crawl --------------------------------------------------------------------------------------------------


def _page(title: str, seed: int, links: list[str] = (), canonical: str | None = None) -> str:  # type: ignore[assignment]
    body = html_page(title, article_words(seed), links=links)
    if canonical is not None:
        body = body.replace("<title>", f'<link rel="canonical" href="{canonical}"><title>', 1)
    return body


def canonical_site() -> dict[str, Page]:
    """Each copy is linked only from its canonical page, so that page is checked first; the copies' texts differ
    from it (a near-duplicate check alone would keep them)."""
    return {
        "/": Page(_page("Home", 1, links=["/a.html", "/b.html", "/self.html", "/names-home.html"])),
        "/a.html": Page(_page("A", 2, links=["/a-variant.html"])),
        "/a-variant.html": Page(_page("A, another edition", 3, canonical="/a.html")),
        "/b.html": Page(_page("B", 4, links=["/b-variant.html"])),
        "/b-variant.html": Page(_page("B, another edition", 5), headers=(("Link", '</b.html>; rel="canonical"'),)),
        "/self.html": Page(_page("Self", 6, canonical="/self.html")),
        "/names-home.html": Page(_page("Template error", 7, canonical="/")),
    }


@pytest.mark.parametrize("setup", ["addon", "pipeline alone", "switched off"])
def test_a_page_naming_a_checked_page_canonical_is_its_duplicate(run_crawl: RunCrawl, serve_site: Any,
                                                                   setup: str) -> None:
    site = canonical_site()
    server = serve_site(site)
    settings: dict[str, Any] = {
        "addon": {"ADDONS": ADDON, "ITEM_PIPELINES": {}},
        "pipeline alone": {"ITEM_PIPELINES": PIPELINE},
        "switched off": {"ADDONS": ADDON, "ITEM_PIPELINES": {}, "NEARDUP_CANONICAL": False},
    }[setup]
    result = run_crawl(settings=settings, spider={"start_url": server.url + "/"})
    assert result.returncode == 0, result.log[-3000:]
    kept = {path_of(u) for u in result.kept_urls}
    drops = {path_of(u): d for u, d in result.drops_by_url().items()}
    # The header is read from the response, by the add-on's middleware; the pipeline alone sees the item's HTML.
    dropped = {"addon": {"/a-variant.html", "/b-variant.html"}, "pipeline alone": {"/a-variant.html"},
               "switched off": set()}[setup]
    assert kept == set(site) - dropped
    for path in dropped:
        assert drops[path]["reason"] == "CanonicalDropped", drops[path]
        assert drops[path]["duplicate_of"] == server.url + path.replace("-variant", "")
        assert drops[path]["message"] == f"canonical link to {server.url}{path.replace('-variant', '')}"
    assert len(dropped) == result.stat("neardup/canonical") == result.stat(
        "item_dropped_reasons_count/CanonicalDropped")
    assert result.stat("neardup/dropped") == len(dropped)
    # A page naming its own URL is an ordinary page; one naming the home page is a template error, ignored.
    assert {"/self.html", "/names-home.html"} <= kept
    assert result.stat("neardup/canonical_ignored") == (0 if setup == "switched off" else 1)
    if dropped:
        assert f"{len(dropped)} pages dropped for their canonical link to a page checked earlier" in result.log


def representative_site() -> dict[str, Page]:
    """Copies checked before their canonical page: ``/copy.html`` (a near-duplicate of ``/orig.html``) and
    ``/copy-2.html`` (another text than ``/orig-2.html``) each name the page they link to as canonical."""
    orig = html_page("Original", article_words(20))
    return {
        "/": Page(_page("Home", 1, links=["/copy.html", "/copy-2.html"])),
        "/copy.html": Page(orig.replace("<title>", '<link rel="canonical" href="/orig.html"><title>', 1)
                           .replace("</ul>", '<li><a href="/orig.html">the original</a></li></ul>')),
        "/orig.html": Page(orig),
        "/copy-2.html": Page(_page("Copy 2", 21, links=["/orig-2.html"], canonical="/orig-2.html")),
        "/orig-2.html": Page(_page("Original 2", 22)),
    }


@pytest.mark.parametrize("action", ["drop", "mark"])
def test_a_canonical_page_met_after_its_copy_is_reported_as_its_representative(
    run_crawl: RunCrawl, serve_site: Any, tmp_path: Path, action: str,
) -> None:
    """The copy was emitted first and cannot be taken back: the feed holds it; the canonical page is checked as
    every page (dropped naming the copy when its text is a near-duplicate), and the hook's observers (a search
    index) learn that it represents the copy's content."""
    server = serve_site(representative_site())
    checks_file = tmp_path / "checks.jsonl"
    result = run_crawl(settings={"ADDONS": ADDON, "ITEM_PIPELINES": {}, "NEARDUP_ACTION": action,
                                 "EXTENSIONS": {"neardup_testkit.RecordChecks": 0},
                                 "TEST_CHECKS_FILE": str(checks_file)},
                       spider={"start_url": server.url + "/", "item_type": "item"})
    assert result.returncode == 0, result.log[-3000:]
    base = server.url
    checks = {path_of(c["key"]): c for c in read_checks(checks_file)}
    assert checks["/copy.html"] == {"key": base + "/copy.html", "duplicate_of": None, "representative_of": None,
                                    "canonical": base + "/orig.html"}
    assert checks["/orig.html"] == {"key": base + "/orig.html", "duplicate_of": base + "/copy.html",
                                    "representative_of": base + "/copy.html", "canonical": None}
    assert checks["/orig-2.html"] == {"key": base + "/orig-2.html", "duplicate_of": None,
                                      "representative_of": base + "/copy-2.html", "canonical": None}
    assert result.stat("neardup/canonical_representatives") == 2
    if action == "drop":
        assert {path_of(u) for u in result.kept_urls} == {"/", "/copy.html", "/copy-2.html", "/orig-2.html"}
        assert result.drops_by_url()[base + "/orig.html"]["reason"] == "NearDuplicateDropped"
    else:
        marks = {path_of(item["url"]): item["neardup"] for item in result.scraped}
        assert marks["/orig.html"]["duplicate_of"] == base + "/copy.html" and marks["/orig.html"]["representative"]
        assert marks["/copy.html"] is None and marks["/orig-2.html"] is None
