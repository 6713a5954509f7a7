"""The Scrapy item pipeline that keeps near-duplicate pages out of a crawl's output.

Enable it with the add-on (:class:`~scrapy_neardup.crawl.addon.NearDuplicateAddon`) or directly::

    ADDONS = {"scrapy_neardup.NearDuplicateAddon": 0}
    ITEM_PIPELINES = {"scrapy_neardup.NearDuplicatePipeline": 300}  # the same, by hand

Each item's text (``NEARDUP_TEXT_FIELD``) is sketched and checked against the pages kept so far. When it
shares at least ``t`` of ``k`` signature positions with one of them, the item is dropped
(:class:`NearDuplicateDropped`, naming the kept page and the estimated resemblance) or marked; otherwise the
page is kept and later pages are checked against it. First seen is kept.

Concurrency: Scrapy runs ``process_item`` for up to ``CONCURRENT_ITEMS`` items at a time. The check and the
insert of one item must not interleave with another's, or two near-duplicates checked at the same time could
both be kept. A :class:`~scrapy_neardup.crawl.batcher.CheckBatcher` runs one ``check_and_add_many`` call at a time
within the process, and sends the pages that became ready meanwhile together in the next call (unless the backend
declares ``never_suspends``, as the embedded one does: its check-and-insert never awaits, so nothing can
interleave); it is built on Deferreds awaited through :func:`scrapy.utils.defer.maybe_deferred_to_future`, which
works with the asyncio reactor (Scrapy's default), with other reactors, and without a reactor. Sketching, the
CPU-bound part, happens outside the batches, by default in a child process
(:mod:`scrapy_neardup.crawl.sketch_worker`).

Persistence: the embedded store lives in ``NEARDUP_STATE_DIR`` (default ``<JOBDIR>/neardup``): a snapshot
saved atomically on ``close_spider``, and a journal to which each kept page is appended before its item leaves
the pipeline (see :mod:`scrapy_neardup.store.embedded`). Both are loaded on ``open_spider``, so a crawl paused
gracefully, or killed (``kill -9``), and resumed with the same JOBDIR drops near-duplicates of pages kept
before; what the journal recovered is counted in ``neardup/journal_replayed`` (``neardup/journal_torn``: the
torn record of the page in flight at the kill, ignored). Damaged or mismatched state stops the crawl at start
with :class:`~scrapy_neardup.core.index.StateError`, and is left untouched.

Outages: a check the backend cannot answer never drops its item. ``NEARDUP_ON_BACKEND_DOWN`` decides whether it
passes through unchecked (``"pass"``, the default), waits while the crawl pauses until the backend answers
(``"pause"``), or stops the crawl (``"stop"``); more unchecked pages than ``NEARDUP_MAX_UNCHECKED`` allows (by
default any) fail the crawl: close reason ``neardup_unchecked``, exit status 1. See
:mod:`scrapy_neardup.crawl.outage`.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any, cast

from itemadapter import ItemAdapter
from scrapy import signals
from scrapy.exceptions import CloseSpider, NotConfigured
from scrapy.utils.defer import maybe_deferred_to_future

from ..core.dedupe import SKIP_EMPTY, SKIP_MISSING, SKIP_NOT_TEXT, skip_reason
from ..core.match import Match
from ..core.theory import describe_rule
from ..errors import BinaryContent, MarkFieldError
from ..store.backend import Backend, BackendError, Decision
from .batcher import CheckBatcher
from .drops import NearDuplicateDropped, RepeatDropped, RevisitDropped, describe
from .exit_status import fail_exit_status
from .hooks import CrawlHooks, crawl_hooks
from .outage import UNCHECKED, BackendOutage, close_crawl, describe_unchecked, too_many_unchecked
from .page_sketcher import PageSketcher
from .settings import NearDupSettings, NearDupSettingsError
from .soft404 import Soft404Dropped
from .startup import component_startup, report_startup_failure

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

    from ..core.sketch import Content, Sketch, Sketcher
    from ..core.soft404 import Soft404Match

logger = logging.getLogger(__name__)

#: Prefix of every stat this pipeline writes.
STATS_PREFIX = "neardup/"
#: Stat names by reason an item was not checked (see :func:`scrapy_neardup.core.dedupe.skip_reason`).
SKIP_STATS = {
    SKIP_MISSING: "skipped_no_text",
    SKIP_NOT_TEXT: "skipped_bad_text",
    SKIP_EMPTY: "skipped_empty",
}
#: Spider close reason when NEARDUP_ACTION='mark' meets an item class without the mark field.
MARK_FIELD_MISSING = "neardup_mark_field_missing"
#: Items looked at before warning that none of them has NEARDUP_TEXT_FIELD.
TEXT_FIELD_PROBE = 20
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
    """

    def __init__(
        self, config: NearDupSettings, stats: StatsCollector | None = None, crawler: Crawler | None = None,
        backend: Backend | None = None,
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
        self._mark_checked: dict[type, bool] = {}  # item class -> can it hold the mark field?
        self._probed = 0  # items looked at for NEARDUP_TEXT_FIELD, until one has it
        self._probe_fields: set[str] = set()  # the fields those items have
        self._text_field_seen = False
        self._text_field_warned = False
        self._backend_error_logged = False
        self._stopping = False
        # What a check the backend cannot answer does (NEARDUP_ON_BACKEND_DOWN: pass, pause, stop).
        self.outage = BackendOutage(config.outage, crawler, self._inc)
        # Content to sketch: in the worker process, under the host's template (crawl.page_sketcher).
        self.pages = PageSketcher(config.sketcher(), config.sketch_process, config.template_sample, crawler, self._inc)
        self._log_level: str | int = "DEBUG"  # the crawl's LOG_LEVEL: whether start-up failures show a traceback
        # Soft-404 verdicts in, checked pages out (scrapy_neardup.crawl.soft404 and .mirrors, when enabled).
        self.hooks: CrawlHooks | None = crawl_hooks(crawler) if crawler is not None else None

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
            if not config.enabled:
                raise NotConfigured("NEARDUP_ENABLED is False")
            backend = config.make_backend(crawler.settings)
        pipeline = cls(config, stats=crawler.stats, crawler=crawler, backend=backend)
        pipeline._log_level = log_level
        crawler.signals.connect(pipeline.spider_idle, signal=signals.spider_idle)
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
        self._check_csv_feeds()
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
            quiet = not self._no_text_field() and not self._counts.get("unchecked")
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

    def _check_csv_feeds(self) -> None:
        """Mark mode with a CSV feed whose exporter is Scrapy's own: say once that the mark would be a Python dict
        repr there, and how to get JSON text (:mod:`scrapy_neardup.crawl.exporters`; the add-on sets it)."""
        if self.config.action != "mark" or self.crawler is None:
            return
        settings = self.crawler.settings
        feeds = [str(uri) for uri, options in settings.getdict("FEEDS").items()
                 if isinstance(options, dict) and options.get("format") == "csv"]
        if not feeds:
            return
        from scrapy.utils.misc import load_object

        from .exporters import CSV_EXPORTER, CsvItemExporter

        try:
            exporter = load_object(settings.getwithbase("FEED_EXPORTERS").get("csv"))
        except (ImportError, NameError, TypeError, ValueError, AttributeError):
            return  # Scrapy's feed exporter reports it
        if isinstance(exporter, type) and issubclass(exporter, CsvItemExporter):
            return
        logger.warning(
            "NEARDUP_ACTION='mark' with a CSV feed (%s): Scrapy's CSV exporter writes the %r mark as a Python dict "
            "repr; set FEED_EXPORTERS = {'csv': %r} (the add-on does) to get JSON text", ", ".join(feeds),
            self.config.mark_field, CSV_EXPORTER,
        )

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
        c = self._counts.get
        skipped = sum(c(name, 0) for name in SKIP_STATS.values())
        verdict = f"marked {c('marked', 0)}" if self.config.action == "mark" else f"dropped {c('dropped', 0)}"
        line = (
            f"Near-duplicates: checked {c('checked', 0)} items, kept {c('kept', 0)}, {verdict} "
            f"({c('exact_duplicates', 0)} exact), passed through {skipped} without usable text"
        )
        if c("revisited", 0) or c("changed", 0):
            line += f", revisited {c('revisited', 0)} unchanged and {c('changed', 0)} changed pages"
            if c("revisits_dropped", 0):
                line += f" ({c('revisits_dropped')} unchanged dropped)"
        if c("repeats", 0):
            line += (f", {c('repeats')} repeats {'marked' if self.config.action == 'mark' else 'dropped'} (pages "
                     "met again in this crawl, unchanged)")
        if c("soft404", 0):
            line += f", {c('soft404')} soft 404s {'marked' if self.config.action == 'mark' else 'dropped'}"
        if c("backend_errors", 0):
            line += f", the backend failed to check {c('backend_errors')} pages"
        if c("unchecked", 0):
            line += f"; {describe_unchecked(c('unchecked', 0), c('checked', 0))} passed through unchecked"
            if c("unchecked_indexed", 0) or c("unchecked_unindexed", 0):
                line += (f" ({c('unchecked_indexed', 0)} written to the index afterwards, "
                         f"{c('unchecked_unindexed', 0)} not)")
        if self.outage.pauses:
            line += (f"; the crawl paused {self.outage.pauses} time(s), {self.outage.paused_seconds:.1f} s in all, "
                     "while the backend was down")
        if c("missing_url", 0):
            line += f", {c('missing_url')} without {self.config.url_field!r}"
        if c("mark_field_missing", 0):
            line += (f", {c('mark_field_missing')} passed through unmarked and unchecked (their item class has "
                     f"no field {self.config.mark_field!r})")
        if self._no_text_field():
            line += "; " + self._text_field_missing(f"all {self._probed} items")
        return line

    # -- items -----------------------------------------------------------------------------------------------

    async def process_item(self, item: Any, spider: Any = None) -> Any:
        """Return ``item`` when kept, skipped or marked; raise :class:`NearDuplicateDropped` when dropped."""
        adapter = ItemAdapter(item)
        if self.config.action == "mark" and not self._can_mark(item, adapter):
            return item
        if not self._text_field_seen:
            self._probe_text_field(adapter)
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
                if await self._retry_after_failure(str(url), failures):
                    worker = self.pages.worker()
                    continue
                self._inc("checked")  # it went to the check, as every page with usable text
                return self._unchecked(item, adapter)
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
        while True:
            try:
                decision = await self._decide(key, sketch)
            except BackendError:
                # Without an answer from the store we cannot name a kept page, so the item is never dropped; it is
                # marked unchecked (when it can hold the mark field) so that a later pass can cover it - unless
                # NEARDUP_ON_BACKEND_DOWN='pause' has it wait for the backend and try again.
                failures += 1
                if await self._retry_after_failure(key, failures):
                    continue
                if self.hooks is not None:
                    self.hooks.page_decided(item, key, sketch, None)
                return self._unchecked(item, adapter)
            break
        self.outage.answered()
        if self.hooks is not None:
            self.hooks.page_decided(item, key, sketch, decision)
        if decision.outcome == "repeat" and not key.startswith(NO_URL_PREFIX):
            return self._repeat(item, adapter, key)  # counted once already, also by the mirror table
        if self.hooks is not None:
            self.hooks.page_checked(key, None if decision.match is None else decision.match.key)
        if decision.outcome in ("revisit", "repeat"):
            return self._revisit(item, adapter, key, decision.changed)
        if decision.match is None:
            self._inc("kept")
            return item
        return self._duplicate(item, adapter, key, decision.match)

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

    def _duplicate(self, item: Any, adapter: ItemAdapter, key: str, match: Match) -> Any:
        if match.exact:
            self._inc("exact_duplicates")
        level = logging.INFO if self.config.debug else logging.DEBUG
        verb = "Marked" if self.config.action == "mark" else "Dropped"
        logger.log(level, "%s near-duplicate %s of %s (%s)", verb, key, match.key, describe(match))
        if self.config.action == "mark":
            adapter[self.config.mark_field] = {
                "duplicate_of": match.key,
                "resemblance": match.resemblance,
                "exact": match.exact,
            }
            self._inc("marked")
            return item
        self._inc("dropped")
        raise NearDuplicateDropped(key, match)

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
        level = logging.INFO if self.config.debug else logging.DEBUG
        logger.log(level, "%s repeat of %s (met again in this crawl, unchanged)",
                   "Marked" if self.config.action == "mark" else "Dropped", key)
        if self.config.action == "mark":
            adapter[self.config.mark_field] = {"repeat": True}
            return item
        raise RepeatDropped(key)

    def _soft404(self, item: Any, adapter: ItemAdapter, soft404: Soft404Match) -> Any:
        """A page that near-duplicates its host's soft-404 template: dropped or marked, never kept."""
        url = str(adapter.get(self.config.url_field))
        level = logging.INFO if self.config.debug else logging.DEBUG
        logger.log(level, "%s soft 404 %s (like %s, resemblance %.3f)",
                   "Marked" if self.config.action == "mark" else "Dropped", url, soft404.probe_url,
                   soft404.resemblance)
        self._inc("soft404")
        if self.config.action == "mark":
            adapter[self.config.mark_field] = {"soft404": soft404.probe_url, "resemblance": soft404.resemblance}
            return item
        raise Soft404Dropped(url, soft404)

    def _key(self, adapter: ItemAdapter, sketch: Sketch) -> str:
        url = adapter.get(self.config.url_field)
        if url is None or url == "":
            self._inc("missing_url")
            return f"{NO_URL_PREFIX}{sketch.fingerprint:016x}"
        return url if isinstance(url, str) else str(url)

    def _skip(self, reason: str, item: Any) -> Any:
        self._inc(SKIP_STATS[reason])
        return item

    # -- mark mode -------------------------------------------------------------------------------------------

    @staticmethod
    def check_mark_field(item_class: type, field: str) -> None:
        """Raise :class:`MarkFieldError` when ``item_class`` declares its fields and ``field`` is not one."""
        names = ItemAdapter.get_field_names_from_class(item_class)
        if names is not None and field not in names:
            raise MarkFieldError(
                f"NEARDUP_ACTION='mark' needs item field NEARDUP_MARK_FIELD={field!r}, which "
                f"{item_class.__module__}.{item_class.__qualname__} does not declare: add "
                f"`{field} = scrapy.Field()` (or a dataclass/attrs field) to the item class, or set "
                "NEARDUP_MARK_FIELD to a declared field"
            )

    def _can_mark(self, item: Any, adapter: ItemAdapter) -> bool:
        """Whether ``item`` can hold the mark field; if so it gets ``None`` unless it holds a value already,
        so that every item of a mark-mode crawl carries the field (feed exports then have a stable schema:
        Scrapy's CSV exporter takes its columns from the first item).

        An item of a class that does not declare the field is passed through unmarked and unchecked (counted
        in ``neardup/mark_field_missing``; never lost, never dropped); the first one logs the error, stops the
        crawl (close reason ``neardup_mark_field_missing``) and makes its exit status non-zero.
        """
        cls = type(item)
        can = self._mark_checked.get(cls)
        if can is None:
            try:
                self.check_mark_field(cls, self.config.mark_field)
            except MarkFieldError as exc:
                self._stop_crawl(str(exc))
                can = False
            else:
                can = True
            self._mark_checked[cls] = can
        if not can:
            self._inc("mark_field_missing")
            return False
        with contextlib.suppress(KeyError, TypeError, AttributeError):  # a field the class cannot hold
            if adapter.get(self.config.mark_field) is None:
                adapter[self.config.mark_field] = None
        return True

    def _stop_crawl(self, message: str) -> None:
        """Log ``message`` once, close the spider and make the crawl's exit status non-zero: a
        misconfiguration must not let the crawl run on, nor look like a success to whoever scheduled it."""
        if self._stopping:
            return
        self._stopping = True
        logger.error(message)
        if self.crawler is None:
            return
        field = self.config.mark_field
        close_crawl(self.crawler, MARK_FIELD_MISSING,
                    f"NEARDUP_MARK_FIELD={field!r} is missing from an item class (see above)")

    # -- a text field that no item has -----------------------------------------------------------------------

    def _probe_text_field(self, adapter: ItemAdapter) -> None:
        """Warn once when the first :data:`TEXT_FIELD_PROBE` items all lack ``NEARDUP_TEXT_FIELD`` (a wrong
        setting turns the pipeline into a no-op otherwise), naming the fields they do have."""
        if adapter.get(self.config.text_field) is not None:
            self._text_field_seen = True
            return
        self._probed += 1
        self._probe_fields.update(name for name in adapter if adapter.get(name) is not None)
        if self._probed == TEXT_FIELD_PROBE and not self._text_field_warned:
            self._text_field_warned = True
            logger.warning("%s", self._text_field_missing(f"the first {TEXT_FIELD_PROBE} items"))

    def _text_field_missing(self, which: str) -> str:
        fields = ", ".join(sorted(self._probe_fields)) or "none"
        return (f"NEARDUP_TEXT_FIELD={self.config.text_field!r} is missing from {which}, which have fields: "
                f"{fields}; nothing is being checked")

    def _no_text_field(self) -> bool:
        """No item so far had the text field (and at least one item came)."""
        return self._probed > 0 and not self._text_field_seen

    async def _retry_after_failure(self, key: str, failures: int) -> bool:
        """The backend could not answer for ``key`` (its ``failures``-th try): count the page once in
        ``neardup/backend_errors``, then ask the outage policy whether to try again (after a wait)."""
        if failures == 1:
            self._backend_failed(key)
        else:
            logger.debug("near-duplicate backend failed again while checking %s (try %d)", key, failures,
                         exc_info=True)
        return await self.outage.retry_after_failure(key)

    def _backend_failed(self, key: str) -> None:
        self._inc("backend_errors")
        if not self._backend_error_logged:
            self._backend_error_logged = True
            what = {"pass": "the item passes through unchecked", "pause": "the crawl pauses until it answers",
                    "stop": "the crawl stops"}[self.config.outage.on_backend_down]
            logger.error(
                "near-duplicate backend failed while checking %s; %s (NEARDUP_ON_BACKEND_DOWN=%r; later "
                "failures are logged at DEBUG and counted in neardup/backend_errors)", key, what,
                self.config.outage.on_backend_down, exc_info=True,
            )
        else:
            logger.debug("near-duplicate backend failed while checking %s", key, exc_info=True)

    def _unchecked(self, item: Any, adapter: ItemAdapter) -> Any:
        """Mark an item the backend could not check: ``{NEARDUP_MARK_FIELD: {"unchecked": True}}`` when the
        item can hold the field (counted in ``neardup/unchecked``); the item passes through either way.

        The Elasticsearch backend remembers the page and writes it to its index with status ``unchecked`` once
        the node answers again (at the latest when the spider closes), so ``neardup es groups`` covers it.
        """
        self._inc("unchecked")
        # An Item/dataclass that does not declare the field raises KeyError: it passes through unmarked.
        with contextlib.suppress(KeyError, TypeError, AttributeError):
            adapter[self.config.mark_field] = {"unchecked": True}
        return item

    def _inc(self, name: str, count: int = 1) -> None:
        self._counts[name] = self._counts.get(name, 0) + count
        if self.stats is not None:
            self.stats.inc_value(STATS_PREFIX + name, count)


__all__ = [
    "MarkFieldError", "NearDuplicateDropped", "NearDuplicatePipeline", "NearDupSettingsError", "RepeatDropped",
    "RevisitDropped",
]
