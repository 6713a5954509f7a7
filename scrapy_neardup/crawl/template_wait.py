"""Host templates in a crawl: the first pages of each host wait until the host's template is learned.

Design notes: docs/architecture.md#scrapy_neardupcrawltemplate_wait
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy.utils.defer import deferred_from_coro
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import LoopingCall

from ..core.host_template import learn_template
from ..errors import BackendError

if TYPE_CHECKING:
    import numpy as np
    from twisted.internet.interfaces import IReactorTime

    from ..core.host_template import HostTemplate
    from ..store.backend import Backend

logger = logging.getLogger(__name__)

#: Seconds between two looks at whether the crawl still brings pages.
CHECK_INTERVAL = 0.5
#: Looks in a row at a stalled crawl (no download in flight, and every page on its way to a sample held) after
#: which the hosts still learning are learned from what they have.
STALLED_TICKS = 2
#: Pages held at most over all hosts; beyond, the host holding most is learned from what it has.
MAX_HELD = 2048
#: Characters of content held at most over all hosts; beyond, the host holding most is learned from what it has.
#: Scrapy keeps each held page's response (and its decoded text) alive, so this bounds what holding costs.
MAX_HELD_SIZE = 100_000_000
#: Bytes of responses waiting for an earlier host's copies at most (:mod:`scrapy_neardup.crawl.order`); the
#: scraper's bound grows by what waits, up to this.
HOLD_ACTIVE_SIZE = 50_000_000


@dataclass
class _Sample:
    """A host's pages so far, by key (a page seen twice counts once), and the pages waiting for its template."""

    pages: dict[str, np.ndarray] = field(default_factory=dict)
    waiters: list[Deferred[HostTemplate]] = field(default_factory=list)
    held_size: int = 0
    learning: bool = False


