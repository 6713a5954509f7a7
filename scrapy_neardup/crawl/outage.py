"""While the backend cannot answer: pass, pause or stop (``NEARDUP_ON_BACKEND_DOWN``); and whether the pages that
went unchecked fail the crawl (``NEARDUP_MAX_UNCHECKED``).

Design notes: docs/architecture.md#scrapy_neardupcrawloutage
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from twisted.internet.defer import Deferred

try:
    from scrapy.utils.asyncio import call_later as scrapy_call_later  # Scrapy >= 2.14
except ImportError:  # pragma: no cover - Scrapy 2.13
    scrapy_call_later = None  # type: ignore[assignment]

from .exit_status import fail_exit_status

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from .context import CrawlContext

logger = logging.getLogger(__name__)

#: Close reason when the backend is down and the policy (``"stop"``, or a ``"pause"`` that waited too long) stops
#: the crawl.
BACKEND_DOWN = "neardup_backend_down"
#: Close reason when more pages passed through unchecked than ``NEARDUP_MAX_UNCHECKED`` allows.
UNCHECKED = "neardup_unchecked"


def unchecked_share(unchecked: int, checked: int) -> float:
    """The share of the pages that went to the check which passed through unchecked (0 when none went)."""
    return unchecked / checked if checked > 0 else 0.0


def too_many_unchecked(unchecked: int, checked: int, max_share: float) -> bool:
    """Whether ``unchecked`` of ``checked`` pages is more than ``max_share`` allows (0: any unchecked page is)."""
    return unchecked > 0 and unchecked > max_share * checked


def describe_unchecked(unchecked: int, checked: int) -> str:
    """``264 of 303 checked pages (87.1%)``."""
    return f"{unchecked} of {checked} checked pages ({unchecked_share(unchecked, checked):.1%})"


def close_crawl(crawler: Crawler | None, reason: str, exit_reason: str) -> None:
    """Close the spider with ``reason`` and make the crawl's exit status non-zero (``exit_reason`` is logged at
    the end); nothing when there is no crawl (the pipeline used on its own)."""
    if crawler is None:
        return
    fail_exit_status(crawler, exit_reason)
    try:
        engine = crawler.engine
    except RuntimeError:  # not crawling
        return
    if engine is None or getattr(engine, "spider", None) is None:
        return
    deferred_from_coro(engine.close_spider_async(reason=reason))
    # close_spider_async marks the spider closing before its first await: unpausing now lets nothing more out.
    engine.unpause()


def call_later(delay: float, func: Callable[[], Any]) -> Any:
    """Run ``func`` in ``delay`` seconds on the running loop or reactor; the result has ``cancel()``."""
    if scrapy_call_later is None:  # pragma: no cover - Scrapy 2.13
        # lazy: importing the reactor installs Twisted's default one; Scrapy installs the configured one first
        from twisted.internet import reactor

        return cast(Any, reactor).callLater(delay, func)
    return scrapy_call_later(delay, func)


class BackendOutage:
    """Applies ``NEARDUP_ON_BACKEND_DOWN`` for one crawl (see the module doc).

    The pipeline calls :meth:`retry_after_failure` each time a page's check raised ``BackendError`` (the answer:
    try the check again now, or pass the item through unchecked), and :meth:`answered` after each check that
    succeeded.

    Args:
        context: the crawl's context: its outage settings, its counters, the running crawl (paused, resumed,
            closed; none outside one).
        clock: seconds, monotonic (tests pass their own).
    """

    def __init__(self, context: CrawlContext, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = context.config.outage
        self.crawler = context.crawler
        self._inc = context.count
        self._clock = clock
        #: when the outage under way began (``clock()``), ``None`` while the backend answers
        self.down_since: float | None = None
        #: outages that paused the crawl, and the seconds they lasted (an outage under way is not counted yet)
        self.pauses = 0
        self.paused_seconds = 0.0
        #: the crawl is being stopped because of the backend: every later failure passes through at once
        self.stopping = False
        self._paused_engine = False
        self._wake: Deferred[None] | None = None
        self._timer: Any = None

    @property
    def policy(self) -> str:
        return self.settings.on_backend_down

    async def retry_after_failure(self, key: str) -> bool:
        """A check of ``key`` raised ``BackendError``: ``True`` when it is to be tried again now (``"pause"``,
        after a wait), ``False`` when the item passes through unchecked."""
        if self.policy == "pass":
            return False
        if self.policy == "stop" or self.stopping:
            self._stop("NEARDUP_ON_BACKEND_DOWN='stop'")
            return False
        if self._crawl_closing():
            return False
        now = self._clock()
        if self.down_since is None:
            self._begin(now, key)
        assert self.down_since is not None
        left = self.settings.max_wait - (now - self.down_since)
        if left <= 0:
            self._stop(f"it did not answer for {now - self.down_since:.0f} s "
                       f"(NEARDUP_BACKEND_DOWN_MAX_WAIT={self.settings.max_wait:g})")
            return False
        await self._next_try(min(self.settings.retry_interval, left))
        return not self.stopping and not self._crawl_closing()

    def answered(self) -> None:
        """A check succeeded: an outage under way ends, the crawl resumes, the pages waiting are tried now."""
        if self.down_since is None:
            return
        lasted = self._clock() - self.down_since
        self.down_since = None
        self.pauses += 1
        self.paused_seconds += lasted
        self._inc("backend_pauses", 1)
        logger.warning("near-duplicate backend answers again after %.1f s: the crawl resumes", lasted)
        self._resume()
        self._fire()

    def close(self) -> None:
        """The spider closes: an outage under way ends (counted), nothing waits any longer."""
        if self.down_since is not None:
            self.paused_seconds += self._clock() - self.down_since
            self.pauses += 1
            self._inc("backend_pauses", 1)
            self.down_since = None
        self.stopping = True
        self._resume()
        self._fire()

    # -- internals --------------------------------------------------------------------------------------------

    def _begin(self, now: float, key: str) -> None:
        self.down_since = now
        logger.warning(
            "near-duplicate backend failed while checking %s: pausing the crawl and trying again every %g s, "
            "for %g s at most (NEARDUP_ON_BACKEND_DOWN='pause')", key, self.settings.retry_interval,
            self.settings.max_wait,
        )
        engine = self._engine()
        if engine is not None and not engine.paused:
            engine.pause()
            self._paused_engine = True

    def _stop(self, why: str) -> None:
        """Close the spider (once): the backend is down and the policy does not wait (any longer)."""
        if self.stopping:
            return
        self.stopping = True
        message = f"near-duplicate backend is down: {why}; stopping the crawl (close reason {BACKEND_DOWN})"
        logger.error("%s; the items in flight pass through unchecked", message)
        if self.down_since is not None:
            self.paused_seconds += self._clock() - self.down_since
            self.pauses += 1
            self._inc("backend_pauses", 1)
            self.down_since = None
        self._paused_engine = False  # close_crawl unpauses it once the spider is closing
        close_crawl(self.crawler, BACKEND_DOWN, message)
        self._fire()

    async def _next_try(self, delay: float) -> None:
        """Wait until the next try (shared by every page waiting: they try together, one batch) or until a check
        succeeds or the crawl stops, whichever comes first."""
        if self._wake is None:
            self._wake = Deferred()
            self._timer = call_later(delay, self._time_to_try)
        await maybe_deferred_to_future(self._wake)

    def _time_to_try(self) -> None:
        self._timer = None  # called: nothing to cancel
        self._fire()

    def _fire(self) -> None:
        wake, self._wake = self._wake, None
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        if wake is not None and not wake.called:
            wake.callback(None)

    def _resume(self) -> None:
        if not self._paused_engine:
            return
        self._paused_engine = False
        engine = self._engine()
        if engine is None:
            return
        engine.unpause()
        # Wake the engine now rather than at its next heartbeat (up to 5 s away).
        slot = getattr(engine, "_slot", None)
        nextcall = getattr(slot, "nextcall", None)
        if nextcall is not None:
            nextcall.schedule()

    def _crawl_closing(self) -> bool:
        """The crawl is closing for another reason (Ctrl-C, a ``CLOSESPIDER_*`` limit): waiting pages must not
        hold it up (its close waits for them); they pass through unchecked, and the crawl resumes nothing."""
        engine = self._engine()
        if engine is None:
            return False
        slot = getattr(engine, "_slot", None)  # Scrapy sets slot.closing when close_spider begins
        if engine.running and getattr(slot, "closing", None) is None:
            return False
        if not self.stopping:
            self.stopping = True
            logger.warning("the crawl is closing while the near-duplicate backend is down: the pages waiting for "
                           "it pass through unchecked")
            self._resume()
            self._fire()
        return True

    def _engine(self) -> Any:
        if self.crawler is None:
            return None
        try:
            return self.crawler.engine
        except RuntimeError:
            return None


