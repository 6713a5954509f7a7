"""The fleet's mirror counts in ``<index>-hosts`` (es_integration.hosts), against a real node."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import es_integration.hosts as hosts_module
from es_integration.backend import ElasticsearchBackend
from es_integration.client import ConnectionSettings
from es_integration.hosts import ElasticsearchHostStore, hosts_index
from scrapy_neardup.core.mirror_table import HostCounts, MirrorTable
from scrapy_neardup.core.params import SketchParams
from scrapy_neardup.errors import EsError

pytestmark = pytest.mark.es

A, B, C = "http://a.test:80", "http://b.test:80", "http://c.test:80"


@pytest.fixture
def index(es_client: Any) -> Iterator[str]:
    name = f"neardup-hosts-test-{uuid.uuid4().hex[:8]}"
    yield name
    es_client.indices.delete(index=hosts_index(name), ignore_unavailable=True)


def test_the_backend_names_its_sibling_index(es_url: str, index: str) -> None:
    backend = ElasticsearchBackend(url=es_url, index=index, params=SketchParams.create(min_shared=100))
    store = backend.host_store()
    assert isinstance(store, ElasticsearchHostStore) and store.index == index + "-hosts"


def test_each_process_pulls_the_others_sums(es_url: str, index: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hosts_module, "_PAGE", 2)  # several pages of buckets with three hosts

    async def run() -> None:
        settings = ConnectionSettings.create(es_url)
        one, two, three = (ElasticsearchHostStore(settings, hosts_index(index)) for _ in range(3))
        for store in (one, two, three):
            await store.open()  # the first creates the index, the others find it
        try:
            assert await one.pull() == HostCounts()
            await one.push(HostCounts({A: 5, B: 4}, {A: 10.0, B: 11.0}, {(B, A): 4}))
            await two.push(HostCounts({A: 3, B: 6, C: 1}, {A: 9.5, B: 12.0, C: 8.0}, {(B, A): 5, (C, A): 1}))
            # A process's counts are overwritten by its next push, never added to.
            await two.push(HostCounts({A: 3, B: 7, C: 1}, {A: 9.5, B: 12.0, C: 8.0}, {(B, A): 6, (C, A): 1}))
            assert await one.pull() == HostCounts({A: 3, B: 7, C: 1}, {A: 9.5, B: 12.0, C: 8.0},
                                                  {(B, A): 6, (C, A): 1})
            assert await three.pull() == HostCounts({A: 8, B: 11, C: 1}, {A: 9.5, B: 11.0, C: 8.0},
                                                    {(B, A): 10, (C, A): 1})
            # The table decides on the totals: 4 + 6 = 10 pages of B, all copies of A, seen first.
            table = MirrorTable(min_pages=10)
            decisions = table.set_fleet(await three.pull())
            assert [(d.mirror, d.original, d.copies, d.checked) for d in decisions] == [(B, A, 10, 11)]
        finally:
            for store in (one, two, three):
                await store.close()

    asyncio.run(run())


def test_a_refused_write_raises(es_url: str, es_client: Any, index: str) -> None:
    # An index of that name mapped otherwise: the store's documents are refused, and it says so.
    es_client.indices.create(index=hosts_index(index), mappings={"dynamic": "strict", "properties": {
        "kind": {"type": "long"}}})

    async def run() -> None:
        store = ElasticsearchHostStore(ConnectionSettings.create(es_url), hosts_index(index))
        await store.open()
        try:
            with pytest.raises(EsError, match="documents refused"):
                await store.push(HostCounts({A: 1}, {A: 1.0}, {}))
        finally:
            await store.close()

    asyncio.run(run())
