"""Which copy is kept when two hosts serve the same pages: the one on the host met first.

Design notes: docs/architecture.md#scrapy_neardupcrawlorder
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import signals
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred

from ..core.mirror_table import host_of
from .outage import call_later
from .scraper_room import ScraperRoom

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from .context import CrawlContext

logger = logging.getLogger(__name__)

#: Seconds a page waits at most for a pending page of an earlier host with its path.
MAX_EXTRA_WAIT = 30.0
#: Checked pages without a twin on any host after which a host is settled (its pages no longer wait).
FEW_PAGES = 3
#: Seconds an answered request stays pending: its item reaches the pipeline once the spider parsed it.
PARSE_GRACE = 1.0


class KeepOrder:
    """Makes pages of hosts that may copy an earlier host wait for the earlier host's copies (module doc).

    Feed it Scrapy's ``request_scheduled`` and ``response_received`` signals, the mirror middleware's withdrawn
    requests, and, from the pipeline, :meth:`enter` / :meth:`leave` around each item and :meth:`checked` after
    each decision.

    Args:
        context: the crawl's context: its hooks (host ranks, and the mirror middleware's judgement when it is
            enabled), its counters, ``NEARDUP_COPY_WAIT`` (seconds; 0 switches the waiting off) and
            ``NEARDUP_MIRROR_MIN_PAGES`` (checked pages after which a host no judge speaks for is settled).
        room: characters of content that may wait at once; ``None``: no bound.
        grow: called with ``+size`` when a page of ``size`` characters begins to wait and ``-size`` when it goes
            on (the scraper's room, so that waiting pages never stop the downloads of the pages they wait for).
    """

    def __init__(self, context: CrawlContext, room: int | None = None, grow: Callable[[int], None] | None = None,
                 ) -> None:
        self.context = context
        self.hooks = context.hooks
        self.wait = context.hosts.copy_wait
        self.min_pages = context.hosts.mirror_min_pages
        self.room = room
        self.grow = grow
        self._count = context.count
        self._waiting_size = 0
        self._full_logged = False
        self._checked: dict[str, int] = {}  # host -> pages checked
        # hash of a path and query -> rank -> pages pending there (requests not answered, items not decided)
        self._pending: dict[int, dict[int, int]] = {}
        self._first_checked: dict[int, int] = {}  # hash of a path and query -> best rank of a host that checked it
        self._waiters: dict[int, list[Deferred[None]]] = {}  # hash of a path and query -> pages waiting on it

    def follow(self, crawler: Crawler, room: int) -> None:
        """Follow ``crawler``'s requests (what is pending where), and let at most ``room`` characters of pages
        wait at once, the scraper's room grown by them while they wait."""
        self.room, self.grow = room, ScraperRoom(crawler).grow
        self.context.on_scheduled(self.request_scheduled)
        self.hooks.withdrawn.append(self.request_withdrawn)
        # No request_dropped handler: Scrapy sends that signal for every link refused as a duplicate (most of the
        # links a CrawlSpider yields), and a request seen before is not counted again (request_scheduled).
        crawler.signals.connect(self.response_received, signal=signals.response_received)

    # -- what is pending where ---------------------------------------------------------------------------------

    def request_scheduled(self, request: Any, first: bool) -> None:
        """A request was scheduled: its page is pending (a redirect's target takes over from its source), unless
        a request of the same fingerprint was scheduled before (not ``first``). The scheduler's duplicate filter
        refuses that one, and a retry (``dont_filter``) is of a page still pending or answered: either way it
        brings no page that is not counted already."""
        if self.wait <= 0:
            return
        for source in request.meta.get("redirect_urls", [])[-1:]:
            self._add(source, -1)
        if first:
            self._add(request.url, 1)  # (the hooks met its host first)

    def request_withdrawn(self, request: Any) -> None:
        """The mirror middleware withdrew a scheduled request (a mirror's page): it brings no page."""
        if self.wait > 0:
            self._add(request.url, -1)

    def response_received(self, response: Any, request: Any, spider: Any = None) -> None:
        """A request was answered: its page, if any, comes as an item (:meth:`enter`) once the spider parsed it;
        the request stays pending :data:`PARSE_GRACE` seconds more, so that nothing waiting on it goes on in
        between (a page without item is then no longer waited for)."""
        if self.wait > 0 and _where(request.url) is not None:
            url = request.url
            call_later(PARSE_GRACE, lambda: self._add(url, -1))

    def enter(self, url: Any) -> str | None:
        """Page ``url`` entered the pipeline; pass what this returns to :meth:`leave` when it is decided."""
        if self.wait <= 0 or not isinstance(url, str):
            return None
        return url if self._add(url, 1) else None

    def leave(self, entered: str | None) -> None:
        """The page :meth:`enter` returned ``entered`` for is decided (or left the pipeline otherwise)."""
        if entered is not None:
            self._add(entered, -1)

    def _add(self, url: str, change: int) -> bool:
        where = _where(url)
        rank = self.hooks.rank(where[1]) if where is not None else None
        if where is None or rank is None or self.wait <= 0:
            return False
        path = hash(where[0])
        ranks = self._pending.setdefault(path, {})
        count = ranks.get(rank, 0) + change
        if count > 0:
            ranks[rank] = count
        else:
            ranks.pop(rank, None)
            if not ranks:
                del self._pending[path]
            self._wake(path)
        return True

    def checked(self, key: str) -> None:
        """Page ``key`` was checked (kept or found a duplicate): pages of later hosts with its path go on."""
        where = _where(key)
        if where is None:
            return
        self._checked[where[1]] = self._checked.get(where[1], 0) + 1
        rank = self.hooks.rank(where[1])
        if rank is None or self.wait <= 0:
            return
        path = hash(where[0])
        known = self._first_checked.get(path)
        if known is None or rank < known:
            self._first_checked[path] = rank
        self._wake(path)

    def _wake(self, path: int) -> None:
        for waiter in self._waiters.pop(path, ()):
            if not waiter.called:
                waiter.callback(None)

    # -- waiting ---------------------------------------------------------------------------------------------

    def must_wait(self, key: str) -> bool:
        """Whether page ``key`` waits before its check: its host was met after another and is not settled."""
        if self.wait <= 0:
            return False
        host = host_of(key)
        rank = self.hooks.rank(host) if host is not None else None
        if host is None or rank is None or rank == 0:
            return False
        settled = self.hooks.settled(host)
        if settled is None:  # no mirror middleware: the host's first pages
            settled = self._checked.get(host, 0) >= self.min_pages
        return not settled

    async def wait_turn(self, key: str, size: int = 0) -> None:
        """Wait as the module doc says when page ``key`` (``size``: the length of its content) :meth:`must_wait`;
        return at once otherwise."""
        if not self.must_wait(key):
            return
        if self.room is not None and self._waiting_size + size > self.room:
            self._count("copy_waits_full", 1)
            if not self._full_logged:
                self._full_logged = True
                logger.info("pages waiting for an earlier host's copies fill their room; "
                            "more pages are checked without waiting (counted in neardup/copy_waits_full)")
            return
        self._waiting_size += size
        if self.grow is not None:
            self.grow(size)
        try:
            await self._wait_turn(key)
        finally:
            self._waiting_size -= size
            if self.grow is not None:
                self.grow(-size)

    async def _wait_turn(self, key: str) -> None:
        where = _where(key)
        assert where is not None
        path = hash(where[0])
        rank = self.hooks.rank(where[1])
        assert rank is not None
        started = time.monotonic()
        counted = False
        while self._first_checked.get(path, rank) >= rank:
            pending = any(other < rank for other in self._pending.get(path, ()))
            left = (MAX_EXTRA_WAIT if pending else self.wait) - (time.monotonic() - started)
            if left <= 0:
                return
            if not counted:
                counted = True
                self._count("copy_waits", 1)
            waiter: Deferred[None] = Deferred()
            self._waiters.setdefault(path, []).append(waiter)
            await _first_of(waiter, left)
            waiters = self._waiters.get(path)
            if waiters is not None and waiter in waiters:  # timed out
                waiters.remove(waiter)
                if not waiters:
                    del self._waiters[path]


def _where(url: str) -> tuple[str, str] | None:
    """``(path and query, host)`` of ``url`` (cached without the fragment, as :func:`host_of` is)."""
    return _where_cached(url.partition("#")[0])


@functools.lru_cache(maxsize=4096)
def _where_cached(url: str) -> tuple[str, str] | None:
    host = host_of(url)
    if host is None:
        return None
    parts = urlsplit(url)
    return (f"{parts.path or '/'}?{parts.query}", host)


async def _first_of(done: Deferred[None], timeout: float) -> None:
    """Until ``done`` fires, ``timeout`` seconds at most."""
    timed_out = [False]

    def time_out() -> None:
        timed_out[0] = True
        if not done.called:
            done.callback(None)

    timer = call_later(timeout, time_out)
    await maybe_deferred_to_future(done)
    if not timed_out[0]:
        timer.cancel()


