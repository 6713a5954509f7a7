"""The small hook through which the pipeline and the host middlewares of one crawl talk.

The pipeline asks whether a page was found to be a soft 404 (:mod:`scrapy_neardup.crawl.soft404` fills that in
before the response reaches the spider) and reports each checked page, kept or naming the kept page it
duplicates (:mod:`scrapy_neardup.crawl.mirrors` counts them per host pair). It also hands each decided item
with its sketch and decision to the search-index writer (:mod:`scrapy_neardup.crawl.search_index`), so that the
page is written with the sketch the pipeline made, never sketched twice. One :class:`CrawlHooks` per crawler;
a component that is not enabled simply never registers, and the hook then answers "nothing to do".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol
from weakref import WeakKeyDictionary

if TYPE_CHECKING:
    from ..core.match import Decision
    from ..core.sketch import Sketch
    from ..core.soft404 import Soft404Match


class CheckedObserver(Protocol):
    def page_checked(self, key: str, duplicate_of: str | None) -> None: ...


class DecidedObserver(Protocol):
    def page_decided(self, item: Any, key: str, sketch: Sketch, decision: Decision | None) -> None: ...


class CrawlHooks:
    """Per-crawler meeting point of the pipeline and the host middlewares."""

    def __init__(self) -> None:
        #: page URL -> the template it near-duplicates, for pages found to be soft 404s.
        self.soft404_pages: dict[str, Soft404Match] = {}
        self.observers: list[CheckedObserver] = []
        self.decided: list[DecidedObserver] = []

    def soft404(self, url: str) -> Soft404Match | None:
        """The soft-404 template that the page at ``url`` near-duplicates, if any."""
        return self.soft404_pages.get(url) if self.soft404_pages else None

    def page_checked(self, key: str, duplicate_of: str | None) -> None:
        """The pipeline checked page ``key``: kept (``None``) or a near-duplicate of ``duplicate_of``."""
        for observer in self.observers:
            observer.page_checked(key, duplicate_of)


    def page_decided(self, item: Any, key: str, sketch: Sketch, decision: Decision | None) -> None:
        """The pipeline sketched ``item`` (page ``key``) and the backend decided it (``None``: it could not, the
        item passes through unchecked); called before the item leaves the pipeline or is dropped."""
        for observer in self.decided:
            observer.page_decided(item, key, sketch, decision)


_HOOKS: WeakKeyDictionary[Any, CrawlHooks] = WeakKeyDictionary()


def crawl_hooks(crawler: Any) -> CrawlHooks:
    """The :class:`CrawlHooks` of ``crawler`` (made on first use)."""
    hooks = _HOOKS.get(crawler)
    if hooks is None:
        hooks = _HOOKS[crawler] = CrawlHooks()
    return hooks


__all__ = ["CheckedObserver", "CrawlHooks", "DecidedObserver", "crawl_hooks"]
