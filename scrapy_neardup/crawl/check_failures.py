"""What the pipeline does with a page its backend could not check: say it once, count it, ask the outage policy
(:mod:`scrapy_neardup.crawl.outage`) whether to try again, and otherwise pass the item through marked unchecked
(never dropped: without an answer from the store no kept page can be named)."""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from itemadapter import ItemAdapter

    from .context import CrawlContext
    from .outage import BackendOutage

logger = logging.getLogger(__name__)


class CheckFailures:
    """The pipeline's side of backend outages.

    Args:
        context: the crawl's context: its settings (``NEARDUP_ON_BACKEND_DOWN``, the mark field) and counters.
        outage: the outage policy of the crawl.
    """

    def __init__(self, context: CrawlContext, outage: BackendOutage) -> None:
        self.config = context.config
        self.outage = outage
        self._count = context.count
        self._logged = False

    async def retry_after_failure(self, key: str, failures: int) -> bool:
        """The backend could not answer for ``key`` (its ``failures``-th try): count the page once in
        ``neardup/backend_errors``, then ask the outage policy whether to try again (after a wait)."""
        if failures == 1:
            self._failed(key)
        else:
            logger.debug("near-duplicate backend failed again while checking %s (try %d)", key, failures,
                         exc_info=True)
        return await self.outage.retry_after_failure(key)

    def _failed(self, key: str) -> None:
        self._count("backend_errors", 1)
        if self._logged:
            logger.debug("near-duplicate backend failed while checking %s", key, exc_info=True)
            return
        self._logged = True
        on_down = self.config.outage.on_backend_down
        what = {"pass": "the item passes through unchecked", "pause": "the crawl pauses until it answers",
                "stop": "the crawl stops"}[on_down]
        logger.error(
            "near-duplicate backend failed while checking %s; %s (NEARDUP_ON_BACKEND_DOWN=%r; later "
            "failures are logged at DEBUG and counted in neardup/backend_errors)", key, what, on_down, exc_info=True,
        )

    def unchecked(self, item: Any, adapter: ItemAdapter) -> Any:
        """Mark an item the backend could not check: ``{NEARDUP_MARK_FIELD: {"unchecked": True}}`` when the
        item can hold the field (counted in ``neardup/unchecked``); the item passes through either way.

        The Elasticsearch backend remembers the page and writes it to its index with status ``unchecked`` once
        the node answers again (at the latest when the spider closes), so ``neardup es groups`` covers it.
        """
        self._count("unchecked", 1)
        # An Item/dataclass that does not declare the field raises KeyError: it passes through unmarked.
        with contextlib.suppress(KeyError, TypeError, AttributeError):
            adapter[self.config.mark_field] = {"unchecked": True}
        return item


