"""Three hosts in one real crawl over loopback: A (the site), B (an identical mirror) and C (a copy whose pages
differ from A's by their footer).

A keeps every page (met first); B's and C's pages are dropped naming A's. Both B and C become mirrors and each
mirror line must name A, the host holding the kept copies, whatever order a Python set lists the hosts in (the
crawl runs under two ``PYTHONHASHSEED`` values). Their skipped requests are no download errors: Scrapy's
``downloader/exception_count`` stays absent and Spidermon's ``DownloaderExceptionMonitor`` passes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from neardup_testkit import NAV, CrawlResult, Page, SiteServer, article_words, html_page

from scrapy_neardup.core.mirror_table import host_of

pytest.importorskip("spidermon")

RunCrawl = Callable[..., CrawlResult]
ARTICLES = 40
MIN_PAGES = 10


def _site(footer: str, links: list[str] | None = None, home_links: list[str] | None = None) -> dict[str, Page]:
    pages = {f"/doc/{i}.html": Page(html_page(f"Section {i}", article_words(7000 + i), nav=NAV, footer=footer))
             for i in range(ARTICLES)}
    if links:  # the last page links to the next host: it is reached after this host's pages (breadth-first)
        last = f"/doc/{ARTICLES - 1}.html"
        pages[last] = Page(html_page(f"Section {ARTICLES - 1}", article_words(7000 + ARTICLES - 1), nav=NAV,
                                     footer=footer, links=links))
    pages["/"] = Page(html_page("Contents", article_words(6999, 80), nav=NAV, footer=footer,
                                links=[*pages, *(home_links or [])]))
    return pages


@pytest.fixture
def three_hosts() -> Iterator[tuple[SiteServer, SiteServer, SiteServer]]:
    footer = "Copyright the documentation authors"
    copy = SiteServer(_site("Served by the example copy network, updated nightly; report problems to its admins"),
                      host="127.0.0.3").start()
    # The copy is linked from the mirror's home page: met after it, its first pages are those the mirror was
    # fetched with (before it was skipped), so C's pages have as many twins on B as on A, a tie that only "which
    # host holds the kept copies" breaks.
    mirror = SiteServer(_site(footer, home_links=[copy.url + "/"]), host="127.0.0.2").start()
    site = SiteServer(_site(footer, links=[mirror.url + "/"]), host="127.0.0.1").start()
    yield site, mirror, copy
    for server in (site, mirror, copy):
        server.stop()


@pytest.mark.parametrize("seed", ["1", "2"])
def test_mirror_lines_name_the_host_holding_the_kept_pages_and_count_no_download_error(
    three_hosts: tuple[SiteServer, SiteServer, SiteServer], run_crawl: RunCrawl, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, seed: str,
) -> None:
    site, mirror, copy = three_hosts
    monkeypatch.setenv("PYTHONHASHSEED", seed)
    settings = {
        "ADDONS": {"scrapy_neardup.NearDuplicateAddon": 300}, "NEARDUP_MIRROR_MIN_PAGES": MIN_PAGES,
        "NEARDUP_STATE_DIR": str(tmp_path / "state"), "NEARDUP_SOFT404_ENABLED": False,
        "DEPTH_PRIORITY": 1, "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue",
        "CONCURRENT_REQUESTS_PER_DOMAIN": 2, "DOWNLOAD_DELAY": 0.01,
        "SPIDERMON_ENABLED": True, "EXTENSIONS": {"spidermon.contrib.scrapy.extensions.Spidermon": 500},
        "SPIDERMON_SPIDER_CLOSE_MONITORS": ["spidermon_suites.DownloadErrorsSuite"],
        "SPIDERMON_MAX_DOWNLOADER_EXCEPTIONS": 0,
    }
    result = run_crawl(settings=settings, spider={"start_url": site.url + "/"}, name=f"seed{seed}")
    assert result.returncode == 0, result.log[-3000:]

    # A kept every content; B's and C's pages, when fetched, were dropped naming A's.
    assert {u for u in result.kept_urls} == {site.url + p for p in site.pages}
    for url, drop in result.drops_by_url().items():
        assert drop["duplicate_of"].startswith(site.url + "/"), (url, drop)

    lines = re.findall(r"INFO: host (\S+) mirrors host (\S+): \d+ of \d+ pages are copies", result.log)
    expected = [(host_of(mirror.url), host_of(site.url)), (host_of(copy.url), host_of(site.url))]
    assert sorted(lines) == sorted(expected), result.log[-3000:]

    # Requests were skipped, none counted as a download error; Spidermon's standard monitor passes.
    assert result.stat("neardup/mirror_requests_skipped") > 0
    assert "downloader/exception_count" not in result.stats, result.stats
    fetched = sum(1 for s in (mirror, copy) for p in s.requests if p != "/robots.txt")
    assert fetched + result.stat("neardup/mirror_requests_skipped") == len(mirror.pages) + len(copy.pages)
    # Spidermon passes the monitor when the stat is absent ("no download error"), skipping its check.
    monitor = re.search(r"\[Spidermon\] Downloader Exceptions monitor/\w+\.\.\. (\w+)", result.log)
    assert monitor is not None and monitor.group(1) in {"OK", "SKIPPED"}, result.log[-3000:]
    assert "[Spidermon] OK" in result.log and "[Spidermon] FAILED" not in result.log
