"""What the parts of one crawl share, built once per crawler: :class:`CrawlContext`.

Design notes: docs/architecture.md#scrapy_neardupcrawlcontext
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured

from .hooks import CrawlHooks
from .host_settings import HostSettings
from .settings import NearDupSettings
from .startup import component_startup

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

    from ..store.backend import Backend

#: The crawler attribute that holds its context (see :meth:`CrawlContext.of`).
ATTRIBUTE = "neardup_context"
#: Prefix of every stat the parts write.
STATS_PREFIX = "neardup/"


class CrawlContext:
    """The settings, counters, hooks and store of one crawl, handed to each part that needs them.

    Args:
        crawler: the running crawl (its settings, stats, engine); ``None`` outside one.
        config: the ``NEARDUP_*`` settings; ``None``: read from the crawler's settings on first use (the defaults
            without a crawler).
        hosts: the host-level settings; ``None``: read as ``config`` is.
        stats: where ``neardup/*`` counters go; ``None``: the crawler's stats collector (local only without one).
    """

    def __init__(self, crawler: Crawler | None = None, *, config: NearDupSettings | None = None,
                 hosts: HostSettings | None = None, stats: StatsCollector | None = None) -> None:
        self.crawler = crawler
        self.stats = stats if stats is not None else getattr(crawler, "stats", None)
        self._config = config
        self._hosts = hosts
        #: ``neardup/*`` counters added through :meth:`count`, without the prefix (read by the close summary).
        self.counts: dict[str, int] = {}
        #: where the pipeline and the host middlewares meet (soft 404s, canonical links, checked pages).
        self.hooks = CrawlHooks()
        #: the store pages are checked against, once the pipeline opened it.
        self.backend: Backend | None = None
        #: the crawl's ``LOG_LEVEL``: whether a start-up failure shows its traceback.
        self.log_level: str | int = crawler.settings.get("LOG_LEVEL", "DEBUG") if crawler is not None else "DEBUG"

    @classmethod
    def of(cls, crawler: Crawler) -> CrawlContext:
        """The context of ``crawler``, made on first use and kept as an attribute of the crawler, so that it lives
        and ends with that crawl. Read its settings (:attr:`config`, :attr:`hosts`) under
        :func:`~scrapy_neardup.crawl.startup.component_startup`: a wrong one raises there."""
        context = getattr(crawler, ATTRIBUTE, None)
        if context is None:
            context = cls(crawler)
            setattr(crawler, ATTRIBUTE, context)
        return context

    def on_scheduled(self, observer: Callable[[Any, bool], None]) -> None:
        """Call ``observer(request, first)`` with each request the crawl schedules (Scrapy's
        ``request_scheduled``) for the first time, and with the requests seen before that
        :meth:`~scrapy_neardup.crawl.hooks.CrawlHooks.request_scheduled` lets through, after the observers added
        before it. The signal is followed from the first observer on, not before: Scrapy dispatches it for every
        link a spider yields (most of them then refused as duplicates), at about 2 µs a handler
        (``benchmarks/bench_links.py``), and a crawl whose mirror middleware and copy waits are off has nothing to
        do with it."""
        if not self.hooks.scheduled and self.crawler is not None:
            self.hooks.fingerprint_with(self.crawler.request_fingerprinter.fingerprint)
            self.crawler.signals.connect(self.hooks.request_scheduled, signal=signals.request_scheduled)
        self.hooks.scheduled.append(observer)

    @property
    def config(self) -> NearDupSettings:
        """The validated ``NEARDUP_*`` settings, read once."""
        if self._config is None:
            self._config = (NearDupSettings.from_settings(self.crawler.settings) if self.crawler is not None
                            else NearDupSettings())
        return self._config

    @property
    def hosts(self) -> HostSettings:
        """The validated host-level settings (soft 404s, mirrors, copy wait, canonical links), read once."""
        if self._hosts is None:
            self._hosts = (HostSettings.from_settings(self.crawler.settings) if self.crawler is not None
                           else HostSettings())
        return self._hosts

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to ``neardup/<name>``."""
        self.counts[name] = self.counts.get(name, 0) + n
        if self.stats is not None:
            self.stats.inc_value(STATS_PREFIX + name, n)


def enabled_feature(crawler: Crawler, setting: str) -> tuple[NearDupSettings, HostSettings]:
    """The settings of a host middleware's ``from_crawler``, read once for the crawl under the start-up reporter;
    ``NotConfigured`` when the plugin (``NEARDUP_ENABLED``) or the feature (``setting``:
    ``NEARDUP_SOFT404_ENABLED``, ``NEARDUP_MIRRORS_ENABLED``) is switched off."""
    with component_startup(crawler):
        context = CrawlContext.of(crawler)
        if not context.config.enabled:
            raise NotConfigured("NEARDUP_ENABLED is False")
        hosts = context.hosts
    if not {"NEARDUP_SOFT404_ENABLED": hosts.soft404, "NEARDUP_MIRRORS_ENABLED": hosts.mirrors}[setting]:
        raise NotConfigured(f"{setting} is False")
    return context.config, hosts

