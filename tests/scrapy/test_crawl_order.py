"""The same crawl gives the same outcome every time: which copy is kept, which soft 404 is found, which host is
the mirror. Real crawls over HTTP on loopback hosts, each in its own process, repeated.

* Four hosts (``four_hosts``): an original with soft-404 templates under several first path segments (one
  "not found" page per section, others answered by the root's), a full mirror linked from its home page (so
  the two hosts are downloaded side by side), a partner reprinting a few of its articles under other paths, and
  a distinct host; the add-on's defaults with a polite ``DOWNLOAD_DELAY`` of 0.1 s (Scrapy randomizes it between
  0.05 and 0.15 s per request).
* Two start URLs serving the same site (``test_..._start_url_order_decides``), the first one's soft-404 probes
  answered late: the probe that answers first must not decide which copy is kept.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from neardup_testkit import NAV, CrawlResult, Page, SiteServer, article_words, html_page, run_crawl_process

RunCrawl = Callable[..., CrawlResult]
ADDON = {"scrapy_neardup.NearDuplicateAddon": 300}
SEGMENTS = ["news", "lib", "docs", "blog", "help"]
PER_SEGMENT = 8
RUNS = 6
#: Each section's own "not found" page; /blog/, /help/ and the root answer with the root's.
NOT_FOUND = {
    "": "Page not found. Sorry, we could not find the page you asked for. It may have moved, or the link you followed "
        "may be out of date. Try the home page or the search box, or contact the web team.",
    "news": "Story not found. This story is no longer available in our newsroom archive: stories are removed after a "
            "year, or when a correction replaces them. Browse the latest headlines instead.",
    "lib": "No such library entry. The catalogue has no record under this name: the item may have been withdrawn, "
           "renamed, or merged into another volume. Search the catalogue or ask a librarian for help.",
    "docs": "This documentation page does not exist in the current release. It may describe a removed feature or an "
            "older version; pick a version from the menu or read the changelog to learn what changed.",
}
SOFT_404S = ["/news/missing-1.html", "/lib/missing-1.html", "/lib/missing-2.html", "/docs/missing-1.html",
             "/old/story-1.html", "/gone.html"]
MIRROR_NAV = "Mirror hosted by Example Mirror Network"


def _fallbacks() -> dict[str, Any]:
    return {"fallback": Page(html_page("Not found", NOT_FOUND[""].split(), nav=NAV)),
            "section_fallbacks": {f"/{s}/": Page(html_page("Not found", NOT_FOUND[s].split(), nav=NAV))
                                  for s in ("news", "lib", "docs")}}


def _articles(nav: str, per_segment: int = PER_SEGMENT) -> dict[str, Page]:
    pages, n = {}, 0
    for segment in SEGMENTS:
        for i in range(per_segment):
            pages[f"/{segment}/{i}.html"] = Page(html_page(f"{segment} {i}", article_words(3000 + n), nav=nav))
            n += 1
    return pages


def _site(nav: str, other_hosts: list[str]) -> dict[str, Page]:
    """Home links the other hosts, the soft 404s, then every article (Scrapy's default LIFO queue fetches the last
    links first: the articles, then the soft 404s)."""
    pages = _articles(nav)
    pages["/"] = Page(html_page("Home", article_words(2999, 80), nav=nav, links=[*other_hosts, *SOFT_404S, *pages]))
    return pages


# -- the rule, without a crawl -----------------------------------------------------------------------------------


class _Judge:
    def __init__(self) -> None:
        self.settled_hosts: set[str] = set()

    def settled(self, host: str) -> bool:
        return host in self.settled_hosts


def test_which_pages_wait() -> None:
    from scrapy_neardup.core.mirror_table import host_of
    from scrapy_neardup.crawl.context import CrawlContext
    from scrapy_neardup.crawl.host_settings import HostSettings
    from scrapy_neardup.crawl.order import KeepOrder

    a, b = "http://a.test", "http://b.test"
    context = CrawlContext(hosts=HostSettings(copy_wait=2.0, mirror_min_pages=3))
    hooks = context.hooks
    order = KeepOrder(context)
    assert not order.must_wait(f"{a}/x")  # no request scheduled for its host: the pipeline driven on its own
    hooks.meet(host_of(a))  # type: ignore[arg-type]
    hooks.meet(host_of(b))  # type: ignore[arg-type]
    assert not order.must_wait(f"{a}/x")  # the host met first never waits
    assert order.must_wait(f"{b}/x")
    for i in range(3):  # without a judge, a host's first min_pages pages wait
        order.checked(f"{b}/own-{i}")
    assert not order.must_wait(f"{b}/x")
    judge = _Judge()
    hooks.copy_judges.append(judge)  # the mirror middleware: it decides
    assert order.must_wait(f"{b}/x")
    judge.settled_hosts.add(host_of(b))  # type: ignore[arg-type]
    assert not order.must_wait(f"{b}/x")
    still = CrawlContext(hosts=HostSettings(copy_wait=0.0, mirror_min_pages=3))
    still.hooks = hooks
    assert not KeepOrder(still).must_wait(f"{b}/y")


def test_a_page_whose_path_an_earlier_host_checked_goes_on_at_once() -> None:
    import asyncio

    from scrapy_neardup.core.mirror_table import host_of
    from scrapy_neardup.crawl.context import CrawlContext
    from scrapy_neardup.crawl.host_settings import HostSettings
    from scrapy_neardup.crawl.order import KeepOrder

    a, b = "http://a.test", "http://b.test"
    context = CrawlContext(hosts=HostSettings(copy_wait=60.0, mirror_min_pages=3))
    for host in (a, b):
        context.hooks.meet(host_of(host))  # type: ignore[arg-type]
    counts = context.counts

    order = KeepOrder(context, room=1000)
    order.checked(f"{a}/news/1.html?p=2")
    asyncio.run(asyncio.wait_for(order.wait_turn(f"{b}/news/1.html?p=2", 10), 1.0))  # no wait: checked on a
    assert counts == {}
    asyncio.run(asyncio.wait_for(order.wait_turn(f"{b}/news/2.html", 2000), 1.0))  # no room left: no wait either
    assert counts == {"copy_waits_full": 1}


@dataclass
class FourHosts:
    original: SiteServer
    mirror: SiteServer
    partial: SiteServer
    distinct: SiteServer
    reprinted: dict[str, str] = field(default_factory=dict)  # partner path -> original path

    @property
    def servers(self) -> list[SiteServer]:
        return [self.original, self.mirror, self.partial, self.distinct]

    def expected_kept(self) -> set[str]:
        """Every page once: the original's (its soft 404s aside), the partner's own, the distinct host's."""
        kept = {self.original.url + p for p in self.original.pages}
        kept |= {self.partial.url + p for p in self.partial.pages if p not in self.reprinted}
        return kept | {self.distinct.url + p for p in self.distinct.pages}


