"""Recurring crawls with a persistent embedded store (NEARDUP_STATE_DIR): real crawls over HTTP on 127.0.0.1,
each in its own process, the same store across them. A page seen again under its key is a revisit, never a
copy of itself."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from neardup_testkit import (
    CrawlResult,
    Page,
    article_words,
    check_kinds_outcome,
    edit_words,
    html_page,
    kinds_site,
    path_of,
)

from scrapy_neardup.store.embedded import STATE_FILE

RunCrawl = Callable[..., CrawlResult]


def test_crawl_twice_unchanged_emits_every_kept_page_again(
    run_crawl: RunCrawl, serve_kinds_site: Any, tmp_path: Path,
) -> None:
    site = kinds_site()
    server = serve_kinds_site(site)
    state = {"NEARDUP_STATE_DIR": str(tmp_path / "state")}
    first = run_crawl(settings=state, spider={"start_url": server.url + "/"}, name="first")
    check_kinds_outcome(first, site, server)
    second = run_crawl(settings=state, spider={"start_url": server.url + "/"}, name="second")
    assert second.returncode == 0, second.log[-3000:]
    # The same outcome: every kept page out again (none dropped as itself), every copy dropped naming its page.
    check_kinds_outcome(second, site, server)
    assert sorted(second.kept_urls) == sorted(first.kept_urls)
    assert all(d["duplicate_of"] != d["item"]["url"] for d in second.dropped)
    assert second.stat("neardup/revisited") == len(first.kept_urls)
    assert second.stat("neardup/kept") == second.stat("neardup/changed") == 0
    assert f"revisited {len(first.kept_urls)} unchanged and 0 changed pages" in second.log

    # Incremental crawls: unchanged revisits dropped, with their own reason naming the page itself.
    third = run_crawl(settings={**state, "NEARDUP_REVISIT": "drop_unchanged"},
                      spider={"start_url": server.url + "/"}, name="third")
    assert third.scraped == []
    revisits = [d for d in third.dropped if d["reason"] == "RevisitDropped"]
    assert sorted(d["item"]["url"] for d in revisits) == sorted(first.kept_urls)
    assert all(d["message"] == f"unchanged revisit of {d['item']['url']}" for d in revisits)
    assert third.stat("item_dropped_reasons_count/RevisitDropped") == len(first.kept_urls)


def standalone_site(n: int = 10) -> dict[str, Page]:
    paths = [f"/p/{i}.html" for i in range(n)]
    pages = {p: Page(html_page(f"Page {i}", article_words(700 + i, 300))) for i, p in enumerate(paths)}
    return {"/": Page(html_page("Home", article_words(699, 60), links=paths))} | pages


def test_changed_pages_are_emitted_and_replace_the_stored_version(
    run_crawl: RunCrawl, serve_site: Any, tmp_path: Path,
) -> None:
    pages = standalone_site()
    server = serve_site(pages)
    state = {"NEARDUP_STATE_DIR": str(tmp_path / "state"), "NEARDUP_ACTION": "mark"}
    first = run_crawl(settings=state, spider={"start_url": server.url + "/"}, name="first")
    assert first.stat("neardup/kept") == 11
    for i in (1, 4, 7):  # lightly edited: still near-duplicates of their stored versions
        pages[f"/p/{i}.html"] = Page(html_page(f"Page {i}", edit_words(article_words(700 + i, 300), 3, seed=i)))
    second = run_crawl(settings=state, spider={"start_url": server.url + "/"}, name="second")
    assert second.returncode == 0, second.log[-3000:]
    assert len(second.scraped) == 11 and second.dropped == []
    assert second.stat("neardup/changed") == 3 and second.stat("neardup/revisited") == 8
    marks = {path_of(item["url"]): item["neardup"] for item in second.scraped}
    assert {p for p, m in marks.items() if m == {"revisit": True, "changed": True}} == {
        "/p/1.html", "/p/4.html", "/p/7.html"}
    assert all(m == {"revisit": True, "changed": False} for p, m in marks.items()
               if p not in {"/p/1.html", "/p/4.html", "/p/7.html"})
    # The store holds the new content: a third crawl finds every page unchanged.
    third = run_crawl(settings=state, spider={"start_url": server.url + "/"}, name="third")
    assert third.stat("neardup/revisited") == 11 and third.stat("neardup/changed") == 0


def test_a_kept_page_turned_into_a_copy_is_dropped_naming_the_other_and_its_copies_judged_afresh(
    run_crawl: RunCrawl, serve_site: Any, tmp_path: Path,
) -> None:
    a_words, b_words = article_words(801, 300), article_words(802, 300)
    pages = {
        "/": Page(html_page("Home", article_words(800, 60), links=["/b.html", "/a.html"])),
        "/a.html": Page(html_page("A", a_words, links=["/a-copy.html"])),
        "/b.html": Page(html_page("B", b_words)),
        "/a-copy.html": Page(html_page("A", a_words, nav="Mirror")),
    }
    server = serve_site(pages)
    settings = {"NEARDUP_STATE_DIR": str(tmp_path / "state"), "CONCURRENT_REQUESTS": 1}
    first = run_crawl(settings=settings, spider={"start_url": server.url + "/"}, name="first")
    assert first.drops_by_url()[server.url + "/a-copy.html"]["duplicate_of"] == server.url + "/a.html"
    pages["/a.html"] = Page(html_page("B", b_words, links=["/a-copy.html"]))  # /a now copies /b
    second = run_crawl(settings=settings, spider={"start_url": server.url + "/"}, name="second")
    drops = second.drops_by_url()
    assert drops[server.url + "/a.html"]["duplicate_of"] == server.url + "/b.html"
    # /a's stale entry is gone: its former copy matches no stored page any more, so it is kept.
    assert server.url + "/a-copy.html" in second.kept_urls
    assert second.stat("neardup/kept") == 1 and second.stat("neardup/revisited") == 2  # home, /b
    # No drop names a page whose stored content does not near-duplicate the dropped page.
    assert all(d["duplicate_of"] in {server.url + "/b.html"} for d in second.dropped)
    third = run_crawl(settings=settings, spider={"start_url": server.url + "/"}, name="third")
    assert third.drops_by_url()[server.url + "/a.html"]["duplicate_of"] == server.url + "/b.html"
    assert third.stat("neardup/revisited") == 3  # home, /b, /a-copy


def test_ten_recrawls_keep_the_store_flat(run_crawl: RunCrawl, serve_site: Any, tmp_path: Path) -> None:
    pages = standalone_site(20)
    server = serve_site(pages)
    state_dir = tmp_path / "state"
    sizes, changed = [], []
    for crawl in range(10):
        for i in range(3):  # three pages changed before every crawl after the first
            j = (3 * crawl + i) % 20
            if crawl:
                words = edit_words(article_words(700 + j, 300), 2 + crawl % 3, seed=crawl)
                pages[f"/p/{j}.html"] = Page(html_page(f"Page {j}", words))
        result = run_crawl(settings={"NEARDUP_STATE_DIR": str(state_dir)}, spider={"start_url": server.url + "/"},
                           name=f"crawl-{crawl}")
        assert result.returncode == 0 and len(result.scraped) == 21, result.log[-3000:]
        sizes.append((state_dir / STATE_FILE).stat().st_size)
        changed.append(result.stat("neardup/changed"))
    assert changed == [0] + [3] * 9
    assert max(sizes) - min(sizes) <= 0.01 * min(sizes), sizes  # the latest version of 21 keys, every time
