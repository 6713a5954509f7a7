"""The Scrapy item pipeline that keeps near-duplicate pages out of a crawl's output.

Enable it with the add-on (``ADDONS = {"scrapy_neardup.NearDuplicateAddon": 0}``) or as
``ITEM_PIPELINES = {"scrapy_neardup.NearDuplicatePipeline": 300}``. Each item's text is sketched (by default in a
child process, :mod:`scrapy_neardup.crawl.sketch_worker`) and checked against the pages kept so far, one
check-and-insert at a time (:class:`~scrapy_neardup.crawl.batcher.CheckBatcher`); a near-duplicate is dropped or
marked, naming the kept page. How checks are ordered across hosts, what persists across runs and what happens
when the backend is down: docs/scrapy/pipeline.md, docs/outages.md and docs/architecture.md.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, cast

from itemadapter import ItemAdapter
from scrapy import signals
from scrapy.exceptions import CloseSpider, DropItem, NotConfigured
from scrapy.utils.defer import maybe_deferred_to_future

from ..core.dedupe import SKIP_EMPTY, SKIP_NOT_TEXT, skip_reason
from ..core.evidence import describe_evidence, evidence, match_evidence
from ..core.match import Match
from ..core.theory import describe_rule
from ..errors import BackendError, BinaryContent
from ..store.backend import Backend, Decision
from .batcher import CheckBatcher
from .canonical import CanonicalDropped, CanonicalLinks
from .check_failures import CheckFailures
from .drops import NearDuplicateDropped, RepeatDropped, RevisitDropped, describe
from .exit_status import fail_exit_status
from .hooks import CrawlHooks, crawl_hooks
from .host_settings import HostSettings
from .item_fields import ItemFieldChecks, check_mark_field
from .order import KeepOrder
from .outage import UNCHECKED, BackendOutage, describe_unchecked, too_many_unchecked
from .page_sketcher import PageSketcher
from .scraper_room import ScraperRoom
from .search_writer import require_search_writer
from .settings import NearDupSettings
from .soft404 import Soft404Dropped
from .startup import component_startup, report_startup_failure
from .summary import SKIP_STATS, summarize
from .template_wait import HOLD_ACTIVE_SIZE

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

    from ..core.sketch import Content, Sketch, Sketcher
    from ..core.soft404_templates import Soft404Match

logger = logging.getLogger(__name__)

#: Prefix of every stat this pipeline writes.
STATS_PREFIX = "neardup/"
#: Key prefix for items without a URL; the rest is the text's exact fingerprint, so the key is stable.
NO_URL_PREFIX = "no-url:"


class NearDuplicatePipeline:
    """Drop (or mark) items whose page text near-duplicates a page kept earlier in the crawl.

    Built by Scrapy through :meth:`from_crawler`; see :mod:`scrapy_neardup.crawl.settings` for the ``NEARDUP_*``
    settings and :mod:`scrapy_neardup.crawl.pipeline` for how concurrency and persistence work.

    Args:
        config: the validated settings.
        stats: where ``neardup/*`` counters go (the crawler's stats collector); ``None``: local only.
        crawler: used to stop the crawl when a mark field is missing, and for the backend's settings; optional
            for use outside a crawl.
        backend: the store to check against (opened in :meth:`open_spider`); ``None``: :meth:`make_backend`
            builds the one ``NEARDUP_BACKEND`` names.
        hosts: the host-level settings this pipeline reads: ``NEARDUP_COPY_WAIT`` and
            ``NEARDUP_MIRROR_MIN_PAGES`` (which copy is kept: :mod:`scrapy_neardup.crawl.order`),
            ``NEARDUP_CANONICAL`` (:mod:`scrapy_neardup.crawl.canonical`); ``None``: their defaults.
    """

    def __init__(
        self, config: NearDupSettings, stats: StatsCollector | None = None, crawler: Crawler | None = None,
        backend: Backend | None = None, hosts: HostSettings | None = None,
    ) -> None:
        self.config = config
        self.stats = stats
        self.crawler = crawler
        self.backend: Backend | None = None
        self._given_backend = backend
        self._backend_seen: dict[str, int] = {}
        self._opened = False
        self._batcher: CheckBatcher | None = None
        self._counts: dict[str, int] = {}
        self.fields = ItemFieldChecks(config, crawler, self._inc)
        # What a check the backend cannot answer does (NEARDUP_ON_BACKEND_DOWN: pass, pause, stop).
        self.outage = BackendOutage(config.outage, crawler, self._inc)
        self.failures = CheckFailures(config, self.outage, self._inc)
        # Content to sketch: in the worker process, under the host's template (crawl.page_sketcher).
        self.pages = PageSketcher(config.sketcher(), config.sketch_process, config.template_sample, crawler, self._inc)
        self._log_level: str | int = "DEBUG"  # the crawl's LOG_LEVEL: whether start-up failures show a traceback
        # Soft-404 verdicts and canonical links in, checked pages out (crawl.soft404, .canonical, .mirrors).
        self.hooks: CrawlHooks | None = crawl_hooks(crawler) if crawler is not None else None
        hosts = hosts or HostSettings()
        #: which copy is kept when hosts serve the same pages (None: outside a crawl)
        self.order = (KeepOrder(self.hooks, hosts.copy_wait, hosts.mirror_min_pages, self._inc)
                      if self.hooks is not None else None)
        #: the canonical links met (None: NEARDUP_CANONICAL is off)
        self.canonicals = CanonicalLinks(self._inc) if hosts.canonical else None

    @property
    def sketcher(self) -> Sketcher:
        """What pages are sketched with (the ``NEARDUP_*`` sketch parameters)."""
        return self.pages.sketcher

    @sketcher.setter
    def sketcher(self, sketcher: Sketcher) -> None:
        self.pages.sketcher = sketcher

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> NearDuplicatePipeline:
        """Read the settings and build the backend; ``NotConfigured`` when ``NEARDUP_ENABLED`` is false.

        Raises:
            NearDupSettingsError: a ``NEARDUP_*`` setting is wrong, the backend's own ones included (the
                backend is built here, not in :meth:`open_spider`). Scrapy then aborts the crawl before the
                first request and logs the message (which names the setting and its value).
        """
        log_level = crawler.settings.get("LOG_LEVEL", "DEBUG")
        with component_startup(crawler):
            config = NearDupSettings.from_settings(crawler.settings)
            require_search_writer(crawler.settings)  # a search index nothing would write: said at start
            if not config.enabled:
                raise NotConfigured("NEARDUP_ENABLED is False")
            hosts = HostSettings.from_settings(crawler.settings)
            backend = config.make_backend(crawler.settings)
        pipeline = cls(config, stats=crawler.stats, crawler=crawler, backend=backend, hosts=hosts)
        pipeline._log_level = log_level
        crawler.signals.connect(pipeline.spider_idle, signal=signals.spider_idle)
        if pipeline.order is not None:
            order = pipeline.order
            order.room = HOLD_ACTIVE_SIZE
            order.grow = ScraperRoom(crawler).grow
            crawler.signals.connect(order.request_scheduled, signal=signals.request_scheduled)
            crawler.signals.connect(order.request_dropped, signal=signals.request_dropped)
            crawler.signals.connect(order.response_received, signal=signals.response_received)
        return pipeline

    # -- lifecycle -------------------------------------------------------------------------------------------

    def make_backend(self) -> Backend:
        """The store to check against: the one given to the constructor (:meth:`from_crawler` builds the one
        ``NEARDUP_BACKEND`` names), else built now. Override to plug in another :class:`Backend` in code."""
        backend, self._given_backend = self._given_backend, None
        if backend is not None:
            return backend
        return self.config.make_backend(self.crawler.settings if self.crawler is not None else {})

    async def open_spider(self, spider: Any = None) -> None:
        """Open the backend (load saved state, connect); a failure stops the crawl before any page is fetched."""
        self.backend = self.make_backend()
        try:
            await self.backend.open()
        except Exception as exc:
            # The message names what to fix (NEARDUP_ES_URL, a damaged state file): one line, then stop the
            # crawl before any page is fetched.
            report_startup_failure(exc, log_level=self._log_level)
            raise
        self._opened = True
        self.fields.check_csv_feeds()
        self.pages.open(self.backend)
        # What opening found (EmbeddedBackend: sketches loaded, replayed from the journal, torn records).
        self._add_backend_stats()
        # Once, at INFO: NEARDUP_THRESHOLD is read as a sharp cut, but t of k flags a band of resemblances.
        logger.info(
            "Near-duplicates: %s (%s backend, %s, action %s)", describe_rule(self.config.num_perm,
            self.config.min_shared), self.config.backend, self.sketcher.tag, self.config.action,
        )

    async def close_spider(self, spider: Any = None) -> None:
        """Persist the backend's state and log a summary.

        Scrapy calls this even when :meth:`open_spider` failed; the backend is then not closed, so that a
        state file that could not be loaded is never overwritten by an empty index.
        """
        self.outage.close()
        await self.pages.close()
        if not self._opened or self.backend is None:
            return
        self._opened = False
        try:
            await self.backend.close()
        finally:
            self._add_backend_stats()
            if self.outage.pauses:
                self._inc("backend_paused_seconds", round(self.outage.paused_seconds))
            # A crawl in which no item had the text field checked nothing, or in which pages went unchecked:
            # say it at WARNING, again.
            quiet = not self.fields.no_text_field() and not self._counts.get("unchecked")
            logger.log(logging.INFO if quiet else logging.WARNING, "%s", self.summary())
            self._fail_if_too_many_unchecked()

    def spider_idle(self, spider: Any = None) -> None:
        """The crawl is about to finish: with more pages passed through unchecked than ``NEARDUP_MAX_UNCHECKED``
        allows, its close reason is ``neardup_unchecked`` instead of ``finished``."""
        if self.too_many_unchecked():
            raise CloseSpider(UNCHECKED)

    def too_many_unchecked(self) -> bool:
        """More of the checked pages passed through unchecked than ``NEARDUP_MAX_UNCHECKED`` allows."""
        c = self._counts.get
        return too_many_unchecked(c("unchecked", 0), c("checked", 0), self.config.outage.max_unchecked)

    def _fail_if_too_many_unchecked(self) -> None:
        if self.crawler is None or not self.too_many_unchecked():
            return
        c = self._counts.get
        fail_exit_status(self.crawler, (
            f"{describe_unchecked(c('unchecked', 0), c('checked', 0))} passed through unchecked "
            f"(NEARDUP_MAX_UNCHECKED={self.config.outage.max_unchecked:g})"
        ))

    def _add_backend_stats(self) -> None:
        """Add what the backend's counters (:meth:`Backend.stats`) grew by since the last read: read after
        opening (what it found), and after closing, because closing may still write: retries (Elasticsearch:
        connection errors, timeouts, HTTP 429/502/503/504) and what became of the items passed through
        unchecked (``unchecked_indexed``, ``unchecked_unindexed``, ``unchecked_overflow``)."""
        assert self.backend is not None
        for name, count in self.backend.stats().items():
            grown = int(count) - self._backend_seen.get(name, 0)
            if grown:
                self._inc(name, grown)
                self._backend_seen[name] = int(count)

    def summary(self) -> str:
        """One line with what the pipeline did so far."""
        fields = self.fields
        note = fields.text_field_missing(f"all {fields.probed} items") if fields.no_text_field() else None
        return summarize(self._counts, self.config, self.outage, note)

    # -- items -----------------------------------------------------------------------------------------------

    async def process_item(self, item: Any, spider: Any = None) -> Any:
        """Return ``item`` when kept, skipped or marked; raise :class:`NearDuplicateDropped` when dropped."""
        adapter = ItemAdapter(item)
        # In the pipeline until decided: pages of later hosts with its path wait for it (crawl.order).
        entered = self.order.enter(adapter.get(self.config.url_field)) if self.order is not None else None
        try:
            return await self._process(item, adapter)
        finally:
            if self.order is not None:
                self.order.leave(entered)

    async def _process(self, item: Any, adapter: ItemAdapter) -> Any:
        if self.config.action == "mark" and not self.fields.can_mark(item, adapter):
            return item
        self.fields.probe_text_field(adapter)
        if self.hooks is not None:
            soft404 = self.hooks.soft404(str(adapter.get(self.config.url_field)))
            if soft404 is not None:
                return self._soft404(item, adapter, soft404)
        content = adapter.get(self.config.text_field)
        worker = self.pages.worker()
        reason = skip_reason(content, check_binary=worker is None)  # else the worker tells binary from text
        if reason is not None:
            return self._skip(reason, item)
        url = adapter.get(self.config.url_field)
        failures = 0
        while True:
            try:
                sketch = await self.pages.sketch_page(cast("Content", content), worker, url)
            except BinaryContent:
                logger.debug("binary content of %s is not sketched", url)
                return self._skip(SKIP_NOT_TEXT, item)
            except BackendError:  # the host's template could not be loaded or saved: no decision can be made
                failures += 1
                if await self.failures.retry_after_failure(str(url), failures):
                    worker = self.pages.worker()
                    continue
                self._inc("checked")  # it went to the check, as every page with usable text
                return self.failures.unchecked(item, adapter)
            except Exception:
                logger.warning("could not sketch the text of an item; passing it through", exc_info=True)
                return self._skip(SKIP_NOT_TEXT, item)
            break
        if sketch.truncated:
            self._inc("truncated")
        if sketch.empty:
            return self._skip(SKIP_EMPTY, item)
        key = self._key(adapter, sketch)
        self._inc("checked")
        if self.order is not None:  # a later host's copy waits for the earlier host's
            await self.order.wait_turn(key, len(cast("Content", content)))
        canonical = self.canonicals.named(key, content, self.hooks) if self.canonicals is not None else None
        holder = self.canonicals.holder(canonical) if self.canonicals is not None and canonical else None
        if holder is not None and holder != key:
            return self._canonical_duplicate(item, adapter, key, cast(str, canonical), holder)
        while True:
            try:
                decision = await self._decide(key, sketch)
            except BackendError:
                # Without an answer from the store we cannot name a kept page, so the item is never dropped; it is
                # marked unchecked (when it can hold the mark field) so that a later pass can cover it - unless
                # NEARDUP_ON_BACKEND_DOWN='pause' has it wait for the backend and try again.
                failures += 1
                if await self.failures.retry_after_failure(key, failures):
                    continue
                if self.hooks is not None:
                    self.hooks.page_decided(item, key, sketch, None)
                return self.failures.unchecked(item, adapter)
            break
        self.outage.answered()
        if self.hooks is not None:
            self.hooks.page_decided(item, key, sketch, decision)
        if decision.outcome == "repeat" and not key.startswith(NO_URL_PREFIX):
            return self._repeat(item, adapter, key)  # counted once already, also by the mirror table
        duplicate_of = None if decision.match is None else decision.match.key
        representative_of = self._checked(key, duplicate_of, canonical)
        if decision.outcome in ("revisit", "repeat"):
            return self._revisit(item, adapter, key, decision.changed)
        if decision.match is None:
            self._inc("kept")
            return item
        return self._duplicate(item, adapter, key, decision.match, representative=representative_of is not None,
                               sketch=sketch)

    def _checked(self, key: str, duplicate_of: str | None, canonical: str | None) -> str | None:
        """Tell the crawl's observers, the canonical links and the host order that ``key`` was checked; returns
        the kept page that named ``key`` its canonical URL earlier, if one did."""
        representative_of = None
        if self.canonicals is not None:
            representative_of = self.canonicals.claimed_by(key)
            self.canonicals.checked(key, duplicate_of or key, canonical)
            if representative_of is not None:
                self._inc("canonical_representatives")
                logger.log(logging.INFO if self.config.debug else logging.DEBUG,
                           "%s is the canonical page of %s, kept earlier", key, representative_of)
        if self.order is not None:
            self.order.checked(key)
        if self.hooks is not None:
            self.hooks.page_checked(key, duplicate_of, representative_of=representative_of, canonical=canonical)
        return representative_of

    def _canonical_duplicate(self, item: Any, adapter: ItemAdapter, key: str, canonical: str, holder: str) -> Any:
        """A page naming as canonical URL a page checked earlier, whose content ``holder`` holds: dropped as
        :class:`CanonicalDropped` or marked ``{"duplicate_of": holder, "canonical": canonical}``, never kept."""
        self._checked(key, holder, canonical)
        self._inc("canonical")
        if self.config.action == "mark":
            logger.log(self._drop_level, "Marked %s: its canonical link names %s, kept as %s", key, canonical, holder)
            adapter[self.config.mark_field] = {"duplicate_of": holder, "canonical": canonical, "rule": "canonical"}
            self._inc("marked")
            return item
        self._inc("dropped")
        raise self._logged_once(CanonicalDropped(key, canonical, holder))

    async def _decide(self, key: str, sketch: Sketch) -> Decision:
        """The backend's decision for one page (a batch of one: see :meth:`Backend.check_and_add_many`)."""
        backend = self.backend
        assert backend is not None, "process_item called before open_spider"
        if backend.never_suspends:
            # Nothing can run between its check and its insert: the lock would only cost an event-loop trip.
            (decision,) = await backend.check_and_add_many([(key, sketch)])
            return decision
        # Serialize check-and-insert: a backend that awaits (Elasticsearch) would otherwise let two
        # near-duplicates both see "no match" and both be kept.
        # Pages ready at the same time go to the backend in one call; one call runs at a time (crawl.batcher).
        if self._batcher is None:
            self._batcher = CheckBatcher(backend, backend.max_batch)
        return await maybe_deferred_to_future(self._batcher.check(key, sketch))

    def _duplicate(self, item: Any, adapter: ItemAdapter, key: str, match: Match, representative: bool = False,
                   sketch: Sketch | None = None) -> Any:
        """A near-duplicate of the kept page ``match.key``: dropped or marked; ``representative``: it is the
        canonical page of that content, met after it (the mark says ``"representative": True``); ``sketch``: the
        item's, whose ``sketched`` and ``words`` go into the evidence."""
        if match.exact:
            self._inc("exact_duplicates")
        if self.config.action == "mark":
            logger.log(self._drop_level, "Marked near-duplicate %s of %s (%s)", key, match.key,
                       describe(match, self.config.num_perm, sketch))
            mark: dict[str, Any] = {"duplicate_of": match.key, "resemblance": match.resemblance, "exact": match.exact,
                                    **match_evidence(match, self.config.num_perm, sketch=sketch)}
            if representative:
                mark["representative"] = True
            adapter[self.config.mark_field] = mark
            self._inc("marked")
            return item
        self._inc("dropped")
        raise self._logged_once(NearDuplicateDropped(key, match, self.config.num_perm, sketch))

    def _revisit(self, item: Any, adapter: ItemAdapter, key: str, changed: bool) -> Any:
        """A page seen again under its key (see :meth:`~scrapy_neardup.core.index.SketchIndex.check_key`):
        counted in ``neardup/revisited`` (unchanged) or ``neardup/changed`` (the store now holds the new
        content); emitted, marked ``{"revisit": True, "changed": changed}`` in mark mode, or - unchanged, with
        ``NEARDUP_REVISIT = "drop_unchanged"`` - dropped (:class:`RevisitDropped`)."""
        if key.startswith(NO_URL_PREFIX):
            # Such a key is the text's fingerprint, not a page: "seen again" means an exact copy of the page
            # kept under that very key.
            exact = Match(key=key, shared=self.config.num_perm, resemblance=1.0, exact=True)
            return self._duplicate(item, adapter, key, exact)
        self._inc("changed" if changed else "revisited")
        if not changed and self.config.revisit == "drop_unchanged":
            self._inc("revisits_dropped")
            raise RevisitDropped(key)
        if self.config.action == "mark":
            adapter[self.config.mark_field] = {"revisit": True, "changed": changed}
        return item

    def _repeat(self, item: Any, adapter: ItemAdapter, key: str) -> Any:
        """A page this crawl already kept or revisited under its key, met again unchanged (a start URL linked
        again, a page fetched again after a resume): counted in ``neardup/repeats`` and dropped
        (:class:`RepeatDropped`, naming the page), or marked ``{"repeat": True}``; never emitted twice as a page.
        """
        self._inc("repeats")
        if self.config.action == "mark":
            logger.log(self._drop_level, "Marked repeat of %s (met again in this crawl, unchanged)", key)
            adapter[self.config.mark_field] = {"repeat": True, "rule": "repeat"}
            return item
        raise self._logged_once(RepeatDropped(key))

    def _soft404(self, item: Any, adapter: ItemAdapter, soft404: Soft404Match) -> Any:
        """A page that near-duplicates its host's soft-404 template: dropped or marked, never kept."""
        url = str(adapter.get(self.config.url_field))
        self._inc("soft404")
        if self.config.action == "mark":
            fields = evidence(soft404.shared, soft404.num_perm, "soft404")
            logger.log(self._drop_level, "Marked soft 404 %s (like the not-found page answered for %s, resemblance "
                       "%.3f, %s)", url, soft404.probe_url, soft404.resemblance, describe_evidence(fields))
            adapter[self.config.mark_field] = {"soft404": soft404.probe_url, "resemblance": soft404.resemblance,
                                               **fields}
            return item
        raise self._logged_once(Soft404Dropped(url, soft404))

    @property
    def _drop_level(self) -> int:
        """Where each drop or mark is logged: DEBUG, or INFO with ``NEARDUP_DEBUG``."""
        return logging.INFO if self.config.debug else logging.DEBUG

    def _logged_once(self, drop: DropItem) -> DropItem:
        """A dropped item is logged by Scrapy (its "Dropped: <reason>" line, at the exception's ``log_level``);
        the pipeline adds no line of its own, so each drop is logged once, at INFO with ``NEARDUP_DEBUG``."""
        drop.log_level = logging.getLevelName(self._drop_level)
        return drop

    def _key(self, adapter: ItemAdapter, sketch: Sketch) -> str:
        url = adapter.get(self.config.url_field)
        if url is None or url == "":
            self._inc("missing_url")
            return f"{NO_URL_PREFIX}{sketch.fingerprint:016x}"
        return url if isinstance(url, str) else str(url)

    def _skip(self, reason: str, item: Any) -> Any:
        self._inc(SKIP_STATS[reason])
        return item

    @staticmethod
    def check_mark_field(item_class: type, field: str) -> None:
        """Raise :class:`MarkFieldError` when ``item_class`` declares its fields and ``field`` is not one."""
        check_mark_field(item_class, field)

    def _inc(self, name: str, count: int = 1) -> None:
        self._counts[name] = self._counts.get(name, 0) + count
        if self.stats is not None:
            self.stats.inc_value(STATS_PREFIX + name, count)


