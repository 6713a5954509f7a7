"""Mirror hosts: stop downloading a host once its pages have proved to be copies of another host's.

Enable it with the add-on (``ADDONS = {"scrapy_neardup.NearDuplicateAddon": 300}``) or by hand::

    DOWNLOADER_MIDDLEWARES = {"scrapy_neardup.crawl.mirrors.MirrorHostsMiddleware": 60}

The pipeline reports every checked page, kept or naming the kept page it near-duplicates
(:class:`~scrapy_neardup.crawl.hooks.CrawlHooks`); a :class:`~scrapy_neardup.core.mirrors.MirrorTable` counts,
per pair of hosts, the checked pages of one with a twin on the other. When host B has at least
``NEARDUP_MIRROR_MIN_PAGES`` checked pages and at least ``NEARDUP_MIRROR_SHARE`` of them have a twin on host
A, seen before B, B is a mirror of A: one INFO line is logged ("host B mirrors host A: 23 of 24 pages are
copies; skipping its requests") and every later request to B is dropped before download (``IgnoreRequest``,
counted in ``neardup/mirror_requests_skipped``). Requests already in the downloader finish normally.

With the embedded backend and a state directory (``NEARDUP_STATE_DIR``, default ``<JOBDIR>/neardup``) the table
is saved there on close (``neardup-hosts.json``, written atomically) and loaded on open, so a resumed or
recurring crawl keeps skipping a known mirror; ``NEARDUP_RESET`` discards it. With the Elasticsearch backend
the table lives in the crawler process only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import IgnoreRequest

from ..core.embedded import EmbeddedBackend, state_settings
from ..core.mirrors import MirrorDecision, MirrorTable, discard, host_of
from .hooks import crawl_hooks
from .host_settings import HostSettings, enabled_feature
from .settings import NearDupSettings

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


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
        crawl_hooks(crawler).observers.append(self)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> MirrorHostsMiddleware:
        config, hosts = enabled_feature(crawler, "NEARDUP_MIRRORS_ENABLED")
        middleware = cls(crawler, config, hosts)
        crawler.signals.connect(middleware.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(middleware.spider_closed, signal=signals.spider_closed)
        return middleware

    def spider_opened(self, spider: Any = None) -> None:
        if self.state_dir is None:
            return
        if self.reset:
            discard(self.state_dir)
            return
        for decision in self.table.load(self.state_dir):
            self._decided(decision, " (saved state)")

    def spider_closed(self, spider: Any = None) -> None:
        if self.state_dir is not None:
            self.table.save(self.state_dir)

    def process_request(self, request: Request, spider: Any = None) -> None:
        host = host_of(request.url)
        if host is None:
            return
        self.table.see(host)
        if self.table.mirror_of(host) is not None:
            self._inc("mirror_requests_skipped")
            raise IgnoreRequest(f"{host} mirrors {self.table.mirror_of(host).original}")  # type: ignore[union-attr]

    def page_checked(self, key: str, duplicate_of: str | None) -> None:
        """Called by the pipeline for each checked page (see :mod:`scrapy_neardup.crawl.hooks`)."""
        for decision in self.table.record(key, duplicate_of):
            self._decided(decision)

    def _decided(self, decision: MirrorDecision, note: str = "") -> None:
        self._inc("mirror_hosts")
        logger.info(decision.describe() + note)

    def _inc(self, name: str, count: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value("neardup/" + name, count)


__all__ = ["MirrorHostsMiddleware"]