@pytest.fixture
def four_hosts() -> Iterator[FourHosts]:
    # The partner reprints the articles the original fetches first (the last ones it links), under other paths.
    reprinted = {f"/copies/{i}.html": f"/help/{i}.html" for i in range(PER_SEGMENT - 4, PER_SEGMENT)}
    originals = _articles(NAV)
    partial_pages = {path: Page(originals[source].body.replace(NAV, "Partner reprints"))
                     for path, source in reprinted.items()}
    partial_pages |= {f"/own/{i}.html": Page(html_page(f"Own {i}", article_words(5000 + i))) for i in range(6)}
    partial_pages["/"] = Page(html_page("Partner home", article_words(4999, 80), links=list(partial_pages)))
    distinct_pages = {f"/p/{i}.html": Page(html_page(f"Distinct {i}", article_words(6000 + i))) for i in range(6)}
    distinct_pages["/"] = Page(html_page("Distinct home", article_words(5999, 80), links=list(distinct_pages)))
    partial = SiteServer(partial_pages, host="127.0.0.3").start()
    distinct = SiteServer(distinct_pages, host="127.0.0.4").start()
    mirror = SiteServer(_site(MIRROR_NAV, []), host="127.0.0.2", **_fallbacks()).start()
    original = SiteServer(_site(NAV, [mirror.url + "/", partial.url + "/", distinct.url + "/"]), host="127.0.0.1",
                          **_fallbacks()).start()
    hosts = FourHosts(original, mirror, partial, distinct, reprinted)
    yield hosts
    for server in hosts.servers:
        server.stop()


@dataclass(frozen=True)
class Outcome:
    """What one run decided, in the terms that must not change from run to run."""

    kept: frozenset[str]
    soft_404s: frozenset[str]
    mirror_decisions: tuple[tuple[str, str], ...]


def _outcome(result: CrawlResult) -> Outcome:
    drops = result.drops_by_url()
    decisions = re.findall(r"host (\S+) mirrors host (\S+): \d+ of \d+ pages", result.log)
    return Outcome(frozenset(result.kept_urls),
                   frozenset(u for u, d in drops.items() if d["reason"] == "Soft404Dropped"),
                   tuple(decisions))


