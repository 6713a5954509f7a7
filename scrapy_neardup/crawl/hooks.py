"""The small hook through which the pipeline and the host middlewares of one crawl talk.

Design notes: docs/architecture.md#scrapy_neardupcrawlhooks
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..core.mirror_table import host_of

if TYPE_CHECKING:
    from ..core.match import Decision
    from ..core.sketch import Sketch
    from ..core.soft404_templates import Soft404Match

#: Canonical URLs remembered at most for responses whose items have not reached the pipeline yet.
MAX_CANONICAL_LINKS = 10_000


class CheckedObserver(Protocol):
    def page_checked(self, key: str, duplicate_of: str | None, *, representative_of: str | None = None,
                     canonical: str | None = None) -> None:
        """Page ``key`` was checked: kept (``duplicate_of=None``) or a duplicate of the kept page
        ``duplicate_of``; ``representative_of``: the kept page of which this page is the canonical copy (see
        :meth:`CrawlHooks.page_checked`); ``canonical``: the canonical URL the page named, when not itself."""


class CopyJudge(Protocol):
    def settled(self, host: str) -> bool:
        """Whether ``host`` is known not to copy a host met before it (its pages need not wait for theirs)."""


class DecidedObserver(Protocol):
    def page_decided(self, item: Any, key: str, sketch: Sketch, decision: Decision | None) -> None: ...


class CrawlHooks:
    """Per-crawler meeting point of the pipeline and the host middlewares (one in each
    :class:`~scrapy_neardup.crawl.context.CrawlContext`)."""

    def __init__(self) -> None:
        #: page URL -> the template it near-duplicates, for pages found to be soft 404s.
        self.soft404_pages: dict[str, Soft404Match] = {}
        self.observers: list[CheckedObserver] = []
        self.decided: list[DecidedObserver] = []
        #: who tells whether a host may still copy an earlier one (the mirror middleware, when enabled).
        self.copy_judges: list[CopyJudge] = []
        #: the mirror hosts found (:class:`~scrapy_neardup.core.mirror_table.MirrorDecision`), for the crawl report.
        self.mirror_decisions: list[Any] = []
        #: whether a middleware reads canonical links from responses (else the pipeline reads its text field).
        self.reads_canonical_links = False
        #: called with ``(request, first)`` for each request scheduled with a fingerprint not seen before
        #: (``first``), and for a request seen before that carries one of :attr:`news_keys` in its meta; in the
        #: order they were added (the mirror middleware first: it may raise ``IgnoreRequest``, which ignores the
        #: request and skips the rest). One signal handler for all of them: Scrapy's dispatch costs more per
        #: handler than these do, on every link a spider schedules, and most links are of pages seen before.
        self.scheduled: list[Callable[[Any, bool], None]] = []
        #: meta keys that make a request seen before news to the observers: a redirect (its source is no longer a
        #: page to come), a mirror's request handed back to be refused.
        self.news_keys: list[str] = ["redirect_urls"]
        # The fingerprints of the requests scheduled: in a crawl the duplicate filter's own objects (Scrapy's
        # fingerprinter computes them once per request and caches them), so that the set costs its slots only.
        self._fingerprint: Callable[[Any], object] = operator.attrgetter("url")
        self._scheduled_before: set[object] = set()
        #: called with each request that was scheduled and will not be downloaded after all (the mirror middleware
        #: hands a mirror's request back to be refused): no page comes of it.
        self.withdrawn: list[Callable[[Any], None]] = []
        self._canonical_links: OrderedDict[str, str] = OrderedDict()
        self._ranks: dict[str, int] = {}

    # -- soft 404s and canonical links, from the responses ---------------------------------------------------

    def soft404(self, url: str) -> Soft404Match | None:
        """The soft-404 template that the page at ``url`` near-duplicates, if any."""
        return self.soft404_pages.get(url) if self.soft404_pages else None

    def add_canonical_link(self, url: str, canonical: str) -> None:
        """The response of ``url`` names ``canonical`` (normalized, not ``url`` itself) its canonical URL. The
        oldest entries are forgotten beyond :data:`MAX_CANONICAL_LINKS` (responses that never became items)."""
        links = self._canonical_links
        links[url] = canonical
        links.move_to_end(url)
        while len(links) > MAX_CANONICAL_LINKS:
            links.popitem(last=False)

    def canonical_link(self, url: str) -> str | None:
        """The canonical URL the response of ``url`` named, if another one."""
        return self._canonical_links.get(url) if self._canonical_links else None

    # -- checked pages ---------------------------------------------------------------------------------------

    def page_checked(self, key: str, duplicate_of: str | None, *, representative_of: str | None = None,
                     canonical: str | None = None) -> None:
        """The pipeline checked page ``key``: kept (``None``) or a duplicate of the kept page ``duplicate_of``.

        ``representative_of`` names a kept page that named ``key`` its canonical URL: the feed holds that earlier
        page (an emitted item cannot be taken back) while this page, dropped naming it or kept, is the one a
        search index should show for their content. ``canonical``: the canonical URL ``key`` named, when not
        itself (the key stays the page's URL).
        """
        for observer in self.observers:
            observer.page_checked(key, duplicate_of, representative_of=representative_of, canonical=canonical)

    # -- the order hosts were met in -------------------------------------------------------------------------

    def meet(self, host: str) -> None:
        """``host``'s first request was scheduled (ranks follow the order of these calls)."""
        if host not in self._ranks:
            self._ranks[host] = len(self._ranks)

    def fingerprint_with(self, fingerprint: Callable[[Any], object]) -> None:
        """Tell scheduled requests apart by ``fingerprint`` (the crawl's request fingerprinter; else by URL)."""
        self._fingerprint = fingerprint

    def request_scheduled(self, request: Any, spider: Any = None) -> None:
        """Scrapy's ``request_scheduled`` signal: hosts are met in the order of their first requests (start
        requests in the spider's order, then every other). A request of a fingerprint scheduled before (the
        scheduler refuses it, or it is a retry of a page already counted) reaches the observers only with one of
        :attr:`news_keys` in its meta."""
        fingerprint = self._fingerprint(request)
        first = fingerprint not in self._scheduled_before
        if first:
            self._scheduled_before.add(fingerprint)
            host = host_of(request.url)
            if host is not None:
                self.meet(host)
        else:
            meta = request.meta
            for key in self.news_keys:
                if key in meta:
                    break
            else:
                return
        for observer in self.scheduled:
            observer(request, first)

    def rank(self, host: str) -> int | None:
        """0 for the host met first, 1 for the next...; ``None`` for a host no request was scheduled for."""
        return self._ranks.get(host)

    def settled(self, host: str) -> bool | None:
        """Whether a judge (the mirror middleware) knows ``host`` does not copy an earlier host; ``None``
        without a judge."""
        if not self.copy_judges:
            return None
        return all(judge.settled(host) for judge in self.copy_judges)

    def page_decided(self, item: Any, key: str, sketch: Sketch, decision: Decision | None) -> None:
        """The pipeline sketched ``item`` (page ``key``) and the backend decided it (``None``: it could not, the
        item passes through unchecked); called before the item leaves the pipeline or is dropped."""
        for observer in self.decided:
            observer.page_decided(item, key, sketch, decision)

