"""Soft-404 probing: learn what each host answers for a URL that cannot exist, and drop pages that look like it.

Design notes: docs/architecture.md#scrapy_neardupcrawlsoft404
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit, urlunsplit

from scrapy import Request
from scrapy.exceptions import DropItem
from scrapy.http import TextResponse
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred

from ..core.evidence import describe_evidence, evidence
from ..core.mirror_table import host_of
from ..core.soft404_templates import Soft404Match, Soft404Templates, first_segment, probe_path, url_words
from ..errors import NearDupError
from .context import CrawlContext, enabled_feature
from .host_settings import HostSettings
from .settings import NearDupSettings
from .startup import component_startup

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

#: Request meta key that marks a probe (the middleware lets its own probes through untouched).
PROBE_META = "neardup_soft404_probe"
_TIMED_OUT = object()


class Soft404Dropped(DropItem, NearDupError):
    """An item dropped because its page near-duplicates its host's soft-404 template.

    No kept page is named: the template is what the host answers for a URL that cannot exist
    (``match.probe_url``), and no soft 404 is kept. Counted as ``item_dropped_reasons_count/Soft404Dropped``.

    Attributes:
        url: the dropped page's key.
        soft404: the match: the probe URL whose answer the page was compared with, the shared positions.
        evidence: ``{"rule": "soft404", "shared", "k", "interval"}`` (:mod:`scrapy_neardup.core.evidence`), as
            :class:`~scrapy_neardup.crawl.drops.NearDuplicateDropped` has.
    """

    def __init__(self, url: str, match: Soft404Match) -> None:
        fields = evidence(match.shared, match.num_perm, "soft404")
        super().__init__(
            f"soft 404: near-duplicate of the not-found page answered for {match.probe_url} "
            f"(resemblance {match.resemblance:.3f}, {describe_evidence(fields)})", log_level="DEBUG",
        )
        self.url = url
        self.soft404 = match
        self.evidence = fields


@dataclass
class _Probe:
    """One probe of a host: whether it answered (or failed), and the pages' responses waiting for it."""

    done: bool = False
    waiters: list[Deferred[Any]] = field(default_factory=list)

    def wait(self) -> Deferred[Any]:
        waiter: Deferred[Any] = Deferred()
        if self.done:
            waiter.callback(None)
        else:
            self.waiters.append(waiter)
        return waiter

    def finished(self) -> None:
        self.done = True
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            if not waiter.called:
                waiter.callback(None)


@dataclass
class _HostProbes:
    """The probes of one host, by the first path segment they were sent under (``None``: the root)."""

    probes: dict[str | None, _Probe] = field(default_factory=dict)
    over_cap: bool = False  # a segment met no probe was left for (logged once)


