"""Two crawler processes on one Elasticsearch index agree on a mirror host from their combined counts.

Hosts on loopback addresses: the original (127.0.0.1), a full mirror of it (127.0.0.2), a host copying part of
it (127.0.0.3). Crawler ``c`` starts at the original's ``/s{c}/``, which links its half of the articles and the
other hosts' ``/s{c}/``; there each host links its own half. So each process alone checks ``PER + 1`` pages of
the mirror, fewer than ``MIN_PAGES``: only the fleet's totals (``2 * (PER + 1)``) can make it a mirror.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import neardup_testkit
import pytest
from neardup_testkit import CrawlResult, Page, SiteServer, article_words, html_page, run_crawl_process

from es_integration.hosts import hosts_index
from scrapy_neardup.core.mirror_table import host_of

pytestmark = pytest.mark.es

CRAWLERS = 2
PER = 20  # mirror articles per crawler
PARTIAL_COPIES = PARTIAL_OWN = 6  # per crawler
MIN_PAGES = 26  # > PER + 1 (one process alone), <= 2 * (PER + 1) (the fleet); the partial host reaches it too


@dataclass
class Fleet:
    original: SiteServer
    mirror: SiteServer
    partial: SiteServer
    contents: list[set[str]] = field(default_factory=list)  # each: the URLs of one content, one must be kept

    @property
    def servers(self) -> list[SiteServer]:
        return [self.original, self.mirror, self.partial]


def _article(i: int, nav: str) -> Page:
    return Page(html_page(f"Article {i}", article_words(3000 + i), nav=nav))


def _half(c: int) -> range:
    return range(c * PER, (c + 1) * PER)


@pytest.fixture
def fleet_site() -> Iterator[Fleet]:
    mirror_pages: dict[str, Page] = {}
    partial_pages: dict[str, Page] = {}
    for c in range(CRAWLERS):
        articles = {f"/news/{i}.html": _article(i, "Mirror hosted by Example Mirror Network") for i in _half(c)}
        mirror_pages |= articles
        mirror_pages[f"/s{c}/"] = Page(html_page(f"Mirror {c}", article_words(7000 + c, 300), links=list(articles)))
        own = {f"/copies/{i}.html": _article(i, "Partner reprints") for i in _half(c)[:PARTIAL_COPIES]}
        own |= {f"/own/{c}-{j}.html": Page(html_page(f"Own {j}", article_words(5000 + 100 * c + j)))
                for j in range(PARTIAL_OWN)}
        partial_pages |= own
        partial_pages[f"/s{c}/"] = Page(html_page(f"Partner {c}", article_words(7100 + c, 300), links=list(own)))
    mirror = SiteServer(mirror_pages, host="127.0.0.2").start()
    partial = SiteServer(partial_pages, host="127.0.0.3").start()
    original_pages: dict[str, Page] = {}
    for c in range(CRAWLERS):
        articles = {f"/news/{i}.html": _article(i, "Home News Sports") for i in _half(c)}
        original_pages |= articles
        original_pages[f"/s{c}/"] = Page(html_page(f"Home {c}", article_words(7200 + c, 300),
                                                   links=[*articles, f"{mirror.url}/s{c}/", f"{partial.url}/s{c}/"]))
    original = SiteServer(original_pages, host="127.0.0.1").start()
    contents = [{original.url + p, mirror.url + p} for p in original_pages if p.startswith("/news/")]
    for c in range(CRAWLERS):
        for i in _half(c)[:PARTIAL_COPIES]:
            contents[i].add(f"{partial.url}/copies/{i}.html")
    contents += [{s.url + p} for s in (original, mirror) for p in s.pages if not p.startswith("/news/")]
    contents += [{partial.url + p} for p in partial_pages if not p.startswith("/copies/")]
    found = Fleet(original, mirror, partial, contents)
    yield found
    for server in found.servers:
        server.stop()


@pytest.fixture
def es_index(es_client: Any) -> Iterator[str]:
    name = f"neardup-mirror-fleet-{uuid.uuid4().hex[:8]}"
    yield name
    es_client.indices.delete(index=f"{name},{hosts_index(name)}", ignore_unavailable=True)


def fleet_settings(es_url: str, es_index: str, **extra: Any) -> dict[str, Any]:
    return {
        "ADDONS": {"scrapy_neardup.NearDuplicateAddon": 300}, "NEARDUP_SOFT404_ENABLED": False,
        "NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": es_url, "NEARDUP_ES_INDEX": es_index,
        "NEARDUP_MIRROR_MIN_PAGES": MIN_PAGES, "NEARDUP_MIRROR_SYNC_INTERVAL": 0.2,
        # Breadth-first, one request per host at a time, the mirror (a slower site) every 0.2 s; and downloads
        # wait for the checks (a few responses in the scraper at most), whatever the node's speed: both processes
        # are still fetching the mirror's articles (two links away) when the fleet's counts reach MIN_PAGES.
        "DEPTH_PRIORITY": 1, "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue",
        "CONCURRENT_REQUESTS": 4, "CONCURRENT_REQUESTS_PER_DOMAIN": 1, "SCRAPER_SLOT_MAX_ACTIVE_SIZE": 20_000,
        "DOWNLOAD_DELAY": 0.05, "DOWNLOAD_SLOTS": {"127.0.0.2": {"delay": 0.2}}, "LOG_LEVEL": "DEBUG",
        # The mirror's pages do not wait for the original's copies (which copy is kept: test_crawl_order.py): in a
        # scraper this small, pages waiting for the original's, still to be downloaded, would hold the downloads
        # back, and each process fetch its 21 mirror pages before the fleet's counts reach MIN_PAGES.
        "NEARDUP_COPY_WAIT": 0,
        **extra,
    }


def run_fleet(tmp_path: Path, settings: dict[str, Any], crawlers: int) -> dict[int, CrawlResult]:
    results: dict[int, CrawlResult] = {}
    errors: dict[int, BaseException] = {}

    def crawl(c: int) -> None:
        try:
            results[c] = run_crawl_process(tmp_path, settings=settings, spider={"start_url": starts[c]},
                                           name=f"crawler{c}")
            (tmp_path / f"crawler{c}.log").write_text(results[c].log)  # kept for a failure's post-mortem
        except BaseException as exc:  # reported below
            errors[c] = exc

    starts = settings.pop("_starts")
    threads = [threading.Thread(target=crawl, args=(c,)) for c in range(crawlers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(100)
    assert not errors, errors
    for c, result in results.items():
        assert result.returncode == 0, (c, result.log[-3000:])
        assert result.data["item_errors"] == [], c
        assert result.stat("neardup/backend_errors") == 0, c
    return results


def decision_lines(result: CrawlResult) -> list[tuple[str, int, int]]:
    """(mirror host, copies, checked) of each "host B mirrors host A" line."""
    return [(m.group(1), int(m.group(2)), int(m.group(3))) for m in re.finditer(
        r"INFO: host (\S+) mirrors host \S+: (\d+) of (\d+) pages are copies; skipping its requests", result.log)]


def check_nothing_distinct_lost(site: Fleet, results: dict[int, CrawlResult]) -> set[str]:
    kept = [url for r in results.values() for url in r.kept_urls]
    assert len(kept) == len(set(kept))
    for content in site.contents:
        assert len(content & set(kept)) == 1, content
    assert len(kept) == len(site.contents)
    for r in results.values():
        for url, drop in r.drops_by_url().items():
            assert drop["duplicate_of"] in kept, url
    return set(kept)


def test_two_crawlers_agree_on_a_mirror_from_their_combined_counts(
    fleet_site: Fleet, es_url: str, es_client: Any, es_index: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(neardup_testkit, "CRAWL_TIMEOUT", 90)
    site = fleet_site
    settings = fleet_settings(es_url, es_index, _starts=[f"{site.original.url}/s{c}/" for c in range(CRAWLERS)])
    results = run_fleet(tmp_path, settings, CRAWLERS)
    original, mirror, partial = (host_of(s.url) for s in site.servers)

    skipped_total = 0
    for c, result in results.items():
        # Each process alone checked at most PER + 1 pages of the mirror: fewer than MIN_PAGES.
        fetched = [p for p in site.mirror.requests if p == f"/s{c}/" or
                   (p.startswith("/news/") and int(p.split("/")[2].split(".")[0]) in _half(c))]
        assert len(fetched) <= PER + 1 < MIN_PAGES
        # ... yet it decided, on the fleet's totals, and skipped the mirror's remaining requests.
        lines = decision_lines(result)
        assert [line[0] for line in lines] == [mirror], (c, result.log[-3000:])
        _, copies, checked = lines[0]
        assert checked >= MIN_PAGES > len(fetched) and copies >= 0.9 * checked
        skipped = result.stat("neardup/mirror_requests_skipped")
        assert skipped >= 1, (c, len(fetched))
        assert len(fetched) + skipped == PER + 1  # each of its mirror requests fetched or skipped, once
        assert result.stat("neardup/mirror_hosts") == 1
        assert result.stat("neardup/mirror_syncs") >= 2 and result.stat("neardup/mirror_sync_errors") == 0
        skipped_total += skipped
    # The partial mirror (half of its pages copies) is crawled to the end by both.
    assert set(site.partial.requests) == set(site.partial.pages)
    assert partial not in {line[0] for r in results.values() for line in decision_lines(r)}
    kept = check_nothing_distinct_lost(site, results)
    print(f"\nmirror fleet: {len(site.mirror.requests)} mirror pages fetched, {skipped_total} skipped "
          f"(of {CRAWLERS * (PER + 1)}), {len(kept)} pages kept")

    # The store holds each process's final counts: their sums are what the two crawls checked.
    es_client.indices.refresh(index=hosts_index(es_index))
    docs = [h["_source"] for h in es_client.search(index=hosts_index(es_index), size=100)["hits"]["hits"]]
    assert len({d["process"] for d in docs}) == CRAWLERS
    assert sum(d["checked"] for d in docs if d["kind"] == "host" and d["host"] == mirror) == len(site.mirror.requests)
    assert sum(d["copies"] for d in docs if d["kind"] == "pair" and (d["host"], d["other"]) == (mirror, original)) \
        == len([p for p in site.mirror.requests if p.startswith("/news/")])


def test_a_failing_store_leaves_each_process_on_its_own_counts(
    fleet_site: Fleet, es_url: str, es_client: Any, es_index: str, tmp_path: Path
) -> None:
    """The sibling index exists with another mapping, so every push is refused: the crawl goes on, warns once,
    counts the failures, and still decides from its own counts (MIN_PAGES lowered so one process can; the
    decision may come after the mirror's last request, as the original's pages are checked alongside)."""
    es_client.indices.create(index=hosts_index(es_index),
                             mappings={"dynamic": "strict", "properties": {"kind": {"type": "long"}}})
    site = fleet_site
    settings = fleet_settings(es_url, es_index, NEARDUP_MIRROR_MIN_PAGES=PER // 2,
                              _starts=[f"{site.original.url}/s0/"])
    (result,) = run_fleet(tmp_path, settings, 1).values()
    assert result.stat("neardup/mirror_sync_errors") >= 2
    assert result.stat("neardup/mirror_syncs") == 0
    assert result.log.count("mirror counts could not be shared through") == 1
    assert [line[0] for line in decision_lines(result)] == [host_of(site.mirror.url)]
    assert result.stat("neardup/mirror_hosts") == 1
    assert set(site.partial.requests) == {p for p in site.partial.pages if p == "/s0/" or "/0-" in p
                                          or (p.startswith("/copies/") and int(p[8:].split(".")[0]) < PER)}