def _run(workdir: Path, name: str, spider: dict[str, Any], **settings: Any) -> CrawlResult:
    result = run_crawl_process(workdir, name=name, spider=spider, settings={
        "ADDONS": ADDON, "DOWNLOAD_DELAY": 0.1, "NEARDUP_STATE_DIR": str(workdir / f"{name}-state"), **settings,
    })
    assert result.returncode == 0 and result.stats["finish_reason"] == "finished", result.log[-3000:]
    return result


def test_four_host_crawl_gives_the_same_outcome_every_run(four_hosts: FourHosts, tmp_path: Path) -> None:
    hosts = four_hosts
    outcomes, mirror_fetched = [], []
    for run in range(RUNS):
        for server in hosts.servers:
            server.requests.clear()
        result = _run(tmp_path, f"run{run}", {"start_url": hosts.original.url + "/"})
        outcome = _outcome(result)
        outcomes.append(outcome)
        fetched = [p for p in hosts.mirror.requests if "neardup-soft404-probe-" not in p]
        mirror_fetched.append(len(fetched))

        # Every soft 404 of the original is found, whichever section it is under; none is ever emitted.
        assert {u for u in outcome.soft_404s if u.startswith(hosts.original.url)} == {
            hosts.original.url + p for p in SOFT_404S}
        assert not {u for u in outcome.kept if any(u.endswith(p) for p in SOFT_404S)}
        assert {hosts.mirror.url + p for p in SOFT_404S if p in fetched} <= outcome.soft_404s
        # Each section the original's pages live under was probed once, with the root: nothing left to chance.
        probed = sorted(p.rsplit("/", 1)[0] for p in hosts.original.requests if "neardup-soft404-probe-" in p)
        assert probed == sorted(["", *(f"/{s}" for s in [*SEGMENTS, "old"])]), probed
        assert result.stat("neardup/soft404_unprobed") == 0

        # The original's copies are the ones kept: the mirror and the partner's reprints are dropped naming them.
        assert outcome.kept == hosts.expected_kept(), sorted(outcome.kept ^ hosts.expected_kept())
        for url, drop in result.drops_by_url().items():
            if drop["reason"] == "NearDuplicateDropped":
                assert drop["duplicate_of"].startswith(hosts.original.url), (url, drop)
        # The mirror is named, and only it; the original, whose pages are the kept ones, is fetched to the end.
        assert outcome.mirror_decisions == ((hosts.mirror.url, hosts.original.url),)
        assert set(hosts.original.requests) >= set(hosts.original.pages) | set(SOFT_404S)
        assert result.stat("neardup/mirror_requests_skipped") > 0
        assert len(fetched) + result.stat("neardup/mirror_requests_skipped") == len(hosts.mirror.pages) + len(
            SOFT_404S)
    assert all(outcome == outcomes[0] for outcome in outcomes), outcomes
    print(f"mirror pages fetched per run: {mirror_fetched} of {len(hosts.mirror.pages) + len(SOFT_404S)}")


@pytest.fixture
def two_copies() -> Iterator[tuple[SiteServer, SiteServer]]:
    """One site served twice; the first one answers its soft-404 probes 0.5 s late."""
    pages = _articles(NAV, per_segment=16)
    pages["/"] = Page(html_page("Home", article_words(2999, 80), nav=NAV, links=list(pages)))
    first = SiteServer(pages, host="127.0.0.1", slow={"neardup-soft404-probe-": 0.5}, **_fallbacks()).start()
    second = SiteServer(dict(pages), host="127.0.0.2", **_fallbacks()).start()
    yield first, second
    first.stop()
    second.stop()


@pytest.mark.parametrize("run", range(3))
def test_two_start_urls_serving_one_site_start_url_order_decides(
    two_copies: tuple[SiteServer, SiteServer], tmp_path: Path, run: int,
) -> None:
    """The host listed first is the original, though the other's probes answer first: its pages are kept, the
    other is named the mirror and skipped, and the mirror rule never skips the host whose pages were kept."""
    first, second = two_copies
    result = _run(tmp_path, "crawl", {"start_url": first.url + "/", "extra_starts": [second.url + "/"]})
    kept_hosts = {url.rsplit(":", 1)[0] for url in result.kept_urls}
    assert kept_hosts == {first.url.rsplit(":", 1)[0]}, sorted(result.kept_urls)
    assert len(result.kept_urls) == len(first.pages)
    assert _outcome(result).mirror_decisions == ((second.url, first.url),)
    assert set(first.requests) >= set(first.pages)  # never skipped
    assert result.stat("neardup/mirror_requests_skipped") > 0
    fetched = [p for p in second.requests if "neardup-soft404-probe-" not in p]
    assert len(fetched) < len(second.pages)
    print(f"second host: {len(fetched)} of its {len(second.pages)} pages fetched")
    # The copies waited for the original's: counted, and the first host's pages never did.
    assert result.stat("neardup/copy_waits") > 0


