"""The same page twice in one crawl: real crawls over HTTP on 127.0.0.1, each in its own process.

Scrapy's ``start_urls`` bypass the duplicate filter (``dont_filter=True``), so a start URL that pages link to
again is fetched again, and a crawl resumed from its ``JOBDIR`` fetches its start URLs again. Within one crawl
(one ``JOBDIR``, paused or killed and resumed) such a page, unchanged, is a *repeat*: dropped as
``RepeatDropped`` naming the page (marked ``{"repeat": true}`` in mark mode), never emitted twice. A later crawl
meets it as a revisit (emitted again), once.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from neardup_testkit import CrawlResult, Page, article_words, html_page, path_of

RunCrawl = Callable[..., CrawlResult]
PAGES = 8


def loop_site(n: int = PAGES) -> dict[str, Page]:
    """A home page linking to ``n`` articles, each linking back home and to the next article."""
    paths = [f"/p/{i}.html" for i in range(n)]
    pages = {
        path: Page(html_page(f"Page {i}", article_words(900 + i, 300), links=["/", paths[(i + 1) % n]]))
        for i, path in enumerate(paths)
    }
    return {"/": Page(html_page("Home", article_words(899, 120), links=paths)), **pages}


START = {"start_dont_filter": True}  # as Scrapy's start_urls


def emitted(*results: CrawlResult) -> Counter[str]:
    return Counter(path_of(url) for result in results for url in result.kept_urls)


def test_a_start_url_linked_again_is_emitted_once_and_dropped_as_a_repeat(
    run_crawl: RunCrawl, serve_site: Any,
) -> None:
    site = loop_site()
    server = serve_site(site)
    result = run_crawl(spider={"start_url": server.url + "/", **START})
    assert result.returncode == 0, result.log[-3000:]
    assert server.requests.count("/") >= 2  # fetched again: start requests bypass the duplicate filter
    assert emitted(result) == Counter(list(site))  # every page once
    repeats = [d for d in result.dropped if d["reason"] == "RepeatDropped"]
    assert [d["item"]["url"] for d in repeats] == [server.url + "/"] * (server.requests.count("/") - 1)
    assert repeats[0]["message"] == f"repeat of {server.url}/: met again in this crawl, unchanged (emitted once)"
    assert result.stat("neardup/repeats") == len(repeats) == result.stat("item_dropped_reasons_count/RepeatDropped")
    assert result.stat("neardup/revisited") == result.stat("neardup/dropped") == 0
    assert result.stat("neardup/kept") == len(site)
    assert f"{len(repeats)} repeats dropped (pages met again in this crawl, unchanged)" in result.log


def test_mark_mode_marks_a_repeat(run_crawl: RunCrawl, serve_site: Any) -> None:
    site = loop_site()
    server = serve_site(site)
    result = run_crawl(settings={"NEARDUP_ACTION": "mark"}, spider={"start_url": server.url + "/", **START})
    assert result.returncode == 0, result.log[-3000:]
    marks = [(path_of(item["url"]), item["neardup"]) for item in result.scraped]
    assert sorted(p for p, m in marks if m is None) == sorted(site)  # each page once as itself
    repeats = result.stat("neardup/repeats")
    assert [m for p, m in marks if m is not None] == [{"repeat": True, "rule": "repeat"}] * repeats
    assert {p for p, m in marks if m is not None} == {"/"} and result.stat("neardup/repeats") >= 1


def test_a_later_crawl_revisits_each_page_once_and_drops_its_own_repeats(
    run_crawl: RunCrawl, serve_site: Any, tmp_path: Path,
) -> None:
    site = loop_site()
    server = serve_site(site)
    state = {"NEARDUP_STATE_DIR": str(tmp_path / "state")}
    spider = {"start_url": server.url + "/", **START}
    first = run_crawl(settings={**state, "JOBDIR": str(tmp_path / "job-1")}, spider=spider, name="first")
    second = run_crawl(settings={**state, "JOBDIR": str(tmp_path / "job-2")}, spider=spider, name="second")
    for result in (first, second):
        assert result.returncode == 0, result.log[-3000:]
        assert emitted(result) == Counter(list(site))
        assert result.stat("neardup/repeats") >= 1
    # The recrawl rule across crawls stands: every page emitted again, as a revisit, once.
    assert second.stat("neardup/revisited") == len(site) and second.stat("neardup/kept") == 0
    assert first.stat("neardup/revisited") == 0
    # Without JOBDIR each run is a crawl of its own, too.
    third = run_crawl(settings=state, spider=spider, name="third")
    assert emitted(third) == Counter(list(site)) and third.stat("neardup/revisited") == len(site)


SLOW = {"CONCURRENT_REQUESTS": 1, "DOWNLOAD_DELAY": 0.15, "NEARDUP_WORKER": False, "NEARDUP_CONTENT": "body"}


@pytest.fixture
def slow_site(serve_site: Any) -> Iterator[tuple[Any, dict[str, Page]]]:
    site = loop_site(16)
    yield serve_site(site), site


def test_kill_9_and_resume_is_one_crawl_no_page_emitted_twice(
    run_crawl: RunCrawl, slow_site: tuple[Any, dict[str, Page]], tmp_path: Path,
) -> None:
    server, site = slow_site
    jobdir = tmp_path / "job"
    settings = {**SLOW, "JOBDIR": str(jobdir)}
    spider = {"start_url": server.url + "/", **START}
    killed = run_crawl(settings=settings, spider=spider, kill_after_items=4, name="killed")
    assert killed.returncode == -9, killed.log[-3000:]
    assert 4 <= len(killed.passed_on) < len(site), "the kill did not land mid-crawl"
    control_jobdir = tmp_path / "control-job"
    shutil.copytree(jobdir, control_jobdir)

    resumed = run_crawl(settings=settings, spider=spider, name="resumed")
    assert resumed.returncode == 0, resumed.log[-3000:]
    assert resumed.stat("neardup/journal_replayed") >= 4
    passed_on = Counter(path_of(url) for url in killed.passed_on) + emitted(resumed)
    assert max(passed_on.values()) == 1, passed_on  # never twice, the start URL included
    repeats = {path_of(d["item"]["url"]) for d in resumed.dropped if d["reason"] == "RepeatDropped"}
    assert "/" in repeats  # fetched again on resume (and linked again): a repeat of the killed run's page
    # Every page out once; a page missing was inside the pipeline at the kill (journaled, never passed on): the
    # resumed crawl knows it as met (a repeat), as it knows a kept page's copies.
    missing = set(site) - set(passed_on)
    assert len(missing) <= 1 and missing <= repeats, (missing, repeats)

    # Control: the same resume as another crawl (another NEARDUP_CRAWL_ID) emits the start URL again, as a revisit.
    control = run_crawl(settings={**settings, "JOBDIR": str(control_jobdir), "NEARDUP_CRAWL_ID": "another-crawl"},
                        spider=spider, name="control")
    assert control.returncode == 0, control.log[-3000:]
    assert "/" in emitted(control) and control.stat("neardup/revisited") >= 1


def test_ctrl_c_and_resume_is_one_crawl(
    run_crawl: RunCrawl, slow_site: tuple[Any, dict[str, Page]], tmp_path: Path,
) -> None:
    server, site = slow_site
    settings = {**SLOW, "JOBDIR": str(tmp_path / "job")}
    spider = {"start_url": server.url + "/", **START}
    paused = run_crawl(settings=settings, spider=spider, stop_after_items=4, name="paused")
    assert paused.returncode == 0 and paused.stats["finish_reason"] == "shutdown", paused.log[-3000:]
    resumed = run_crawl(settings=settings, spider=spider, name="resumed")
    assert resumed.returncode == 0, resumed.log[-3000:]
    assert emitted(paused, resumed) == Counter(list(site))  # every page once, over the two runs
    assert resumed.stat("neardup/repeats") >= 1 and resumed.stat("neardup/revisited") == 0
