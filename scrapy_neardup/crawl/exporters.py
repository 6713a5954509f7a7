"""Feed exports of mark mode: the mark as JSON text in a CSV cell.

Design notes: docs/architecture.md#scrapy_neardupcrawlexporters
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from scrapy.exporters import CsvItemExporter as ScrapyCsvItemExporter

from ..store.config import read_field_name

if TYPE_CHECKING:
    from typing import IO, Self

    from scrapy.crawler import Crawler

#: What ``FEED_EXPORTERS["csv"]`` names to get the mark as JSON text (the add-on sets it).
CSV_EXPORTER = "scrapy_neardup.CsvItemExporter"


class CsvItemExporter(ScrapyCsvItemExporter):
    """Scrapy's ``CsvItemExporter``, with the mark field written as JSON text (see the module doc).

    Args:
        file: as Scrapy's.
        mark_field: the field written as JSON (``from_crawler`` takes ``NEARDUP_MARK_FIELD``).
        kwargs: as Scrapy's (``include_headers_line``, ``join_multivalued``, ``fields_to_export``, ...).
    """

    def __init__(self, file: Any, *, mark_field: str = "neardup", **kwargs: Any) -> None:
        super().__init__(file, **kwargs)
        self.mark_field = mark_field

    @classmethod
    def from_crawler(cls, crawler: Crawler, file: IO[bytes], *args: Any, **kwargs: Any) -> Self:
        kwargs.setdefault("mark_field", read_field_name(crawler.settings, "NEARDUP_MARK_FIELD", "neardup"))
        return cls(file, *args, **kwargs)

    def serialize_field(self, field: Any, name: str, value: Any) -> Any:
        if name == self.mark_field and "serializer" not in field and isinstance(value, Mapping):
            return json.dumps(dict(value), ensure_ascii=False, default=str)
        return super().serialize_field(field, name, value)