def test_without_waiting_the_host_whose_pages_were_kept_is_the_original(
    two_copies: tuple[SiteServer, SiteServer], tmp_path: Path,
) -> None:
    """The control: with ``NEARDUP_COPY_WAIT = 0`` the second host, whose probes answer first, runs ahead and its
    copies are checked first and kept. The mirror rule then agrees with the pipeline: the first host, whose pages
    were dropped, is the mirror, and the second, whose pages were kept, is never skipped."""
    first, second = two_copies
    result = _run(tmp_path, "crawl", {"start_url": first.url + "/", "extra_starts": [second.url + "/"]},
                  NEARDUP_COPY_WAIT=0)
    kept_on_second = [url for url in result.kept_urls if url.startswith(second.url)]
    assert len(kept_on_second) > len(result.kept_urls) // 2, sorted(result.kept_urls)
    assert result.stat("neardup/copy_waits") == 0
    assert _outcome(result).mirror_decisions in ((), ((first.url, second.url),))
    assert set(second.requests) >= set(second.pages)  # never skipped


def test_a_mirrors_request_withdrawn_before_download_is_no_longer_waited_for(tmp_path: Path) -> None:
    """The mirror middleware hands a request to a mirror back (to be refused when scheduled again): scheduled
    once, it brings no page, and a later host's page at its path does not wait for it."""
    import asyncio

    from scrapy import Request
    from scrapy.exceptions import IgnoreRequest
    from scrapy.utils.test import get_crawler

    from scrapy_neardup.core.mirror_table import host_of
    from scrapy_neardup.crawl.context import CrawlContext
    from scrapy_neardup.crawl.mirrors import MirrorHostsMiddleware
    from scrapy_neardup.crawl.order import MAX_EXTRA_WAIT, KeepOrder

    crawler = get_crawler(settings_dict={"NEARDUP_COPY_WAIT": 0.2, "NEARDUP_MIRROR_MIN_PAGES": 3,
                                         "NEARDUP_STATE_DIR": str(tmp_path)})
    mirrors = MirrorHostsMiddleware.from_crawler(crawler)
    context = CrawlContext.of(crawler)
    order = KeepOrder(context)
    order.follow(crawler, room=10**6)
    hooks = context.hooks
    a, b, c = "http://a.test", "http://b.test", "http://c.test"
    for host in (a, b, c):
        hooks.request_scheduled(Request(f"{host}/"))
    for i in range(3):  # b serves a's pages: a mirror
        mirrors.page_checked(f"{a}/p{i}", None)
        mirrors.page_checked(f"{b}/p{i}", f"{a}/p{i}")
    assert mirrors.table.mirror_of(host_of(b)) is not None  # type: ignore[arg-type]
    request = Request(f"{b}/x")
    hooks.request_scheduled(request)  # pending: c's page at /x would wait for it
    handed_back = mirrors.process_request(request)
    assert handed_back is request
    with pytest.raises(IgnoreRequest):
        hooks.request_scheduled(request)  # the engine schedules it again: refused
    assert MAX_EXTRA_WAIT > 5 * 0.2
    started = time.monotonic()
    asyncio.run(asyncio.wait_for(order.wait_turn(f"{c}/x", 10), MAX_EXTRA_WAIT))
    assert time.monotonic() - started < 2.0  # the copy wait (0.2 s), not the wait for a page to come


