"""Room in Scrapy's scraper for the pages the pipeline makes wait, and for them only.

Scrapy stops downloading while the responses in processing come to more than ``SCRAPER_SLOT_MAX_ACTIVE_SIZE``
bytes (5 MB by default). A page waiting in the pipeline (for its host's template,
:mod:`scrapy_neardup.crawl.template_wait`, or for an earlier host's copy, :mod:`scrapy_neardup.crawl.order`)
keeps its response counted there. Rather than
raising the setting for every crawl (which lets Scrapy keep that much more in memory whether pages wait or not),
the pipeline raises the scraper's bound by the size of each waiting page while it waits, and lowers it again when
the page goes on: a crawl whose pages never wait runs with Scrapy's own bound, and the memory that waiting costs is
that of the pages waiting (each kind of wait has a cap of its own).
"""

from __future__ import annotations

from typing import Any


class ScraperRoom:
    """Grows and shrinks the running crawl's scraper bound (``Scraper.slot.max_active_size``).

    Args:
        crawler: the Scrapy crawler, or ``None`` outside a crawl (then nothing changes).
    """

    def __init__(self, crawler: Any) -> None:
        self.crawler = crawler
        self.added = 0

    def grow(self, size: int) -> None:
        """Room for ``size`` more bytes of waiting responses (a negative ``size`` gives it back)."""
        slot = self._slot()
        if slot is not None:
            slot.max_active_size += size
            self.added += size

    def shrink(self, size: int) -> None:
        """Give back the room :meth:`grow` made for ``size`` bytes."""
        self.grow(-size)

    def _slot(self) -> Any:
        try:
            engine = self.crawler.engine if self.crawler is not None else None
        except RuntimeError:
            return None
        scraper = getattr(engine, "scraper", None)
        return getattr(scraper, "slot", None)


