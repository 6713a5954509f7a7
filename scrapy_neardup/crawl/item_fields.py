"""The checks of the item fields the pipeline reads and writes: a mark field the item class cannot hold
(``NEARDUP_ACTION = "mark"``), a text field that no item has, a CSV feed that would write the mark as a Python
repr. Each misconfiguration is said once, and the crawl stops where going on would lose or corrupt output.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter

from ..errors import MarkFieldError
from .outage import close_crawl

if TYPE_CHECKING:
    from .context import CrawlContext

logger = logging.getLogger(__name__)

#: Spider close reason when NEARDUP_ACTION='mark' meets an item class without the mark field.
MARK_FIELD_MISSING = "neardup_mark_field_missing"
#: Items looked at before warning that none of them has NEARDUP_TEXT_FIELD.
TEXT_FIELD_PROBE = 20


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


class ItemFieldChecks:
    """The pipeline's checks of its items' fields (module doc).

    Args:
        context: the crawl's context: its settings (text, mark and URL fields, action), its counters, the crawl to
            stop on a missing mark field (none outside a crawl).
    """

    def __init__(self, context: CrawlContext) -> None:
        self.config = context.config
        self.crawler = context.crawler
        self._count = context.count
        self._mark_checked: dict[type, bool] = {}  # item class -> can it hold the mark field?
        self._stopping = False
        self.probed = 0  # items looked at for NEARDUP_TEXT_FIELD, until one has it
        self._probe_fields: set[str] = set()  # the fields those items have
        self._text_field_seen = False
        self._text_field_warned = False

    # -- mark mode -------------------------------------------------------------------------------------------

    def can_mark(self, item: Any, adapter: ItemAdapter) -> bool:
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
                check_mark_field(cls, self.config.mark_field)
            except MarkFieldError as exc:
                self._stop_crawl(str(exc))
                can = False
            else:
                can = True
            self._mark_checked[cls] = can
        if not can:
            self._count("mark_field_missing", 1)
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
        field = self.config.mark_field
        close_crawl(self.crawler, MARK_FIELD_MISSING,
                    f"NEARDUP_MARK_FIELD={field!r} is missing from an item class (see above)")

    def check_csv_feeds(self) -> None:
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

    # -- a text field that no item has -----------------------------------------------------------------------

    def probe_text_field(self, adapter: ItemAdapter) -> None:
        """Warn once when the first :data:`TEXT_FIELD_PROBE` items all lack ``NEARDUP_TEXT_FIELD`` (a wrong
        setting turns the pipeline into a no-op otherwise), naming the fields they do have."""
        if self._text_field_seen:
            return
        if adapter.get(self.config.text_field) is not None:
            self._text_field_seen = True
            return
        self.probed += 1
        self._probe_fields.update(name for name in adapter if adapter.get(name) is not None)
        if self.probed == TEXT_FIELD_PROBE and not self._text_field_warned:
            self._text_field_warned = True
            logger.warning("%s", self.text_field_missing(f"the first {TEXT_FIELD_PROBE} items"))

    def text_field_missing(self, which: str) -> str:
        fields = ", ".join(sorted(self._probe_fields)) or "none"
        return (f"NEARDUP_TEXT_FIELD={self.config.text_field!r} is missing from {which}, which have fields: "
                f"{fields}; nothing is being checked")

    def no_text_field(self) -> bool:
        """No item so far had the text field (and at least one item came)."""
        return self.probed > 0 and not self._text_field_seen


