"""The order in which :class:`HostTemplates` answers a host's pages: the order they asked, whatever the
backend's answers take (the crawl-level check is in ``test_templates_crawl.py``).

Run on an asyncio loop, as in a crawl on Scrapy's default reactor: the backend's answers are asyncio futures the
test resolves; ``settle()`` lets the loop run the callbacks they start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from typing import Any

import numpy as np
from twisted.internet.task import Clock

from scrapy_neardup.core.host_template import HostTemplate
from scrapy_neardup.crawl.template_wait import CHECK_INTERVAL, STALLED_TICKS, HostTemplates
from scrapy_neardup.errors import BackendError


class HeldAnswers:
    """A backend whose template loads and saves answer only when the test says so."""

    def __init__(self) -> None:
        self.loads: list[asyncio.Future[Any]] = []
        self.saves: list[asyncio.Future[Any]] = []

    async def load_template(self, host: str) -> HostTemplate | None:
        self.loads.append(asyncio.get_running_loop().create_future())
        return await self.loads[-1]  # type: ignore[no-any-return]

    async def save_template(self, host: str, template: HostTemplate) -> HostTemplate:
        self.saves.append(asyncio.get_running_loop().create_future())
        await self.saves[-1]
        return template


def templates(backend: HeldAnswers, sample: int = 3) -> HostTemplates:
    return HostTemplates(backend, sample, lambda stat, n: None, downloads_idle=lambda: False)  # type: ignore[arg-type]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())  # type: ignore[arg-type]


def test_one_load_per_host_answers_every_page_in_the_order_they_asked() -> None:
    async def scenario() -> None:
        backend = HeldAnswers()
        host_templates = templates(backend)
        answered: list[tuple[int, Any]] = []
        for page in range(4):
            host_templates.known("a.test").addCallback(lambda template, page=page: answered.append((page, template)))
            await settle()
        assert len(backend.loads) == 1 and answered == []
        backend.loads[0].set_result(None)
        await settle()
        assert answered == [(0, None), (1, None), (2, None), (3, None)]
        # Asked once: later pages are answered at once, without asking the backend again.
        host_templates.known("a.test").addCallback(lambda template: answered.append((4, template)))
        assert answered[-1] == (4, None) and len(backend.loads) == 1

    run(scenario)


def test_a_failed_load_fails_every_waiting_page_and_is_asked_again() -> None:
    async def scenario() -> None:
        backend = HeldAnswers()
        host_templates = templates(backend)
        failed: list[int] = []
        for page in range(2):
            host_templates.known("a.test").addErrback(
                lambda failure, page=page: failed.append(page) if failure.check(BackendError) else None)
        await settle()
        backend.loads[0].set_exception(BackendError("down"))
        await settle()
        assert failed == [0, 1]
        host_templates.known("a.test").addErrback(lambda failure: None)
        await settle()
        assert len(backend.loads) == 2
        backend.loads[1].set_result(None)
        await settle()

    run(scenario)


def test_held_pages_are_released_in_the_order_they_began_to_wait() -> None:
    async def scenario() -> None:
        backend = HeldAnswers()
        host_templates = templates(backend, sample=3)
        released: list[int] = []
        for page in range(3):
            host_templates.add("a.test", f"http://a.test/{page}", np.array([1, 2, 3, page + 10], dtype=np.uint64))
            host_templates.wait("a.test", 100).addCallback(lambda template, page=page: released.append(page))
        await settle()
        assert len(backend.saves) == 1 and released == []  # a full sample: learning, the pages still held
        backend.saves[0].set_result(None)
        await settle()
        assert released == [0, 1, 2]

    run(scenario)


def test_the_scrapers_room_grows_by_the_pages_held_and_shrinks_when_they_go_on() -> None:
    """Memory for held pages only: the room grows by each held page's size and is given back on release."""
    async def scenario() -> None:
        backend = HeldAnswers()
        room: list[int] = []
        host_templates = HostTemplates(backend, 3, lambda stat, n: None,  # type: ignore[arg-type]
                                       downloads_idle=lambda: False, room=room.append)
        for page, size in enumerate((100, 250, 40)):
            host_templates.add("a.test", f"http://a.test/{page}", np.array([1, 2, page + 10], dtype=np.uint64))
            host_templates.wait("a.test", size)
        await settle()
        assert room == [100, 250, 40]  # held: the room grew by each page
        backend.saves[0].set_result(None)
        await settle()
        assert room[3:] == [-390] and sum(room) == 0  # released: all given back

    run(scenario)


def test_a_host_is_learned_from_fewer_pages_only_when_no_page_is_on_its_way() -> None:
    """Scrapy stops downloading while its scraper is full; pages still being sketched then are on their way to the
    sample, and learning the template without them would learn it from fewer pages than the crawl brings."""
    async def scenario() -> None:
        backend = HeldAnswers()
        clock = Clock()
        downloads: list[int] = []
        host_templates = HostTemplates(backend, 100, lambda stat, n: None,  # type: ignore[arg-type]
                                       downloads_idle=lambda: not downloads, clock=clock)
        released: list[int] = []
        with ExitStack() as held_pages:
            for page in range(5):
                held_pages.enter_context(host_templates.on_the_way())
                host_templates.add("a.test", f"http://a.test/{page}", np.array([1, 2, page + 10], dtype=np.uint64))
                host_templates.wait("a.test", 100).addCallback(lambda template, page=page: released.append(page))
            with host_templates.on_the_way():  # a page being sketched, no download in flight
                clock.pump([CHECK_INTERVAL] * (STALLED_TICKS + 3))
                await settle()
                assert backend.saves == []
            downloads.append(1)  # that page went on; a download in flight
            clock.pump([CHECK_INTERVAL] * (STALLED_TICKS + 3))
            await settle()
            assert backend.saves == []
            downloads.clear()  # stalled: every page on its way is held
            clock.pump([CHECK_INTERVAL] * STALLED_TICKS)
            await settle()
            assert len(backend.saves) == 1
            backend.saves[0].set_result(None)
            await settle()
            assert released == [0, 1, 2, 3, 4]

    run(scenario)
