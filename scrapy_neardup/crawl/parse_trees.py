"""A spider middleware that frees each response's parsed tree once the spider is done with the response.

Design notes: docs/architecture.md#scrapy_neardupcrawlparse_trees
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from scrapy.exceptions import NotConfigured

from ..store.config import read_setting

#: TextResponse's cache of ``response.selector`` (the parsed tree); Scrapy builds it again on the next use.
_CACHE = "_cached_selector"


class ParseTreeRelease:
    """Spider middleware: when a callback's output has been read to its end, drops the response's cached parse tree.

    The response itself stays with Scrapy's scraper until its items leave the item pipelines; items waiting for
    their near-duplicate check keep it there longer than a crawl without the check would. Its tree (lxml's, several
    times the page's size) is needed only by the spider: once the callback's output is consumed, the waiting
    response holds its bytes and text only. A later ``response.selector`` (an ``item_scraped`` handler's, say)
    parses the page again. Enabled by the add-on unless ``NEARDUP_FREE_PARSE_TREES`` is ``False``.

    Args:
        stats: the crawl's stats (``neardup/parse_trees_freed`` counts the trees freed), or ``None``.
    """

    def __init__(self, stats: Any = None) -> None:
        self.stats = stats

    @classmethod
    def from_crawler(cls, crawler: Any) -> ParseTreeRelease:
        if not (read_setting(crawler.settings, "NEARDUP_ENABLED")
                and read_setting(crawler.settings, "NEARDUP_FREE_PARSE_TREES")):
            raise NotConfigured("NEARDUP_ENABLED or NEARDUP_FREE_PARSE_TREES is False")
        return cls(crawler.stats)

    def process_spider_output(self, response: Any, result: Iterable[Any], spider: Any = None) -> Iterator[Any]:
        try:
            yield from result
        finally:
            self.free(response)

    async def process_spider_output_async(self, response: Any, result: AsyncIterator[Any],
                                          spider: Any = None) -> AsyncIterator[Any]:
        try:
            async for each in result:
                yield each
        finally:
            self.free(response)

    def free(self, response: Any) -> None:
        """Drop ``response``'s cached parse tree, if it has one."""
        if getattr(response, _CACHE, None) is not None:
            setattr(response, _CACHE, None)
            if self.stats is not None:
                self.stats.inc_value("neardup/parse_trees_freed")
