"""Gather the pages ready for the duplicate check into one ``Backend.check_and_add_many`` call.

Scrapy runs ``process_item`` for up to ``CONCURRENT_ITEMS`` items at a time and the sketch worker answers in
batches, so several pages often reach the duplicate check together. A network backend decides a batch in a
constant number of requests (the Elasticsearch backend: one search, one bulk write, one refresh, ...), so
sending them together divides its cost per page by the batch size.

The rule, with no timer: a page arriving while no call is under way is sent at once, alone (no added latency);
pages arriving while a call is under way wait, and all of them go in the next call (at most ``max_batch``),
in arrival order. One call runs at a time, which also serializes check-and-insert within the process (two
near-duplicates in one call are decided in order by the backend). A failing call fails each of its pages
(each caller gets the exception), and the next call proceeds.

Built on Twisted Deferreds, so it works under any reactor (as the pipeline's lock did); awaited through
:func:`scrapy.utils.defer.maybe_deferred_to_future`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.utils.defer import deferred_from_coro
from twisted.internet.defer import Deferred

if TYPE_CHECKING:
    from ..core.sketch import Sketch
    from ..store.backend import Backend, Decision


class CheckBatcher:
    """Send pages to ``backend.check_and_add_many`` in batches (see the module doc).

    Args:
        backend: the opened backend.
        max_batch: pages per call at most.
    """

    def __init__(self, backend: Backend, max_batch: int = 100) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.backend = backend
        self.max_batch = max_batch
        self._queue: list[tuple[str, Sketch, Deferred[Decision]]] = []
        self._running = False
        #: calls made and pages sent (the mean batch is their ratio)
        self.calls = 0
        self.pages = 0

    def check(self, key: str, sketch: Sketch) -> Deferred[Decision]:
        """The backend's decision for one page, fired when its batch has been decided (or failed)."""
        result: Deferred[Decision] = Deferred()
        self._queue.append((key, sketch, result))
        if not self._running:
            self._running = True
            deferred_from_coro(self._drain())
        return result

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch :]
                self.calls += 1
                self.pages += len(batch)
                try:
                    decisions = await self.backend.check_and_add_many([(key, sketch) for key, sketch, _ in batch])
                except Exception as exc:  # noqa: BLE001 - handed to each caller, who decides what it means
                    for _, _, result in batch:
                        result.errback(exc)
                    continue
                for (_, _, result), decision in zip(batch, decisions, strict=True):
                    result.callback(decision)
        finally:
            self._running = False
