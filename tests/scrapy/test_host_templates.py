"""The order in which a host's pages are answered by :class:`HostTemplates` and leave the
:class:`PageSketcher`: the order they arrived, whatever the backend's answers take (the crawl-level checks are in
``test_templates_crawl.py``).

The template tests run on an asyncio loop, as in a crawl on Scrapy's default reactor: the backend's answers are
asyncio futures the test resolves; ``settle()`` lets the loop run the callbacks they start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from scrapy_neardup.core.sketch import Sketcher
from scrapy_neardup.core.template import HostTemplate
from scrapy_neardup.crawl.page_sketcher import PageSketcher
from scrapy_neardup.crawl.templates import HostTemplates
from scrapy_neardup.store.backend import BackendError


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


def test_pages_leave_the_sketcher_in_arrival_order_whatever_order_their_sketches_come_in() -> None:
    """A host's pages are handed to the pipeline in the order they came, also when a later page's sketch is ready
    first (it was not held for the template) or an earlier one fails; the line empties behind them."""
    sketcher = PageSketcher(Sketcher(), sketch_process=False, template_sample=3, crawler=None,
                            count=lambda stat, n: None)
    sketches: list[Deferred[Any]] = [Deferred() for _ in range(4)]
    left: list[Any] = []
    for page, sketched in enumerate(sketches):
        sketcher._in_arrival_order("a.test", sketched).addBoth(
            lambda result, page=page: left.append((page, "failed" if isinstance(result, Failure) else result)))
    other: Deferred[Any] = Deferred()
    sketcher._in_arrival_order("b.test", other).addCallback(lambda result: left.append(("b", result)))
    other.callback("b0")  # another host's line does not wait for this one
    sketches[2].callback("s2")
    sketches[3].callback("s3")
    assert left == [("b", "b0")]
    sketches[1].errback(Failure(BackendError("down")))
    assert left == [("b", "b0")]
    sketches[0].callback("s0")
    assert left == [("b", "b0"), (0, "s0"), (1, "failed"), (2, "s2"), (3, "s3")]
    assert sketcher._lines == {}


def test_a_long_line_is_handed_on_without_recursion() -> None:
    sketcher = PageSketcher(Sketcher(), sketch_process=False, template_sample=3, crawler=None,
                            count=lambda stat, n: None)
    sketches: list[Deferred[Any]] = [Deferred() for _ in range(20_000)]
    left: list[Any] = []
    for sketched in sketches:
        sketcher._in_arrival_order("a.test", sketched).addCallback(left.append)
    for page, sketched in reversed(list(enumerate(sketches))):
        sketched.callback(page)
    assert left == list(range(20_000)) and sketcher._lines == {}
