"""The Scrapy item pipeline that keeps near-duplicate pages out of a crawl's output.

Enable it with the add-on (``ADDONS = {"scrapy_neardup.NearDuplicateAddon": 0}``) or as
``ITEM_PIPELINES = {"scrapy_neardup.NearDuplicatePipeline": 300}``. Each item's text is sketched (by default in a
child process, :mod:`scrapy_neardup.crawl.sketch_worker`) and checked against the pages kept so far, one
check-and-insert at a time (:class:`~scrapy_neardup.crawl.batcher.CheckBatcher`); a near-duplicate is dropped or
marked, naming the kept page.

Design notes: docs/architecture.md#scrapy_neardupcrawlpipeline
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from itemadapter import ItemAdapter
from scrapy import signals
from scrapy.exceptions import CloseSpider, NotConfigured
from scrapy.utils.defer import maybe_deferred_to_future

from ..core.dedupe import SKIP_EMPTY, SKIP_NOT_TEXT, skip_reason
from ..core.theory import describe_rule
from ..errors import BackendError, BinaryContent, NearDupError
from .batcher import CheckBatcher
from .canonical import CanonicalLinks
from .check_failures import CheckFailures
from .context import CrawlContext
from .exit_status import fail_exit_status
from .item_fields import ItemFieldChecks, check_mark_field
from .order import KeepOrder
from .outage import UNCHECKED, BackendOutage, describe_unchecked, too_many_unchecked
from .outcomes import NO_URL_PREFIX, Outcomes, Page
from .page_sketcher import PageSketcher
from .search_writer import require_search_writer
from .startup import component_startup, report_startup_failure
from .summary import summarize
from .template_wait import HOLD_ACTIVE_SIZE

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from ..core.match import Decision
    from ..core.sketch import Content, Sketch, Sketcher
    from ..store.backend import Backend

logger = logging.getLogger(__name__)

T = TypeVar("T")


class _Unchecked(NearDupError):
    """The backend could not check the page, and the outage policy does not try again: it passes through."""


class NearDuplicatePipeline:
    """Drop (or mark) items whose page text near-duplicates a page kept earlier in the crawl.

    Built by Scrapy through :meth:`from_crawler`; the ``NEARDUP_*`` settings: docs/settings.md.

    Args:
        context: what the crawl's parts share: settings, counters, hooks, the store once open
            (:meth:`CrawlContext.of(crawler) <scrapy_neardup.crawl.context.CrawlContext.of>` in a crawl; a
            ``CrawlContext()`` of its own outside one).
        backend: the store to check against (opened in :meth:`open_spider`); ``None``: :meth:`make_backend`
            builds the one ``NEARDUP_BACKEND`` names.
    """

    def __init__(self, context: CrawlContext, backend: Backend | None = None) -> None:
        self.context = context
        self.config = context.config
        self.stats = context.stats
        self.crawler = context.crawler
        self.hooks = context.hooks
        self._given_backend = backend
        self._backend_seen: dict[str, int] = {}
        self._opened = False
        self._batcher: CheckBatcher | None = None
        self.fields = ItemFieldChecks(context)
        #: what a check the backend cannot answer does (``NEARDUP_ON_BACKEND_DOWN``: pass, pause, stop)
        self.outage = BackendOutage(context)
        self.failures = CheckFailures(context, self.outage)
        #: content to sketch: in the worker process, under the host's template
        self.pages = PageSketcher(context)
        self.outcomes = Outcomes(context)
        #: which copy is kept when hosts serve the same pages (``None``: outside a crawl)
        self.order = KeepOrder(context) if context.crawler is not None else None
        #: the canonical links met (``None``: ``NEARDUP_CANONICAL`` is off)
        self.canonicals = CanonicalLinks(context) if context.hosts.canonical else None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> NearDuplicatePipeline:
        """Read the settings and build the backend; ``NotConfigured`` when ``NEARDUP_ENABLED`` is false.

        Raises:
            NearDupSettingsError: a ``NEARDUP_*`` setting is wrong, the backend's own ones included (the
                backend is built here, not in :meth:`open_spider`). Scrapy then aborts the crawl before the
                first request and logs the message (which names the setting and its value).
        """
        with component_startup(crawler):
            context = CrawlContext.of(crawler)
            config = context.config
            require_search_writer(crawler.settings)  # a search index nothing would write: said at start
            if not config.enabled:
                raise NotConfigured("NEARDUP_ENABLED is False")
            pipeline = cls(context)  # its parts read the host settings
            pipeline._given_backend = config.make_backend(crawler.settings)
        crawler.signals.connect(pipeline.spider_idle, signal=signals.spider_idle)
        if pipeline.order is not None and context.hosts.copy_wait > 0:  # no waits: no request to follow
            pipeline.order.follow(crawler, room=HOLD_ACTIVE_SIZE)
        return pipeline

    @property
    def sketcher(self) -> Sketcher:
        """What pages are sketched with (the ``NEARDUP_*`` sketch parameters)."""
        return self.pages.sketcher

    @sketcher.setter
    def sketcher(self, sketcher: Sketcher) -> None:
        self.pages.sketcher = sketcher

    @property
    def backend(self) -> Backend | None:
        """The store pages are checked against, once :meth:`open_spider` opened it."""
        return self.context.backend

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
        backend = self.context.backend = self.make_backend()
        try:
            await backend.open()
        except Exception as exc:
            # The message names what to fix (NEARDUP_ES_URL, a damaged state file): one line, then stop the
            # crawl before any page is fetched.
            report_startup_failure(exc, log_level=self.context.log_level)
            raise
        self._opened = True
        self.fields.check_csv_feeds()
        self.pages.open(backend)
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
                self.context.count("backend_paused_seconds", round(self.outage.paused_seconds))
            # A crawl in which no item had the text field checked nothing, or in which pages went unchecked:
            # say it at WARNING, again.
            quiet = not self.fields.no_text_field() and not self.context.counts.get("unchecked")
            logger.log(logging.INFO if quiet else logging.WARNING, "%s", self.summary())
            self._fail_if_too_many_unchecked()

    def spider_idle(self, spider: Any = None) -> None:
        """The crawl is about to finish: with more pages passed through unchecked than ``NEARDUP_MAX_UNCHECKED``
        allows, its close reason is ``neardup_unchecked`` instead of ``finished``."""
        if self.too_many_unchecked():
            raise CloseSpider(UNCHECKED)

    def too_many_unchecked(self) -> bool:
        """More of the checked pages passed through unchecked than ``NEARDUP_MAX_UNCHECKED`` allows."""
        c = self.context.counts.get
        return too_many_unchecked(c("unchecked", 0), c("checked", 0), self.config.outage.max_unchecked)

    def _fail_if_too_many_unchecked(self) -> None:
        if self.crawler is None or not self.too_many_unchecked():
            return
        c = self.context.counts.get
        fail_exit_status(self.crawler, (
            f"{describe_unchecked(c('unchecked', 0), c('checked', 0))} passed through unchecked "
            f"(NEARDUP_MAX_UNCHECKED={self.config.outage.max_unchecked:g})"
        ))

    def _add_backend_stats(self) -> None:
        """Add what the backend's counters (:meth:`Backend.stats`) grew by since the last read: read after
        opening (what it found), and after closing, because closing may still write: retries (Elasticsearch:
        connection errors, timeouts, HTTP 429/502/503/504, the 500s of a failover) and what became of the items
        passed through unchecked (``unchecked_indexed``, ``unchecked_unindexed``, ``unchecked_overflow``)."""
        assert self.backend is not None
        for name, count in self.backend.stats().items():
            grown = int(count) - self._backend_seen.get(name, 0)
            if grown:
                self.context.count(name, grown)
                self._backend_seen[name] = int(count)

    def summary(self) -> str:
        """One line with what the pipeline did so far."""
        fields = self.fields
        note = fields.text_field_missing(f"all {fields.probed} items") if fields.no_text_field() else None
        return summarize(self.context.counts, self.config, self.outage, note)

    # -- items -----------------------------------------------------------------------------------------------

    async def process_item(self, item: Any, spider: Any = None) -> Any:
        """Return ``item`` when kept, skipped or marked; raise a ``DropItem`` (:mod:`scrapy_neardup.crawl.drops`)
        when dropped."""
        adapter = ItemAdapter(item)
        page = Page(item, adapter, adapter.get(self.config.url_field))
        # In the pipeline until decided: pages of later hosts with its path wait for it (crawl.order).
        entered = self.order.enter(page.url) if self.order is not None else None
        try:
            return await self._process(page)
        except _Unchecked:
            return self._unchecked(page)
        finally:
            if self.order is not None:
                self.order.leave(entered)

    async def _process(self, page: Page) -> Any:
        """The steps of one item, in order; each may settle it (kept, skipped, dropped or marked)."""
        if self.config.action == "mark" and not self.fields.can_mark(page.item, page.adapter):
            return page.item
        self.fields.probe_text_field(page.adapter)
        soft404 = self.hooks.soft404(str(page.url))
        if soft404 is not None:
            return self.outcomes.soft404(page, soft404)
        content = page.adapter.get(self.config.text_field)
        # Without a worker process, binary content is told from text here; else the worker tells.
        reason = skip_reason(content, check_binary=self.pages.worker() is None)
        if reason is not None:
            return self.outcomes.skipped(reason, page)
        sketch = await self._retrying(page, self._sketch, cast("Content", content), page.url)
        if sketch is None:
            return self.outcomes.skipped(SKIP_NOT_TEXT, page)
        if sketch.truncated:
            self.context.count("truncated")
        if sketch.empty:
            return self.outcomes.skipped(SKIP_EMPTY, page)
        key = page.key = self._key(page.url, sketch)
        page.sketch = sketch
        self.context.count("checked")
        if self.order is not None:  # a later host's copy waits for the earlier host's
            await self.order.wait_turn(key, len(cast("Content", content)))
        canonical = self.canonicals.named(key, content) if self.canonicals is not None else None
        holder = self.canonicals.holder(canonical) if self.canonicals is not None and canonical else None
        if canonical is not None and holder is not None and holder != key:
            self._checked(key, holder, canonical)
            return self.outcomes.canonical(page, canonical, holder)
        decision = await self._retrying(page, self._decide, key, sketch)
        self.outage.answered()
        self.hooks.page_decided(page.item, key, sketch, decision)
        return self._settle(page, decision, canonical)

    async def _retrying(self, page: Page, step: Callable[..., Awaitable[T]], *args: Any) -> T:
        """The one retry rule: ``step(*args)``, tried again while the backend cannot answer (``BackendError``)
        and the outage policy says to (``NEARDUP_ON_BACKEND_DOWN = "pause"``: after its wait); ``_Unchecked``
        when it gives up. Without an answer from the store no kept page can be named, so the item is never
        dropped for it. The page's failures are counted across its steps (the first one is logged)."""
        while True:
            try:
                return await step(*args)
            except BackendError:
                page.failures += 1
                if not await self.failures.retry_after_failure(page.name, page.failures):
                    raise _Unchecked from None

    async def _sketch(self, content: Content, url: Any) -> Sketch | None:
        """The page's sketch; ``None`` when its content is not text (binary, or the sketcher failed on it).

        Raises:
            BackendError: the host's template could not be loaded or saved (no decision can be made).
        """
        try:
            return await self.pages.sketch_page(content, self.pages.worker(), url)
        except BinaryContent:
            logger.debug("binary content of %s is not sketched", url)
        except BackendError:
            raise
        except Exception:
            logger.warning("could not sketch the text of an item; passing it through", exc_info=True)
        return None

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

    def _settle(self, page: Page, decision: Decision, canonical: str | None) -> Any:
        """Apply the backend's decision: a repeat, a revisit, kept, or a near-duplicate."""
        key = str(page.key)
        if decision.outcome == "repeat" and not key.startswith(NO_URL_PREFIX):
            return self.outcomes.repeat(page)  # counted once already, also by the mirror table
        duplicate_of = None if decision.match is None else decision.match.key
        representative_of = self._checked(key, duplicate_of, canonical)
        if decision.outcome in ("revisit", "repeat"):
            return self.outcomes.revisit(page, decision.changed)
        if decision.match is None:
            return self.outcomes.kept(page)
        return self.outcomes.duplicate(page, decision.match, representative=representative_of is not None,
                                       sketch=page.sketch)

    def _unchecked(self, page: Page) -> Any:
        """The backend could not check the page: it passes through, marked unchecked where it can hold the mark."""
        if page.sketch is None:  # its template could not be loaded: it went to the check, as every usable page
            self.context.count("checked")
        else:
            self.hooks.page_decided(page.item, str(page.key), page.sketch, None)
        return self.failures.unchecked(page.item, page.adapter)

    def _checked(self, key: str, duplicate_of: str | None, canonical: str | None) -> str | None:
        """Tell the crawl's observers, the canonical links and the host order that ``key`` was checked; returns
        the kept page that named ``key`` its canonical URL earlier, if one did."""
        representative_of = None
        if self.canonicals is not None:
            representative_of = self.canonicals.claimed_by(key)
            self.canonicals.checked(key, duplicate_of or key, canonical)
            if representative_of is not None:
                self.context.count("canonical_representatives")
                logger.log(self.outcomes.level, "%s is the canonical page of %s, kept earlier", key,
                           representative_of)
        if self.order is not None:
            self.order.checked(key)
        self.hooks.page_checked(key, duplicate_of, representative_of=representative_of, canonical=canonical)
        return representative_of

    def _key(self, url: Any, sketch: Sketch) -> str:
        if url is None or url == "":
            self.context.count("missing_url")
            return f"{NO_URL_PREFIX}{sketch.fingerprint:016x}"
        return url if isinstance(url, str) else str(url)

    @staticmethod
    def check_mark_field(item_class: type, field: str) -> None:
        """Raise :class:`MarkFieldError` when ``item_class`` declares its fields and ``field`` is not one."""
        check_mark_field(item_class, field)