class HostTemplates:
    """Which template each host's pages are sketched under (see the module doc).

    Args:
        backend: the opened backend, where templates are loaded from and saved to.
        sample_pages: pages a host's template is learned from.
        count: ``count(stat, n)``: adds to the crawl's ``neardup/*`` stats.
        downloads_idle: whether no download is in flight (``None``: not in a crawl; pages are never held).
        max_held: pages held at most.
        max_held_size: characters of content held at most.
        room: called with ``+size`` when a page of ``size`` characters begins to wait and ``-size`` when it is
            released (:meth:`scrapy_neardup.crawl.scraper_room.ScraperRoom.grow`); ``None``: nothing to tell.
        clock: the reactor the stall check runs on (a test's ``twisted.internet.task.Clock``); ``None``: the
            running one.
    """

    def __init__(
        self, backend: Backend, sample_pages: int, count: Callable[[str, int], Any],
        downloads_idle: Callable[[], bool] | None, max_held: int = MAX_HELD, max_held_size: int = MAX_HELD_SIZE,
        room: Callable[[int], None] | None = None, clock: IReactorTime | None = None,
    ) -> None:
        self._clock = clock
        self._room = room
        self.backend = backend
        self.sample_pages = sample_pages
        self.max_held = max_held
        self.max_held_size = max_held_size
        self._count = count
        self._downloads_idle = downloads_idle
        self._known: dict[str, HostTemplate] = {}
        self._samples: dict[str, _Sample] = {}
        # Hosts the backend has no template for (asked once), and those being asked: the pages that wait for the
        # answer, in arrival order.
        self._missing: set[str] = set()
        self._loading: dict[str, list[Deferred[HostTemplate | None]]] = {}
        self._held = 0
        self._held_size = 0
        self._on_the_way = 0
        self._stalled_ticks = 0
        self._watch: LoopingCall | None = None

    @property
    def holds_pages(self) -> bool:
        """Whether pages of hosts without a template wait for it (only in a running crawl)."""
        return self._downloads_idle is not None

    def known(self, host: str) -> Deferred[HostTemplate | None]:
        """A Deferred firing with ``host``'s template when it is known (learned in this crawl, or saved with the
        backend), or with ``None`` when its pages must wait for it (:meth:`wait`); at once when the backend was
        asked already. Pages asking while the backend is asked all get its one answer, in the order they asked.

        Fails with :class:`BackendError`: the backend could not be asked (every page waiting for that answer).
        """
        template = self._known.get(host)
        if template is not None or host in self._samples or host in self._missing:
            return succeed(template)
        waiter: Deferred[HostTemplate | None] = Deferred()
        waiting = self._loading.get(host)
        if waiting is not None:
            waiting.append(waiter)
            return waiter
        self._loading[host] = [waiter]
        deferred_from_coro(self._load(host))
        return waiter

    async def _load(self, host: str) -> None:
        try:
            template = await self.backend.load_template(host)
        except Exception as exc:  # noqa: BLE001 - BackendError, or a bug: no page may be left waiting forever
            for waiter in self._loading.pop(host):
                waiter.errback(exc)
            return
        if template is not None:
            template = self._known.setdefault(host, template)
            self._count("templates_loaded", 1)
        else:
            self._missing.add(host)
        for waiter in self._loading.pop(host):
            waiter.callback(template)

    @contextmanager
    def on_the_way(self) -> Iterator[None]:
        """Within this block a page is on its way to a sample: it is being sketched, waits for its host's template,
        or is held. The crawl is stalled only when every such page is held (see :meth:`_stalled`)."""
        self._on_the_way += 1
        try:
            yield
        finally:
            self._on_the_way -= 1

    def add(self, host: str, key: str, blocks: np.ndarray) -> None:
        """Add page ``key`` (its distinct block hashes ``blocks``) to ``host``'s sample, unless the host's template
        is known or being learned; a full sample starts the learning."""
        if host in self._known:
            return
        sample = self._samples.get(host)
        if sample is None:
            sample = self._samples[host] = _Sample()
        if not sample.learning:
            sample.pages.setdefault(key, blocks)
            if len(sample.pages) >= self.sample_pages:
                self._learn(host)

    def wait(self, host: str, size: int) -> Deferred[HostTemplate]:
        """A Deferred firing with ``host``'s template once it is learned (call :meth:`add` first); ``size``: the
        waiting page's length. Held pages are released in the order they began to wait.

        Fails with :class:`BackendError`: the template could not be saved (the pages waiting for it get this
        error; the host's template is learned again from its next pages).
        """
        known = self._known.get(host)
        if known is not None:
            return succeed(known)
        sample = self._samples.get(host)
        if sample is None:  # the save that this page's sample started failed at once
            return fail(BackendError(f"the template of {host} could not be saved"))
        waiter: Deferred[HostTemplate] = Deferred()
        sample.waiters.append(waiter)
        sample.held_size += size
        self._held += 1
        self._held_size += size
        if self._room is not None:
            self._room(size)
        self._count("template_pages_held", 1)
        if self._held > self.max_held:
            self._learn(max(self._samples, key=lambda h: len(self._samples[h].waiters)))
        elif self._held_size > self.max_held_size:
            self._learn(max(self._samples, key=lambda h: self._samples[h].held_size))
        self._start_watching()
        return waiter

    def learn_all(self) -> None:
        """Learn every host still learning from the pages it has (the crawl brings no more, or it ends)."""
        for host in list(self._samples):
            self._learn(host)

    def close(self) -> None:
        """Release every held page (their hosts learned from what they have) and stop watching."""
        self.learn_all()
        self._stop_watching()

    def _learn(self, host: str) -> None:
        sample = self._samples[host]
        if not sample.learning:
            sample.learning = True
            deferred_from_coro(self._save(host, sample))

    async def _save(self, host: str, sample: _Sample) -> None:
        template = learn_template(list(sample.pages.values()))
        try:
            saved = await self.backend.save_template(host, template)
        except BackendError as exc:
            logger.warning("could not save the template of %s (%s); its %d waiting pages pass through unchecked",
                           host, exc, len(sample.waiters))
            self._missing.discard(host)  # ask again: another crawler of the fleet may have saved one
            self._release(host, sample, exc)
            return
        except Exception as exc:  # noqa: BLE001 - a bug must not leave pages waiting forever
            logger.exception("could not learn the template of %s", host)
            self._release(host, sample, BackendError(f"could not learn the template of {host}: {exc}"))
            return
        self._known[host] = saved
        self._missing.discard(host)
        self._count("templates_learned", 1)
        logger.debug("template of %s: %d blocks from %d pages (%d pages were waiting)", host, saved.hashes.size,
                     len(sample.pages), len(sample.waiters))
        self._release(host, sample, saved)

    def _release(self, host: str, sample: _Sample, result: HostTemplate | BackendError) -> None:
        del self._samples[host]
        self._held -= len(sample.waiters)
        self._held_size -= sample.held_size
        if self._room is not None and sample.held_size:
            self._room(-sample.held_size)
        for waiter in sample.waiters:
            if isinstance(result, BackendError):
                waiter.errback(result)
            else:
                waiter.callback(result)
        if not self._held:
            self._stop_watching()

    # -- the stall check -------------------------------------------------------------------------------------

    def _start_watching(self) -> None:
        if self._watch is None and self._downloads_idle is not None:
            self._stalled_ticks = 0
            self._watch = LoopingCall(self._tick)
            if self._clock is not None:
                self._watch.clock = self._clock
            self._watch.start(CHECK_INTERVAL, now=False).addErrback(
                lambda failure: logger.error("host template check failed: %s", failure.getErrorMessage())
            )

    def _stop_watching(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None and watch.running:
            watch.stop()

    def _stalled(self) -> bool:
        """Whether the crawl brings no new page to the samples now: no download is in flight and every page on
        its way is held. A page still being sketched (a large one, or one queued behind others in the sketch
        worker) will reach its sample: Scrapy may have stopped downloading until such pages go on (its scraper's
        bound), which is no reason to learn a host's template from fewer pages."""
        assert self._downloads_idle is not None
        return self._downloads_idle() and self._on_the_way <= self._held

    def _tick(self) -> None:
        self._stalled_ticks = self._stalled_ticks + 1 if self._stalled() else 0
        if self._stalled_ticks >= STALLED_TICKS and self._samples:
            logger.debug("the crawl brings no new page: learning the templates of %d hosts from the pages they have",
                         len(self._samples))
            self._stalled_ticks = 0
            self.learn_all()


