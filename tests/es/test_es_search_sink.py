"""The search index's writer (``es_integration.search_index.ElasticsearchSearchSink``) on the session's node,
driven directly: when its batches leave."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from es_integration.connection import ConnectionSettings
from es_integration.search_index import ElasticsearchSearchSink
from scrapy_neardup.store.search_sink import SearchPage

pytestmark = pytest.mark.es


class _Events:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.failures: list[str] = []

    def count(self, name: str, value: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + value

    def failed(self, key: str, page: Any, kind: str, reason: str) -> None:
        self.failures.append(f"{key}: {kind} {reason}")


def test_a_partial_batch_leaves_after_the_flush_interval_while_items_keep_coming(es_url: str, es_client: Any) -> None:
    """Items arriving faster than the flush interval, never filling a batch: the first of a partial batch waits
    at most ``flush_interval`` seconds (not until the items stop), and close() writes the rest."""
    index = f"search-sink-{uuid.uuid4().hex[:10]}"
    seen_during: list[int] = []

    def written() -> int:
        es_client.indices.refresh(index=index)
        return int(es_client.count(index=index)["count"])

    async def crawl() -> _Events:
        sink = ElasticsearchSearchSink(ConnectionSettings.create(es_url), index, batch_size=1000)
        sink.flush_interval = 0.3
        events = _Events()
        await sink.open(events)
        for i in range(30):  # 3 s of items, one every 0.1 s: ten per flush interval
            await sink.write(SearchPage(f"https://a.test/{i}", {"url": f"https://a.test/{i}"}))
            await asyncio.sleep(0.1)
        seen_during.append(await asyncio.to_thread(written))
        await sink.close()
        return events

    try:
        events = asyncio.run(crawl())
        assert events.failures == []
        assert seen_during[0] >= 20, seen_during  # sent while the items kept coming
        assert events.counts["search_indexed"] == 30 and written() == 30
    finally:
        es_client.indices.delete(index=index, ignore_unavailable=True)