class Soft404Middleware:
    """Downloader middleware: probes hosts and finds the pages that near-duplicate their soft-404 template.

    See the module doc. Place it before ``RobotsTxtMiddleware`` (100) and after ``RedirectMiddleware`` (600) in
    response order, i.e. at a number below 100: it then sees the final response of every page.
    """

    def __init__(self, crawler: Crawler, config: NearDupSettings, hosts: HostSettings) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.sketcher = config.sketcher()
        self.max_probes = hosts.probes_per_host
        self.timeout = hosts.probe_timeout
        self.templates = Soft404Templates(config.min_shared)
        self.hooks = CrawlContext.of(crawler).hooks
        self._hosts: dict[str, _HostProbes] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Soft404Middleware:
        config, hosts = enabled_feature(crawler, "NEARDUP_SOFT404_ENABLED")
        with component_startup(crawler):
            return cls(crawler, config, hosts)

    # -- requests: start the probes --------------------------------------------------------------------------

    def process_request(self, request: Request, spider: Any = None) -> None:
        if _internal(request):
            return
        host = host_of(request.url)
        if host is None:
            return
        # Sent now, ahead of the page in the host's download slot: by the time the page's response is here, the
        # probes it waits for (process_response) have usually answered.
        self._probes_for(request, host, first_segment(request.url))

    def _probes_for(self, request: Request, host: str, segment: str | None) -> list[_Probe]:
        """The probes a page of ``host`` under ``segment`` is judged by: the root's and its segment's, started
        now when missing (unless the host has ``NEARDUP_SOFT404_PROBES_PER_HOST`` probes already)."""
        probes = self._hosts.get(host)
        if probes is None:
            probes = self._hosts[host] = _HostProbes()
        found = []
        for wanted in dict.fromkeys((None, segment)):
            probe = probes.probes.get(wanted)
            if probe is None and len(probes.probes) < self.max_probes:
                probe = probes.probes[wanted] = _Probe()
                self._start_probe(request, host, wanted, probe)
            elif probe is None and not probes.over_cap:
                probes.over_cap = True
                logger.info(
                    "host %s: more first path segments than NEARDUP_SOFT404_PROBES_PER_HOST=%d; pages under /%s/ and "
                    "other segments without a probe are compared with every soft-404 template of the host (counted "
                    "in neardup/soft404_unprobed)", host, self.max_probes, wanted)
            if probe is not None:
                found.append(probe)
        return found

    def _start_probe(self, request: Request, host: str, segment: str | None, probe: _Probe) -> None:
        parts = urlsplit(request.url)
        url = urlunsplit((parts.scheme, parts.netloc, probe_path(segment), "", ""))
        # The crawl's own user agent: the one the page's request was given (else UserAgentMiddleware sets the
        # crawl's, as on every request), never another one.
        user_agent = request.headers.get(b"User-Agent")
        request_ = Request(
            url, dont_filter=True, priority=1_000,
            headers={b"User-Agent": user_agent} if user_agent else None,
            meta={PROBE_META: True, "dont_redirect": True, "handle_httpstatus_all": True, "dont_cache": True},
        )
        self._inc("soft404_probes")
        from scrapy.utils.defer import deferred_from_coro

        deferred_from_coro(self._probe(host, segment, request_, probe))

    async def _probe(self, host: str, segment: str | None, request: Request, probe: _Probe) -> None:
        try:
            response = await self._download(request)
        except Exception as exc:  # robots.txt forbids it (IgnoreRequest), connection refused, timeout...
            self._inc("soft404_probes_failed")
            logger.debug("soft-404 probe %s failed: %r", request.url, exc)
        else:
            self._learn(host, segment, request.url, response)
        finally:
            probe.finished()

    async def _download(self, request: Request) -> Response:
        engine = self.crawler.engine
        assert engine is not None
        download_async = getattr(engine, "download_async", None)
        if download_async is not None:  # Scrapy >= 2.14
            response: Response = await download_async(request)
            return response
        return await maybe_deferred_to_future(engine.download(request))  # pragma: no cover - Scrapy 2.13

    def _learn(self, host: str, segment: str | None, url: str, response: Response) -> None:
        if response.status in (404, 410):
            self._inc("soft404_probes_404")
            logger.debug("soft-404 probe %s: %d, the host answers unknown URLs correctly", url, response.status)
            return
        if response.status != 200 or not isinstance(response, TextResponse):
            self._inc("soft404_probes_failed")
            logger.debug("soft-404 probe %s answered %d; no template", url, response.status)
            return
        sketch = self.sketcher.sketch(response.text, leave_out=url_words(url))
        if sketch.empty:
            return
        self.templates.add(host, segment, url, sketch)
        self._inc("soft404_templates")
        logger.info("host %s answers unknown URLs with status 200 (soft 404); probe %s is its template", host, url)

    # -- responses: hold them until the host's probes answered, then judge them ------------------------------

    async def process_response(self, request: Request, response: Response, spider: Any = None) -> Response:
        if _internal(request):
            # Never hold robots.txt: the host's probes themselves wait for it (RobotsTxtMiddleware).
            return response
        host = host_of(response.url)
        if host is None:
            return response
        segment = first_segment(response.url)
        # Usually started with the page's request; a redirect may have brought the page under another segment.
        probes = self._probes_for(request, host, segment)
        pending = [probe for probe in probes if not probe.done]
        if pending:
            await self._wait(pending)
        if self.templates.has_templates(host) and response.status == 200 and isinstance(response, TextResponse):
            if urlsplit(response.url).path in ("", "/"):
                return response
            judged_by: list[str | None] | None = [None, segment]
            if segment is not None and segment not in self._hosts[host].probes:
                judged_by = None  # no probe left for its segment: every template of the host
                self._inc("soft404_unprobed")
            sketch = self.sketcher.sketch(response.text, leave_out=url_words(response.url))
            match = self.templates.match(host, sketch, judged_by)
            if match is not None:
                self.hooks.soft404_pages[response.url] = match
        return response

    async def _wait(self, probes: list[_Probe]) -> None:
        """Until every one of ``probes`` answered, ``NEARDUP_SOFT404_TIMEOUT`` seconds at most."""
        waiter: Deferred[Any] = Deferred()
        left = [len(probes)]

        def answered(_: Any) -> None:
            left[0] -= 1
            if left[0] == 0 and not waiter.called:
                waiter.callback(None)

        for probe in probes:
            probe.wait().addCallback(answered)

        def time_out() -> None:
            if not waiter.called:
                waiter.callback(_TIMED_OUT)

        timer = _call_later(self.timeout, time_out)
        result = await maybe_deferred_to_future(waiter)
        if result is _TIMED_OUT:
            self._inc("soft404_wait_timeouts")
        else:
            timer.cancel()

    def _inc(self, name: str, count: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value("neardup/" + name, count)


def _internal(request: Request) -> bool:
    """A probe, or a download no spider callback will see (robots.txt, media pipelines: ``NO_CALLBACK``)."""
    return bool(request.meta.get(PROBE_META)) or request.callback is NO_CALLBACK


def _call_later(delay: float, func: Any) -> Any:
    try:
        from scrapy.utils.asyncio import call_later  # Scrapy >= 2.14: asyncio or Twisted, whichever runs
    except ImportError:  # pragma: no cover - Scrapy 2.13
        from twisted.internet import reactor

        return cast(Any, reactor).callLater(delay, func)
    return call_later(delay, func)


