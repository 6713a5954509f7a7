"""Mirror hosts: stop downloading a host once its pages have proved to be copies of another host's.

Design notes: docs/architecture.md#scrapy_neardupcrawlmirrors
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import IgnoreRequest

from ..core.mirror_table import HostStore, MirrorDecision, MirrorTable, discard, host_of
from ..errors import NearDupSettingsError
from ..store.embedded import EmbeddedBackend, state_settings
from .context import CrawlContext, enabled_feature
from .host_settings import HostSettings
from .order import FEW_PAGES
from .settings import NearDupSettings
from .startup import component_startup

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from twisted.internet.defer import Deferred

logger = logging.getLogger(__name__)

#: Request meta key: the request is to a mirror host (the value names the original), refused when scheduled again.
_SKIPPED = "neardup_mirror_of"


class MirrorHostsMiddleware:
    """Downloader middleware: counts twins per host pair (fed by the pipeline) and skips mirror hosts' requests.

    Place it before ``RobotsTxtMiddleware`` (100), so that a skipped host's robots.txt is not fetched either.
    """

    def __init__(self, crawler: Crawler, config: NearDupSettings, hosts: HostSettings) -> None:
        self.stats = crawler.stats
        self.table = MirrorTable(hosts.mirror_min_pages, hosts.mirror_share)
        # The table is saved with the embedded store's state (one directory, one reset switch).
        state_dir, self.reset = state_settings(crawler.settings)
        self.state_dir = state_dir if issubclass(config.backend_class, EmbeddedBackend) else None
        # Loaded now, not when the spider opens: a damaged file stops the crawl at start (StateError, one line)
        # and is left untouched, instead of being replaced by this crawl's table.
        self._saved = self.table.load(self.state_dir) if self.state_dir is not None and not self.reset else []
        #: the fleet's shared counts (None: this process counts alone)
        self.store = None if issubclass(config.backend_class, EmbeddedBackend) else _host_store(crawler, config)
        self.sync_interval = hosts.mirror_sync_interval
        self._next_sync = 0.0  # time.monotonic() of the next exchange with the store
        self._sync_running: Deferred[None] | None = None
        self._store_open = False
        self._store_failing = False
        self._store_warned = False
        self._closing = False
        self._spider_open = False
        hooks = self._hooks = CrawlContext.of(crawler).hooks
        hooks.observers.append(self)
        hooks.copy_judges.append(self)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> MirrorHostsMiddleware:
        config, hosts = enabled_feature(crawler, "NEARDUP_MIRRORS_ENABLED")
        # Reads the state settings and builds the backend's host store: a wrong setting is met here first.
        with component_startup(crawler):
            middleware = cls(crawler, config, hosts)
        context = CrawlContext.of(crawler)
        context.hooks.news_keys.append(_SKIPPED)  # a request handed back is scheduled again, to be refused
        context.on_scheduled(middleware.request_scheduled)
        crawler.signals.connect(middleware.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(middleware.spider_closed, signal=signals.spider_closed)
        return middleware

    def spider_opened(self, spider: Any = None) -> None:
        self._spider_open = True
        self._sync_soon()  # learn what the fleet (or earlier crawls on the index) knows
        if self.state_dir is not None and self.reset:
            discard(self.state_dir)
        for decision in self._saved:
            self._decided(decision, " (saved state)")

    async def spider_closed(self, spider: Any = None) -> None:
        if self.state_dir is not None and self._spider_open:  # not when the crawl failed to start
            self.table.save(self.state_dir)
        if self.store is not None and self._spider_open:  # not when the crawl failed to start (backend down)
            await self._close_store()

    def request_scheduled(self, request: Request, first: bool) -> None:
        """Hosts are met in the order their first requests are scheduled: start URLs in the spider's order (the
        downloader's own order follows its slots, not the spider). ``first`` is False for a request seen before,
        which reaches this only when handed back by :meth:`process_request` (its mark is in ``news_keys``)."""
        host = host_of(request.url)
        if host is None:
            return
        self.table.see(host)
        if request.meta.get(_SKIPPED):
            # Handed back by process_request: the engine does not enqueue a request a request_scheduled handler
            # refuses with IgnoreRequest, and counts no download error for it (Scrapy's OffsiteMiddleware filters
            # the same way).
            self._inc("mirror_requests_skipped")
            raise IgnoreRequest(f"{host} mirrors {request.meta[_SKIPPED]}")

    def process_request(self, request: Request, spider: Any = None) -> Request | None:
        self._sync_soon()
        host = host_of(request.url)
        if host is None:
            return None
        self.table.see(host)
        decision = self.table.mirror_of(host)
        if decision is not None and request.meta.get(_SKIPPED):
            # Handed back once and here again: it came from ExecutionEngine.download_async (which downloads a
            # returned request itself instead of scheduling it), not from the scheduler.
            self._inc("mirror_requests_skipped")
            raise IgnoreRequest(f"{host} mirrors {decision.original}")
        if decision is not None and not _internal(request):
            # Raising IgnoreRequest here would count a downloader exception (DownloaderStats.process_exception).
            # Handed back instead, the engine schedules it again and request_scheduled drops (and counts) it. It
            # came here through the scheduler's duplicate filter, so what is counted is downloads saved, not
            # links: a mirror's page linked ten times is one request skipped.
            request.meta[_SKIPPED] = decision.original
            for withdrawn in self._hooks.withdrawn:  # scheduled once, it brings no page
                withdrawn(request)
            return request
        return None

    def page_checked(self, key: str, duplicate_of: str | None, *, representative_of: str | None = None,
                     canonical: str | None = None) -> None:
        """Called by the pipeline for each checked page (see :mod:`scrapy_neardup.crawl.hooks`)."""
        for decision in self.table.record(key, duplicate_of, representative_of):
            self._decided(decision)
        self._sync_soon()

    def settled(self, host: str) -> bool:
        """``host`` is no mirror and is not on its way to be one: it has the checked pages a decision needs and
        less than ``NEARDUP_MIRROR_SHARE`` of them have a twin on a host holding their kept copies, or it has
        :data:`~scrapy_neardup.crawl.order.FEW_PAGES` checked pages without a twin anywhere. Its pages need not wait
        for an earlier host's (:mod:`scrapy_neardup.crawl.order`)."""
        table = self.table
        if table.mirror_of(host) is not None:
            return False
        checked = table.checked(host)
        if checked >= FEW_PAGES and not table.twin_hosts(host):
            return True
        return checked >= table.min_pages and table.copy_share(host) < table.share

    # -- the fleet's store -----------------------------------------------------------------------------------

    def _sync_soon(self) -> None:
        """Start an exchange with the store when the interval has passed and none is running (never waits)."""
        if self.store is None or self._closing or self._sync_running is not None:
            return
        if time.monotonic() < self._next_sync:
            return
        from scrapy.utils.defer import deferred_from_coro

        running = deferred_from_coro(self._sync())
        # A store that answered without suspending has finished already (and reset _sync_running).
        self._sync_running = None if running.called else running

    async def _sync(self, *, final: bool = False) -> None:
        """Push this process's counts; unless ``final``, pull the others' and decide on the totals."""
        assert self.store is not None
        try:
            if not self._store_open:
                await self.store.open()
                self._store_open = True
            await self.store.push(self.table.local_counts())
            if not final:
                for decision in self.table.set_fleet(await self.store.pull()):
                    self._decided(decision, " (the fleet's counts)")
        except Exception as exc:
            self._store_failing = True
            self._inc("mirror_sync_errors")
            if not self._store_warned:
                self._store_warned = True
                logger.warning(
                    "mirror counts could not be shared through %r (%s); this process goes on with its own "
                    "counts (later failures are counted in neardup/mirror_sync_errors)", self.store, exc)
            else:
                logger.debug("mirror counts not shared: %r", exc)
        else:
            self._store_failing = False
            self._inc("mirror_syncs")
        finally:
            self._next_sync = time.monotonic() + self.sync_interval
            self._sync_running = None

    async def _close_store(self) -> None:
        """Let a running exchange end, push the final counts (unless the store is failing: the crawl's end
        does not wait for a node that is down), release the store."""
        from scrapy.utils.defer import maybe_deferred_to_future

        assert self.store is not None
        self._closing = True
        if self._sync_running is not None:
            await maybe_deferred_to_future(self._sync_running)
        try:
            if not self._store_failing:
                await self._sync(final=True)
        finally:
            try:
                await self.store.close()
            except Exception as exc:  # nothing left to share: closing a broken connection is no news
                logger.debug("closing %r: %r", self.store, exc)

    def _decided(self, decision: MirrorDecision, note: str = "") -> None:
        self._inc("mirror_hosts")
        self._hooks.mirror_decisions.append(decision)
        logger.info(decision.describe() + note)

    def _inc(self, name: str, count: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value("neardup/" + name, count)


def _internal(request: Request) -> bool:
    """A soft-404 probe, or a download no spider callback will see (robots.txt, media pipelines). They are
    started by a request of the host that passed this middleware, so before the host was found a mirror: like a
    request already in the downloader, they finish."""
    from scrapy.http.request import NO_CALLBACK

    from .soft404 import PROBE_META

    return bool(request.meta.get(PROBE_META)) or request.callback is NO_CALLBACK


def _host_store(crawler: Crawler, config: NearDupSettings) -> HostStore | None:
    """The store of the crawl's backend (a backend built for this and never opened: the store connects on its
    own); ``None`` when the backend has none. Only a wrong setting stops the crawl; any other failure leaves
    the mirror table local, with a warning."""
    try:
        return config.make_backend(crawler.settings).host_store()
    except NearDupSettingsError:
        raise
    except Exception as exc:
        logger.warning("mirror counts will not be shared (%s); each crawler process counts its own", exc)
        return None


