"""Real crawls whose near-duplicate backend goes down: the exit status, the close reason, the summary, the
``NEARDUP_ON_BACKEND_DOWN`` policies (pass, pause, stop) and the Spidermon suite.

The backend is :class:`neardup_testkit.OutageBackend` (named by dotted path, built in the crawl's subprocess): it
goes down after 5 pages, for a while or for good. The Elasticsearch versions of these scenarios, with a real node
killed, are in ``tests/reliability/test_es_faults.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from neardup_testkit import CrawlResult, NearDupSite, SiteServer, check_kinds_outcome, kinds_site, run_scrapy_command

ARTICLES = 10
#: A site of 51 pages (54 items: three links answered by a soft 404), fetched one at a time, sketched in the
#: crawl's process, so that the backend's outage meets the crawl early and pausing it is seen.
OUTAGE = {
    "NEARDUP_BACKEND": "neardup_testkit.OutageBackend", "NEARDUP_TEST_FAIL_AFTER": 5, "NEARDUP_CONTENT": "body",
    "NEARDUP_WORKER": False, "CONCURRENT_REQUESTS": 1, "DOWNLOAD_DELAY": 0.02,
}
SPIDERMON = {
    "SPIDERMON_ENABLED": True,
    "EXTENSIONS": {"spidermon.contrib.scrapy.extensions.Spidermon": 500},
    "SPIDERMON_SPIDER_CLOSE_MONITORS": ["scrapy_neardup.crawl.monitors.NearDupMonitorSuite"],
}
SUMMARY = re.compile(r"Near-duplicates: checked (\d+) items, .*; (\d+) of (\d+) checked pages \(([\d.]+)%\) passed "
                     r"through unchecked")


@pytest.fixture
def site(serve_kinds_site: Callable[[NearDupSite], SiteServer]) -> tuple[NearDupSite, SiteServer]:
    pages = kinds_site(articles=ARTICLES)
    return pages, serve_kinds_site(pages)


def crawl(run_crawl: Callable[..., CrawlResult], server: SiteServer, **settings: Any) -> CrawlResult:
    return run_crawl(settings={**OUTAGE, **settings}, spider={"start_url": server.url + "/"})


def items_of(result: CrawlResult) -> int:
    return len(result.scraped) + len(result.dropped)


def unchecked_items(result: CrawlResult) -> list[str]:
    return [i["url"] for i in result.scraped if (i.get("neardup") or {}).get("unchecked")]


def test_unchecked_pages_fail_the_crawl(run_crawl: Callable[..., CrawlResult], site: tuple[NearDupSite, SiteServer],
                                        ) -> None:
    """``"pass"`` (the default): every page after the outage passes through unchecked; the crawl runs to its
    end, closes with reason ``neardup_unchecked``, exits with status 1, and its summary says how many."""
    pages, server = site
    result = crawl(run_crawl, server)
    assert result.returncode == 1, result.log[-3000:]
    assert result.data["finish_reason"] == "neardup_unchecked"
    assert result.data["item_errors"] == []
    unchecked, checked = result.stat("neardup/unchecked"), result.stat("neardup/checked")
    # Every page reached the output or was dropped naming a page checked before the outage; the crawl went on.
    assert items_of(result) == checked == len(pages.pages) + len(pages.soft_404)
    assert unchecked == result.stat("neardup/backend_errors") == len(unchecked_items(result)) == checked - 5
    summary = SUMMARY.search(result.log)
    assert summary is not None, result.log[-3000:]
    assert summary.groups() == (str(checked), str(unchecked), str(checked), f"{100 * unchecked / checked:.1f}")
    assert "WARNING: Near-duplicates: checked" in result.log
    assert (f"the crawl ends with a non-zero exit status: {unchecked} of {checked} checked pages "
            f"({unchecked / checked:.1%}) passed through unchecked (NEARDUP_MAX_UNCHECKED=0)") in result.log


@pytest.mark.parametrize(("max_unchecked", "returncode", "reason"), [(1, 0, "finished"), (0.5, 1, "neardup_unchecked")])
def test_a_share_of_unchecked_pages_the_user_allows(
    run_crawl: Callable[..., CrawlResult], site: tuple[NearDupSite, SiteServer], max_unchecked: float,
    returncode: int, reason: str,
) -> None:
    """``NEARDUP_MAX_UNCHECKED``: a share of the checked pages; 1 allows them all (as before), 0.5 not the ~90%
    of this crawl."""
    _, server = site
    result = crawl(run_crawl, server, NEARDUP_MAX_UNCHECKED=max_unchecked)
    assert (result.returncode, result.data["finish_reason"]) == (returncode, reason), result.log[-3000:]
    assert result.stat("neardup/unchecked") > result.stat("neardup/checked") / 2
    assert SUMMARY.search(result.log)  # said either way
    assert ("the crawl ends with a non-zero exit status" in result.log) == bool(returncode)


def test_scrapy_crawl_command_exits_with_status_1(tmp_path: Any, site: tuple[NearDupSite, SiteServer]) -> None:
    """What a scheduler sees: ``scrapy crawl`` itself exits with status 1."""
    _, server = site
    proc = run_scrapy_command(tmp_path, "crawl", "neardup_test", "-a", f"start_url={server.url}/",
                              settings={**OUTAGE, "LOG_LEVEL": "INFO"})
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Closing spider (neardup_unchecked)" in proc.stderr
    assert SUMMARY.search(proc.stderr)


def test_stop_closes_the_spider(run_crawl: Callable[..., CrawlResult], site: tuple[NearDupSite, SiteServer]) -> None:
    """``"stop"``: the first failed check closes the spider (``neardup_backend_down``, exit status 1); the items
    in flight pass through unchecked and are counted; the rest of the site is not fetched."""
    pages, server = site
    result = crawl(run_crawl, server, NEARDUP_ON_BACKEND_DOWN="stop")
    assert result.returncode == 1, result.log[-3000:]
    assert result.data["finish_reason"] == "neardup_backend_down"
    unchecked = result.stat("neardup/unchecked")
    assert 1 <= unchecked == result.stat("neardup/backend_errors") == len(unchecked_items(result)) <= 3
    assert items_of(result) == result.stat("neardup/checked") < len(pages.pages) / 2
    assert "stopping the crawl (close reason neardup_backend_down)" in result.log
    assert SUMMARY.search(result.log)


def test_pause_waits_for_the_backend_and_checks_every_page(
    run_crawl: Callable[..., CrawlResult], site: tuple[NearDupSite, SiteServer],
) -> None:
    """``"pause"``: the crawl pauses while the backend is down (3 s), tries it every 0.5 s, and resumes when it
    answers: every page is checked, none passes unchecked, the crawl finishes with status 0. Only the page in
    flight when it paused met the outage."""
    pages, server = site
    result = crawl(run_crawl, server, NEARDUP_ON_BACKEND_DOWN="pause", NEARDUP_TEST_DOWN_FOR=3,
                   NEARDUP_BACKEND_RETRY_INTERVAL=0.5)
    assert result.returncode == 0, result.log[-3000:]
    assert result.data["finish_reason"] == "finished"
    assert result.stat("neardup/unchecked") == 0 and unchecked_items(result) == []
    assert 1 <= result.stat("neardup/backend_errors") <= 2  # the crawl paused: no new page met the outage
    assert result.stat("neardup/test_outage_calls") >= 4  # tried again while down (3 s, every 0.5 s)
    assert result.stat("neardup/backend_pauses") == 1
    assert result.stat("neardup/backend_paused_seconds") >= 2
    assert items_of(result) == result.stat("neardup/checked") == len(pages.pages) + len(pages.soft_404)
    check_kinds_outcome(result, pages, server)
    assert "pausing the crawl" in result.log and "answers again after" in result.log
    assert re.search(r"the crawl paused 1 time\(s\), [\d.]+ s in all, while the backend was down", result.log)


def test_pause_stops_after_the_longest_wait(run_crawl: Callable[..., CrawlResult],
                                           site: tuple[NearDupSite, SiteServer]) -> None:
    """``"pause"`` with a backend that stays down: after ``NEARDUP_BACKEND_DOWN_MAX_WAIT`` the crawl stops as
    ``"stop"`` does; the pages that waited pass through unchecked."""
    pages, server = site
    result = crawl(run_crawl, server, NEARDUP_ON_BACKEND_DOWN="pause", NEARDUP_BACKEND_DOWN_MAX_WAIT=2,
                   NEARDUP_BACKEND_RETRY_INTERVAL=0.5)
    assert result.returncode == 1, result.log[-3000:]
    assert result.data["finish_reason"] == "neardup_backend_down"
    assert 1 <= result.stat("neardup/unchecked") == len(unchecked_items(result)) <= 3
    assert result.stat("neardup/backend_pauses") == 1
    assert items_of(result) < len(pages.pages) / 2
    assert "it did not answer for 2 s (NEARDUP_BACKEND_DOWN_MAX_WAIT=2)" in result.log


def test_pause_does_not_hold_up_a_crawl_closing_for_another_reason(
    run_crawl: Callable[..., CrawlResult], site: tuple[NearDupSite, SiteServer],
) -> None:
    """A crawl paused for the backend that closes for another reason (here ``CLOSESPIDER_TIMEOUT``; Ctrl-C alike)
    closes at once: the waiting pages pass through unchecked (and fail the exit status), not after the longest
    wait."""
    _, server = site
    result = crawl(run_crawl, server, NEARDUP_ON_BACKEND_DOWN="pause", NEARDUP_BACKEND_RETRY_INTERVAL=0.5,
                   CLOSESPIDER_TIMEOUT=4)
    assert result.data["finish_reason"] == "closespider_timeout", result.log[-3000:]
    assert result.returncode == 1
    assert 1 <= result.stat("neardup/unchecked") == len(unchecked_items(result))
    assert result.stat("neardup/backend_paused_seconds") < 30
    assert "the crawl is closing while the near-duplicate backend is down" in result.log


def spidermon_results(log: str) -> dict[str, str]:
    """Monitor name -> OK / FAIL / SKIPPED..., from Spidermon's report in the crawl's log."""
    return dict(re.findall(r"\[Spidermon\] (Near-duplicate [^.]+)\.\.\. (\w+)", log))


def test_spidermon_suite(run_crawl: Callable[..., CrawlResult], site: tuple[NearDupSite, SiteServer]) -> None:
    """Spidermon runs :class:`~scrapy_neardup.crawl.monitors.NearDupMonitorSuite` when the spider closes: in a
    crawl whose backend went down the backend and unchecked monitors fail; in a healthy crawl (the embedded
    store) every monitor passes. The drop-rate monitor fails when its bound is below the crawl's rate."""
    pages, server = site
    failing = crawl(run_crawl, server, **SPIDERMON)
    results = spidermon_results(failing.log)
    assert results == {
        "Near-duplicate backend/Backend errors at most NEARDUP_MONITOR_MAX_BACKEND_ERRORS": "FAIL",
        "Near-duplicate backend/Crawl not stopped by a backend outage": "OK",
        "Near-duplicate unchecked pages/Unchecked share at most NEARDUP_MONITOR_MAX_UNCHECKED": "FAIL",
        "Near-duplicate drop rate/Drop rate at most NEARDUP_MONITOR_MAX_DROP_RATE": "OK",
    }, failing.log[-5000:]
    assert "[Spidermon] FAILED (failures=2)" in failing.log
    unchecked, checked = failing.stat("neardup/unchecked"), failing.stat("neardup/checked")
    assert f"{unchecked} of {checked} checked pages ({unchecked / checked:.1%}) passed through unchecked" in failing.log

    healthy = run_crawl(settings=SPIDERMON, spider={"start_url": server.url + "/"}, name="healthy")
    assert healthy.returncode == 0 and healthy.data["finish_reason"] == "finished", healthy.log[-3000:]
    assert set(spidermon_results(healthy.log).values()) == {"OK"} and len(spidermon_results(healthy.log)) == 4
    assert "[Spidermon] OK" in healthy.log

    # The same healthy crawl with a drop-rate bound below its rate (40 copies of 54 pages): that monitor fails.
    strict = run_crawl(settings={**SPIDERMON, "NEARDUP_MONITOR_MAX_DROP_RATE": 0.5},
                       spider={"start_url": server.url + "/"}, name="strict")
    assert strict.returncode == 0
    assert spidermon_results(strict.log)["Near-duplicate drop rate/Drop rate at most NEARDUP_MONITOR_MAX_DROP_RATE"] \
        == "FAIL", strict.log[-5000:]
    assert "checked pages" in strict.log and "were near-duplicates; NEARDUP_MONITOR_MAX_DROP_RATE allows 50.0%" in \
        strict.log


def test_spidermon_suite_when_the_crawl_stops(run_crawl: Callable[..., CrawlResult],
                                              site: tuple[NearDupSite, SiteServer]) -> None:
    """A crawl stopped by the outage: the backend monitor names the close reason."""
    _, server = site
    result = crawl(run_crawl, server, NEARDUP_ON_BACKEND_DOWN="stop", NEARDUP_MAX_UNCHECKED=1,
                   NEARDUP_MONITOR_MAX_BACKEND_ERRORS=10, **SPIDERMON)
    results = spidermon_results(result.log)
    assert results["Near-duplicate backend/Crawl not stopped by a backend outage"] == "FAIL", result.log[-5000:]
    assert results["Near-duplicate backend/Backend errors at most NEARDUP_MONITOR_MAX_BACKEND_ERRORS"] == "OK"
    assert result.returncode == 1  # stopped by the outage: whatever share is allowed
