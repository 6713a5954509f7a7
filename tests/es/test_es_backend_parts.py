"""The parts of the Elasticsearch backend built and run on their own, without ``ElasticsearchBackend``: each is
constructed with the parts it uses (docs/architecture.md, "The crawler backend's parts")."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest
from elasticsearch import Elasticsearch
from test_es_backend import PARAMS, SKETCHER, T, near_duplicates

from es_integration.backend import doc_id_of
from es_integration.backend.opening import open_index
from es_integration.backend.rounds import Rounds
from es_integration.backend.searches import Searches
from es_integration.backend.transport import Transport
from es_integration.backend.unchecked import UncheckedQueue
from es_integration.backend.writes import Writes
from es_integration.client import connect_async
from es_integration.connection import ConnectionSettings
from es_integration.mapping import PENDING, UNCHECKED, fingerprint_hex, stored_fields
from scrapy_neardup.core.stored_signature import StoredSignature
from scrapy_neardup.store.backend import Decision

pytestmark = pytest.mark.es


@pytest.fixture
def index_name(es_client: Elasticsearch) -> Iterator[str]:
    name = f"nd-parts-{uuid.uuid4().hex[:10]}"
    yield name
    es_client.indices.delete(index=f"{name},{name}-order", ignore_unavailable=True)


@asynccontextmanager
async def opened(url: str, index: str, writer: str) -> AsyncIterator[tuple[Transport, Searches, Rounds]]:
    """A transport, the searches and the rounds of ``index``, wired by hand; the index created."""
    transport = Transport(ConnectionSettings.create(url), index, retries=2, backoff=0.01)
    transport.client = await connect_async(transport.settings)
    try:
        searches = Searches(transport, PARAMS, writer=writer, pending_timeout=0.3)
        rounds = Rounds(transport, searches, Writes(transport, crawl_id="crawl-1"), PARAMS, crawl_id="crawl-1")
        searches.bands, rounds.sequencer = await open_index(transport, PARAMS, shards=1, pending_timeout=0.3)
        yield transport, searches, rounds
    finally:
        await transport.client.close()


def test_rounds_decide_a_batch_from_parts_wired_by_hand(es_url: str, index_name: str) -> None:
    """Rounds over a hand-built Transport, Searches and Writes decide like the backend: of three near-duplicates
    the first is kept and the others name it; the searches alone then find the kept page as a candidate."""
    texts = near_duplicates(seed=31, count=4)
    pages = [(f"https://parts.example/{i}", sketch) for i, sketch in enumerate(SKETCHER.sketch_many(texts))]

    async def run() -> tuple[list[Decision], list[tuple[str, int]], int, int]:
        async with opened(es_url, index_name, writer="parts") as (transport, searches, rounds):
            decisions = await rounds.decide(pages[:3])
            await rounds.writes.refresh()
            probe = StoredSignature.from_sketch(pages[3][1])
            (hits,) = await searches.search_many([probe], [doc_id_of(pages[3][0])])
            return decisions, [(hit["_id"], shared) for hit, shared in hits], transport.calls, transport.errors

    decisions, hits, calls, errors = asyncio.run(run())
    assert decisions[0] == Decision.kept()
    assert [d.match.key if d.match else None for d in decisions[1:]] == [pages[0][0], pages[0][0]]
    # Only the kept page is a candidate (the duplicates are no longer), sharing >= t positions.
    assert [hit_id for hit_id, _ in hits] == [doc_id_of(pages[0][0])] and hits[0][1] >= T
    assert calls > 0 and errors == 0


def test_searches_tell_others_pending_pages_and_give_up_on_them(
    es_url: str, es_client: Elasticsearch, index_name: str
) -> None:
    """Searches alone: a pending page written by another writer is waited for, one of its own writer is not; a
    page still pending after ``pending_timeout`` is abandoned and no longer waited for."""
    sketch = SKETCHER.sketch(near_duplicates(seed=32, count=1)[0])

    async def run() -> tuple[bool, bool, bool, set[tuple[str, int | None]]]:
        async with opened(es_url, index_name, writer="mine") as (_, searches, _rounds):
            doc_id = uuid.uuid4().hex
            fields = {"key": "elsewhere", "tag": sketch.tag, **stored_fields(StoredSignature.from_sketch(sketch)),
                      "empty": False, "fingerprint": fingerprint_hex(sketch.fingerprint), "status": PENDING,
                      "group": doc_id, "writer": "theirs-1"}
            es_client.index(index=index_name, id=doc_id, document={"neardup": fields}, refresh=True)
            ours = Searches(searches.transport, PARAMS, writer="theirs", pending_timeout=0.3)
            (doc,) = await searches.transport.mget([doc_id])
            waits, waits_own = searches.waits_for(doc), ours.waits_for(doc)
            await searches.read_settled({doc_id})  # still pending after 0.3 s: abandoned
            return waits, waits_own, searches.waits_for(doc), searches.abandoned

    waits, waits_own, waits_after, abandoned = asyncio.run(run())
    assert waits and not waits_own and not waits_after
    assert len(abandoned) == 1


def test_the_unchecked_queue_writes_what_it_remembers(es_url: str, es_client: Elasticsearch, index_name: str) -> None:
    """UncheckedQueue alone: pages up to ``max_unchecked`` remembered and written as ``unchecked``, the rest
    counted; its report says so."""
    sketches = SKETCHER.sketch_many(near_duplicates(seed=33, count=3))
    keys = [f"https://unchecked.example/{i}" for i in range(3)]

    async def run() -> tuple[int, dict[str, int]]:
        async with opened(es_url, index_name, writer="mine") as (transport, searches, _rounds):
            queue = UncheckedQueue(transport, searches, max_unchecked=2)
            for key, sketch in zip(keys, sketches, strict=True):
                queue.remember(key, sketch, doc_id_of(key))
            remembered = len(queue)
            await queue.write_quietly(limit=None, retries=None)
            queue.report()
            return remembered, queue.close_stats

    remembered, stats = asyncio.run(run())
    assert remembered == 2
    assert stats == {"unchecked_indexed": 2, "unchecked_unindexed": 1, "unchecked_overflow": 1}
    es_client.indices.refresh(index=index_name)
    docs = es_client.search(index=index_name, query={"match_all": {}})["hits"]["hits"]
    assert sorted((d["_source"]["neardup"]["key"], d["_source"]["neardup"]["status"]) for d in docs) == [
        (keys[0], UNCHECKED), (keys[1], UNCHECKED)]


def test_opening_waits_for_an_index_the_node_has_not_applied_yet(es_url: str, index_name: str) -> None:
    """A node that has not yet applied the cluster state holding an index another crawler just created answers
    404 ``index_not_found_exception`` for a moment: opening waits for it (bounded), as it waits on 503; another
    404 (a missing document) is not waited on."""
    from elasticsearch import NotFoundError

    from es_integration.backend.opening import _settling

    async def run() -> tuple[int, float]:
        transport = Transport(ConnectionSettings.create(es_url), index_name, retries=0, backoff=0.01)
        es = transport.client = await connect_async(transport.settings)
        try:
            async def create_later() -> None:
                await asyncio.sleep(0.4)
                await es.indices.create(index=index_name)

            creating = asyncio.create_task(create_later())
            started = asyncio.get_running_loop().time()
            answer = await _settling(index_name, lambda: es.search(index=index_name, size=0))
            waited = asyncio.get_running_loop().time() - started
            await creating
            with pytest.raises(NotFoundError):  # the index exists, the document does not: no wait
                await _settling(index_name, lambda: es.get(index=index_name, id="absent"))
            return int(answer["hits"]["total"]["value"]), waited
        finally:
            await es.close()

    hits, waited = asyncio.run(run())
    assert hits == 0 and waited >= 0.4