@pytest.mark.parametrize(("mirrors", "copy_wait", "follows"), [
    (True, 0.2, True), (False, 0.2, True), (True, 0, True), (False, 0, False),
])
def test_scheduled_requests_are_followed_only_when_something_needs_them(
    tmp_path: Path, mirrors: bool, copy_wait: float, follows: bool,
) -> None:
    """Scrapy sends ``request_scheduled`` for every link a spider yields, and ``request_dropped`` for every one
    refused as a duplicate: the add-on listens to the first only when the mirror middleware or the copy waits need
    it, once, and never to the second."""
    from pydispatch import dispatcher
    from scrapy import signals
    from scrapy.utils.test import get_crawler

    from scrapy_neardup.crawl.mirrors import MirrorHostsMiddleware
    from scrapy_neardup.crawl.pipeline import NearDuplicatePipeline

    settings = {"NEARDUP_COPY_WAIT": copy_wait, "NEARDUP_MIRRORS_ENABLED": mirrors,
                "NEARDUP_STATE_DIR": str(tmp_path)}
    crawler = get_crawler(settings_dict=settings)
    components = [NearDuplicatePipeline.from_crawler(crawler)]  # kept: their handlers are weak references
    if mirrors:
        components.append(MirrorHostsMiddleware.from_crawler(crawler))

    def ours(signal: object) -> list[object]:  # Scrapy's SignalManager lists no receivers; pydispatch does
        return [r for r in dispatcher.liveReceivers(dispatcher.getAllReceivers(crawler.signals.sender, signal))
                if "scrapy_neardup" in getattr(r, "__module__", "")]

    assert len(ours(signals.request_scheduled)) == (1 if follows else 0)
    assert not ours(signals.request_dropped)


def test_a_link_seen_before_is_not_a_page_to_come() -> None:
    """The add-on follows no ``request_dropped``: a link the scheduler refuses as a duplicate (the same page
    linked again, its fragment or the order of its query aside) must not count as one more page to come, or
    pages of later hosts at its path would wait for it until their longest wait."""
    import asyncio

    from scrapy import Request
    from scrapy.utils.test import get_crawler

    from scrapy_neardup.crawl.context import CrawlContext
    from scrapy_neardup.crawl.order import KeepOrder

    crawler = get_crawler(settings_dict={"NEARDUP_COPY_WAIT": 0.2, "NEARDUP_MIRROR_MIN_PAGES": 3})
    context = CrawlContext.of(crawler)
    order = KeepOrder(context)
    order.follow(crawler, room=10**6)
    hooks = context.hooks
    a, b = "http://a.test", "http://b.test"
    for host in (a, b):
        hooks.request_scheduled(Request(f"{host}/"))
    pending = Request(f"{a}/x?p=1&q=2")
    hooks.request_scheduled(pending)
    for again in ("/x?p=1&q=2", "/x?p=1&q=2#part", "/x?q=2&p=1"):
        hooks.request_scheduled(Request(f"{a}{again}"))

    def wait_for_b(limit: float) -> float:
        started = time.monotonic()
        asyncio.run(asyncio.wait_for(order.wait_turn(f"{b}/x?p=1&q=2", 10), limit))
        return time.monotonic() - started

    with pytest.raises(TimeoutError):  # a's page at that path is to come: b's waits past the copy wait
        wait_for_b(1.0)
    order.request_withdrawn(pending)  # the one request that brings it gone: nothing of a's is to come there
    assert wait_for_b(1.0) < 0.6  # the copy wait (0.2 s) only


def test_observers_hear_of_a_page_once_and_of_news_about_it() -> None:
    """A link to a page scheduled before (again, with a fragment, as a retry) reaches no observer: on a
    ``CrawlSpider`` nine links of ten are such links, and the observers would only find that they saw the page.
    A redirect to a page seen before still does (its source is given back), as does a mirror's request handed
    back to be refused; and hosts are ranked by their first requests."""
    from scrapy import Request
    from scrapy.utils.test import get_crawler

    from scrapy_neardup.crawl.context import CrawlContext

    context = CrawlContext.of(get_crawler())
    heard: list[tuple[str, bool]] = []
    context.on_scheduled(lambda request, first: heard.append((request.url, first)))
    hooks = context.hooks
    hooks.news_keys.append("handed_back")
    a, b = "http://a.test", "http://b.test"
    hooks.request_scheduled(Request(f"{a}/x"))
    hooks.request_scheduled(Request(f"{a}/x#part"))
    hooks.request_scheduled(Request(f"{a}/x", dont_filter=True, meta={"retry_times": 1}))
    hooks.request_scheduled(Request(f"{b}/y"))
    hooks.request_scheduled(Request(f"{a}/x", meta={"redirect_urls": [f"{a}/old"]}))
    hooks.request_scheduled(Request(f"{b}/y", meta={"handed_back": True}))
    assert heard == [(f"{a}/x", True), (f"{b}/y", True), (f"{a}/x", False), (f"{b}/y", False)]
    assert (hooks.rank(f"{a}:80"), hooks.rank(f"{b}:80")) == (0, 1)  # host_of's form
