"""The crawl's items written to a search index as they leave the pipelines: :class:`SearchIndexPipeline`.

Design notes: docs/architecture.md#scrapy_neardupcrawlsearch_writer
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, NamedTuple, cast

from itemadapter import ItemAdapter
from scrapy import signals
from scrapy.exceptions import CloseSpider, NotConfigured
from scrapy.utils.misc import load_object
from scrapy.utils.serialize import ScrapyJSONEncoder

from ..core.html import html_to_text, looks_like_html
from ..errors import NearDupSettingsError
from ..store.config import SettingsLike, read_setting, read_str
from ..store.search_sink import SearchPage, SearchSink, SearchStatus
from .context import CrawlContext
from .drops import NearDuplicateDropped, RepeatDropped
from .exit_status import fail_exit_status
from .settings import NearDupSettings
from .startup import component_startup, report_startup_failure

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

    from ..core.match import Decision
    from ..core.sketch import Sketch

logger = logging.getLogger(__name__)

#: The sink this distribution ships (loaded by path: the Scrapy layer never imports es_integration).
SINK = "es_integration.search_index.ElasticsearchSearchSink"
#: The object a search document keeps its near-duplicate fields in (an item's mark field must not be it).
RESERVED_FIELD = "neardup"
#: Spider close reason when items could not be written to the search index.
SEARCH_FAILED = "neardup_search_failed"
FAILED_FILE = "neardup-search-failed.jl"
Duplicates = Literal["skip", "index"]
#: Key prefix of an item without a URL that the pipeline did not sketch (the rest: a hash of its fields).
NO_URL_PREFIX = "no-url:"


@dataclass(frozen=True, slots=True)
class SearchIndexSettings:
    """The ``NEARDUP_SEARCH_*`` settings the component reads (the sink reads its own)."""

    index: str
    duplicates: Duplicates = "skip"
    failed_file: Path = Path(FAILED_FILE)

    @classmethod
    def from_settings(cls, settings: SettingsLike, pipeline: NearDupSettings) -> SearchIndexSettings:
        """Raises:
            NotConfigured: ``NEARDUP_SEARCH_INDEX`` is not set.
            NearDupSettingsError: a setting is wrong, or the mark field is the reserved ``neardup`` object.
        """
        index = read_str(settings, "NEARDUP_SEARCH_INDEX")
        if index is None:
            raise NotConfigured("NEARDUP_SEARCH_INDEX is not set")
        if pipeline.enabled and pipeline.action == "mark" and pipeline.mark_field == RESERVED_FIELD:
            raise NearDupSettingsError(
                f"NEARDUP_MARK_FIELD={RESERVED_FIELD!r} is the object where NEARDUP_SEARCH_INDEX documents keep "
                "their near-duplicate fields: set NEARDUP_MARK_FIELD to another item field (e.g. 'neardup_mark')"
            )
        duplicates = cast(Duplicates, read_setting(settings, "NEARDUP_SEARCH_DUPLICATES"))
        failed = read_str(settings, "NEARDUP_SEARCH_FAILED_FILE")
        if failed is None:
            jobdir = read_str(settings, "JOBDIR")
            failed = str(Path(jobdir) / FAILED_FILE) if jobdir else FAILED_FILE
        return cls(index, duplicates, Path(failed))


class Decided(NamedTuple):
    """What the near-duplicate pipeline decided of one item, handed over with the item itself."""

    item: Any
    key: str
    sketch: Sketch
    decision: Decision | None


class DecidedItems:
    """The pipeline's decisions waiting for their items to reach the search writer.

    Found by the item object itself (its identity: items are mutable, often unhashable dicts). Each entry holds its
    item, so while it waits no other object can take that identity. A pipeline between the two may hand on a new
    object in place of the item (a copy, an item of another class): its decision is then found by the item's URL
    field, the one the pipeline keyed it by, when the new object has text in the text field (an item without text,
    which the pipeline passed on undecided, never takes the decision of another item of its URL).

    Args:
        url_field: the item field holding the page's URL.
        text_field: the item field holding the page's text.
    """

    def __init__(self, url_field: str, text_field: str) -> None:
        self.url_field = url_field
        self.text_field = text_field
        self._by_item: dict[int, Decided] = {}
        #: page key (the URL) -> the identity of the item last parked with it
        self._by_url: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._by_item)

    def park(self, decided: Decided) -> None:
        self._by_item[id(decided.item)] = decided
        self._by_url[decided.key] = id(decided.item)  # the pipeline's key is the item's URL field as text

    def take(self, item: Any) -> Decided | None:
        """The decision parked with ``item``, or with an item of its URL that ``item`` replaced (removed), or
        ``None``: the pipeline did not decide it."""
        decided = self._by_item.pop(id(item), None)
        if decided is None:
            url = self._url_with_text(item)
            parked = self._by_url.get(url) if url is not None else None
            decided = self._by_item.pop(parked, None) if parked is not None else None
            if decided is None:
                return None
        if self._by_url.get(decided.key) == id(decided.item):
            del self._by_url[decided.key]
        return decided

    def _url_with_text(self, item: Any) -> str | None:
        """The URL field of ``item`` as text, when it has one and text in the text field."""
        try:
            adapter = ItemAdapter(item)
        except TypeError:  # not an item Scrapy knows
            return None
        url = adapter.get(self.url_field)
        return str(url) if url not in (None, "") and adapter.get(self.text_field) else None


class SearchIndexPipeline:
    """Writes each item to the search index (see the module doc).

    Args:
        config: the component's settings.
        sink: the writer (opened in :meth:`open_spider`).
        pipeline: the near-duplicate pipeline's settings (the URL field names a page).
        crawler: for stats, signals and the exit status; optional for use outside a crawl.
    """

    def __init__(self, config: SearchIndexSettings, sink: SearchSink, pipeline: NearDupSettings,
                 crawler: Crawler | None = None) -> None:
        self.config = config
        self.sink = sink
        self.url_field = pipeline.url_field
        self.text_field = pipeline.text_field
        self.crawler = crawler
        self.stats: StatsCollector | None = crawler.stats if crawler is not None else None
        self.counts: dict[str, int] = {}
        self.failures = 0
        #: the pipeline's decisions, each with its item, until the item comes by
        self._decided = DecidedItems(self.url_field, self.text_field)
        #: key -> the kept page that named it its canonical URL (from the pipeline's observers' hook)
        self._representatives: dict[str, str] = {}
        self._encoder = ScrapyJSONEncoder(ensure_ascii=False)
        self._failed_file: IO[str] | None = None
        self._opened = False
        self._log_level: str | int = "DEBUG"

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SearchIndexPipeline:
        """``NotConfigured`` without ``NEARDUP_SEARCH_INDEX``; a wrong setting stops the crawl at start (one line)."""
        with component_startup(crawler):
            context = CrawlContext.of(crawler)
            pipeline = context.config
            config = SearchIndexSettings.from_settings(crawler.settings, pipeline)
            sink = _sink_class().from_settings(crawler.settings, pipeline.params.tag if pipeline.enabled else None)
        component = cls(config, sink, pipeline, crawler)
        component._log_level = crawler.settings.get("LOG_LEVEL", "DEBUG")
        context.hooks.decided.append(component)
        context.hooks.observers.append(component)
        crawler.signals.connect(component.item_dropped, signal=signals.item_dropped)
        crawler.signals.connect(component.item_error, signal=signals.item_error)
        crawler.signals.connect(component.spider_idle, signal=signals.spider_idle)
        return component

    async def open_spider(self, spider: Any = None) -> None:
        """Open the sink; a failure (unreachable, an index that cannot take the fields) stops the crawl at start."""
        try:
            await self.sink.open(self)
        except Exception as exc:
            report_startup_failure(exc, log_level=self._log_level)
            raise
        self._opened = True

    async def close_spider(self, spider: Any = None) -> None:
        """Write what waits; say what was written; a crawl with items not written ends with exit status 1."""
        if not self._opened:
            return
        self._opened = False
        try:
            await self.sink.close()
        finally:
            if self._failed_file is not None:
                self._failed_file.close()
            if self._decided:  # a pipeline in between replaced these items with objects of another URL
                self.count("search_unmatched_decisions", len(self._decided))
                logger.warning("Search index %s: %d decisions of the near-duplicate pipeline found neither their item "
                               "nor its URL at the search writer (a pipeline in between replaced the item and its URL "
                               "field); those items were written without their near-duplicate fields",
                               self.config.index, len(self._decided))
            c = self.counts.get
            logger.log(logging.WARNING if self.failures else logging.INFO,
                       "Search index %s: %d documents written, %d removed, %d items not written%s", self.config.index,
                       c("search_indexed", 0), c("search_removed", 0), self.failures,
                       f" (recorded in {self.config.failed_file})" if self.failures else "")
            if self.failures and self.crawler is not None:
                fail_exit_status(self.crawler, f"{self.failures} items could not be written to search index "
                                               f"{self.config.index} (recorded in {self.config.failed_file})")

    def spider_idle(self, spider: Any = None) -> None:
        """A crawl some of whose items could not be written closes with reason :data:`SEARCH_FAILED`."""
        if self.failures:
            raise CloseSpider(SEARCH_FAILED)

    # -- items -------------------------------------------------------------------------------------------------

    def page_decided(self, item: Any, key: str, sketch: Sketch, decision: Decision | None) -> None:
        """The near-duplicate pipeline's hook: remember the item's sketch and decision until it comes by."""
        self._decided.park(Decided(item, key, sketch, decision))

    def page_checked(self, key: str, duplicate_of: str | None, *, representative_of: str | None = None,
                     canonical: str | None = None) -> None:
        """The pipeline's observers' hook: a canonical page met after a copy of it was kept becomes its group's
        representative in the index (the feed cannot take the copy back; the index can)."""
        if representative_of is not None:
            self._representatives[key] = representative_of

    async def process_item(self, item: Any, spider: Any = None) -> Any:
        """Write the item (or, a duplicate with ``"skip"``, remove its key's document); return it unchanged."""
        await self._write(item, self._decided.take(item))
        return item

    async def item_dropped(self, item: Any, response: Any = None, exception: BaseException | None = None,
                           spider: Any = None) -> None:
        """A near-duplicate (or a repeat) dropped by the near-duplicate pipeline is written too, as ``process_item``
        would have; an item another pipeline dropped is not."""
        entry = self._decided.take(item)
        if entry is not None and isinstance(exception, NearDuplicateDropped | RepeatDropped):
            await self._write(item, entry)

    def item_error(self, item: Any, response: Any = None, spider: Any = None, failure: Any = None) -> None:
        self._decided.take(item)

    async def _write(self, item: Any, entry: tuple[Any, str, Sketch, Decision | None] | None) -> None:
        fields = self._fields(item)
        key = entry[1] if entry is not None else self._key(item, fields)
        if fields is None:
            self.count("search_failed")
            self.count("search_failed/not_json")
            self.failed(key, None, "not_json", f"the item's fields cannot be written as JSON: {item!r}"[:2000])
            return
        if entry is None:
            await self.sink.write(SearchPage(key, fields))
            return
        _, key, sketch, decision = entry
        status: SearchStatus = "kept"
        duplicate_of, shared = None, None
        representative_of = self._representatives.pop(key, None)
        if representative_of is not None:
            await self.sink.write(SearchPage(key, fields, sketch, representative_of=representative_of))
            return
        if decision is None:
            status = "unchecked"
        elif decision.outcome == "duplicate" and decision.match is not None:
            if self.config.duplicates == "skip":
                await self.sink.remove(key)  # a page kept by an earlier crawl may have become a duplicate
                return
            status, duplicate_of, shared = "duplicate", decision.match.key, decision.match.shared
        await self.sink.write(SearchPage(key, fields, sketch, status, duplicate_of, shared))

    def _fields(self, item: Any) -> dict[str, Any] | None:
        """The item's fields as JSON values (``None``: they cannot be, e.g. bytes; the item is then recorded)."""
        try:
            fields = json.loads(self._encoder.encode(ItemAdapter(item).asdict()))
        except (TypeError, ValueError):
            return None
        if not isinstance(fields, dict):
            return None
        text = fields.get(self.text_field)
        if isinstance(text, str) and looks_like_html(text):
            fields[self.text_field] = html_to_text(text)  # searchable words, not markup (see the module doc)
        return fields

    def _key(self, item: Any, fields: dict[str, Any] | None) -> str:
        """The key of an item the pipeline did not sketch: its URL, else a hash of its fields."""
        url = ItemAdapter(item).get(self.url_field)
        if url not in (None, ""):
            return str(url)
        text = json.dumps(fields, sort_keys=True, ensure_ascii=False) if fields is not None else repr(item)
        return NO_URL_PREFIX + hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()

    # -- the sink's events ---------------------------------------------------------------------------------------

    def count(self, name: str, value: int = 1) -> None:
        """Add ``value`` to ``neardup/<name>``."""
        self.counts[name] = self.counts.get(name, 0) + value
        if self.stats is not None:
            self.stats.inc_value(f"neardup/{name}", value)

    def failed(self, key: str, page: SearchPage | None, kind: str, reason: str) -> None:
        """Record a page that could not be written: one JSON line in the failed-items file, logged (the first
        at ERROR, later ones at DEBUG)."""
        self.failures += 1
        record: dict[str, Any] = {"key": key, "error": kind, "reason": reason}
        if page is not None:
            record.update(status=page.status, duplicate_of=page.duplicate_of, item=dict(page.fields))
        else:
            record["remove"] = kind != "not_json"
        level = logging.ERROR if self.failures == 1 else logging.DEBUG
        logger.log(level, "could not write %s to search index %s (%s: %s); recorded in %s%s", key, self.config.index,
                   kind, reason, self.config.failed_file,
                   "; the crawl ends with a non-zero exit status (later failures are logged at DEBUG and counted "
                   "in neardup/search_failed)" if self.failures == 1 else "")
        try:
            if self._failed_file is None:
                self.config.failed_file.parent.mkdir(parents=True, exist_ok=True)
                self._failed_file = self.config.failed_file.open("a", encoding="utf-8")
            self._failed_file.write(self._encoder.encode(record) + "\n")
            self._failed_file.flush()
        except OSError as exc:
            logger.error("cannot record %s in %s: %s; its item: %s", key, self.config.failed_file, exc,
                         self._encoder.encode(record))
            with contextlib.suppress(OSError):
                if self._failed_file is not None:
                    self._failed_file.close()
            self._failed_file = None


def require_search_writer(settings: Any) -> None:
    """Refuse ``NEARDUP_SEARCH_INDEX`` without this component in ``ITEM_PIPELINES``: the index would never be
    written, and nothing would say so (the add-on adds the component; a project listing its pipelines by hand must
    list this one too).

    Raises:
        NearDupSettingsError: the one line naming what to add.
    """
    from scrapy.utils.conf import build_component_list  # lazy: only a crawl with the setting pays for it

    if not settings.get("NEARDUP_SEARCH_INDEX"):
        return
    enabled = {load_object(path) if isinstance(path, str) else path
               for path in build_component_list(settings.getwithbase("ITEM_PIPELINES"))}
    if SearchIndexPipeline not in enabled:
        raise NearDupSettingsError(
            f"NEARDUP_SEARCH_INDEX={settings.get('NEARDUP_SEARCH_INDEX')!r} is set but ITEM_PIPELINES has no "
            "scrapy_neardup.SearchIndexPipeline, which writes it: add it (e.g. ITEM_PIPELINES = "
            "{..., 'scrapy_neardup.SearchIndexPipeline': 900}), or enable the add-on (ADDONS = "
            "{'scrapy_neardup.NearDuplicateAddon': 0}), or unset NEARDUP_SEARCH_INDEX"
        )


def _sink_class() -> type[SearchSink]:
    try:
        sink = load_object(SINK)
    except ImportError as exc:
        raise NearDupSettingsError(
            f"NEARDUP_SEARCH_INDEX needs the Elasticsearch client ({exc}): pip install scrapy-neardup (with "
            "elasticsearch), or scrapy-neardup[opensearch] for OpenSearch"
        ) from None
    return cast("type[SearchSink]", sink)


