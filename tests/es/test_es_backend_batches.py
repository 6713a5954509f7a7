"""The Elasticsearch backend deciding batches (``check_and_add_many``) and recrawls (a key seen again)."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from elasticsearch import Elasticsearch
from test_es_backend import SKETCHER, K, T, make_backend, near_duplicates, stream

from es_integration.backend import ElasticsearchBackend, doc_id_of
from es_integration.backend.writes import Writes
from es_integration.mapping import PENDING, ROOT
from scrapy_neardup.core.index import SketchIndex
from scrapy_neardup.core.params import SketchParams
from scrapy_neardup.core.sketch import Sketch
from scrapy_neardup.store.backend import Decision

pytestmark = pytest.mark.es


@pytest.fixture
def index_name(es_client: Elasticsearch) -> Iterator[str]:
    name = f"nd-batches-{uuid.uuid4().hex[:10]}"
    yield name
    es_client.indices.delete(index=f"{name},{name}-order", ignore_unavailable=True)


def counting(url: str, index: str) -> ElasticsearchBackend:
    """A backend whose transport counts its calls (each request under the retry policy)."""
    return ElasticsearchBackend(url=url, index=index, params=SketchParams.from_tag(SKETCHER.tag, min_shared=T))


def run_batches(
    url: str, index: str, pages: Sequence[tuple[str, Sketch]], size: int
) -> tuple[list[Decision], list[int]]:
    """Decide ``pages`` in batches of ``size``; the decisions and the requests of each batch."""

    async def run() -> tuple[list[Decision], list[int]]:
        backend = counting(url, index)
        await backend.open()
        decisions: list[Decision] = []
        per_batch: list[int] = []
        try:
            for start in range(0, len(pages), size):
                before = backend._transport.calls
                decisions += await backend.check_and_add_many(pages[start : start + size])
                per_batch.append(backend._transport.calls - before)
            assert backend.errors == 0
        finally:
            await backend.close()
        return decisions, per_batch

    return asyncio.run(run())


def index_docs(es: Elasticsearch, index: str) -> dict[str, dict[str, Any]]:
    es.indices.refresh(index=index)
    fields = ["neardup.key", "neardup.status", "neardup.fingerprint", "neardup.duplicate_of", "neardup.seq"]
    hits = es.search(index=index, size=2000, source_includes=fields)["hits"]["hits"]
    docs = {hit["_source"]["neardup"]["key"]: {**hit["_source"]["neardup"], "_id": hit["_id"]} for hit in hits}
    assert len(docs) == len(hits), "one document per key"
    return docs


def crawl(seed: int = 4, n: int = 96) -> list[tuple[str, Sketch]]:
    pages = stream(seed=seed, n=n)
    return list(zip([key for key, _ in pages], SKETCHER.sketch_many([text for _, text in pages]), strict=True))


@pytest.mark.parametrize("size", [1, 7, 48])
def test_batches_equal_the_embedded_index_in_a_constant_number_of_requests(
    es_url: str, es_client: Elasticsearch, index_name: str, size: int
) -> None:
    """A batch is decided as if each page were checked alone in turn (near-duplicates inside the batch too),
    in at most 8 requests whatever its size (without other crawlers: nothing to wait for)."""
    pages = crawl()
    embedded = SketchIndex(K, T, SKETCHER.tag)
    expected = [Decision.of(embedded.check_and_add(key, s)) for key, s in pages]
    decisions, per_batch = run_batches(es_url, index_name, pages, size)
    assert decisions == expected
    assert max(per_batch) <= 8, per_batch
    docs = index_docs(es_client, index_name)
    assert {k for k, d in docs.items() if d["status"] == "kept"} == {
        key for (key, _), d in zip(pages, expected, strict=True) if d.outcome == "kept"}
    assert all(d["_id"] == doc_id_of(k) for k, d in docs.items())
    assert "pending" not in {d["status"] for d in docs.values()}


def test_recrawl_unchanged_is_a_revisit_and_copies_stay_dropped(
    es_url: str, es_client: Elasticsearch, index_name: str
) -> None:
    pages = crawl()
    first, _ = run_batches(es_url, index_name, pages, 16)
    docs_before = index_docs(es_client, index_name)
    second, _ = run_batches(es_url, index_name, pages, 16)
    for (key, _), a, b in zip(pages, first, second, strict=True):
        if a.outcome == "kept":
            assert b == Decision.revisit(False), key  # never a duplicate of itself
        else:
            assert b.outcome == "duplicate" and b.match is not None and a.match is not None
            assert b.match.key == a.match.key, key  # still dropped naming the same kept page
    assert index_docs(es_client, index_name) == docs_before  # nothing rewritten, one document per key

    async def single() -> Any:  # check_and_add: a revisit is no duplicate
        backend = make_backend(es_url, index_name)
        await backend.open()
        try:
            key, sketch = next((k, s) for (k, s), d in zip(pages, first, strict=True) if d.outcome == "kept")
            return await backend.check_and_add(key, sketch)
        finally:
            await backend.close()

    assert asyncio.run(single()) is None


def _edited(text: str, edits: int, seed: int) -> str:
    rng = random.Random(seed)
    words = text.split()
    for _ in range(edits):
        words[rng.randrange(len(words))] = f"z{rng.randrange(10**9)}"
    return " ".join(words)


def test_recrawl_changed_pages_replace_their_content_and_a_kept_page_turned_copy_is_removed(
    es_url: str, es_client: Elasticsearch, index_name: str
) -> None:
    raw = stream(seed=5, n=96)
    pages = crawl(seed=5)
    first, _ = run_batches(es_url, index_name, pages, 16)
    kept = [i for i, d in enumerate(first) if d.outcome == "kept"]
    texts = [text for _, text in raw]
    # Three kept pages change: one slightly (own version still its best match), two entirely (no match at all).
    changed = {kept[0]: _edited(texts[kept[0]], 3, 1), kept[1]: f"brand new {uuid.uuid4().hex} " * 40,
               kept[2]: " ".join(f"v{i}-{uuid.uuid4().hex[:6]}" for i in range(300))}
    # A kept page (with copies naming it) becomes an exact copy of another kept page.
    victim = next(i for i in kept[3:] if any(d.match and d.match.key == raw[i][0] for d in first))
    target = next(i for i in kept if i not in changed and i != victim)
    changed[victim] = texts[target]
    second_pages = [(key, SKETCHER.sketch(changed.get(i, texts[i]))) for i, (key, _) in enumerate(raw)]
    second, _ = run_batches(es_url, index_name, second_pages, 16)
    revisits = {i: d for i, d in enumerate(second) if d.outcome == "revisit"}
    assert sorted(i for i, d in revisits.items() if d.changed) == sorted(set(changed) - {victim})
    assert second[victim].outcome == "duplicate" and second[victim].match is not None
    assert second[victim].match.key == raw[target][0] and second[victim].match.exact
    docs = index_docs(es_client, index_name)
    for i in set(changed) - {victim}:  # the stored content is the latest
        assert docs[raw[i][0]]["fingerprint"] == f"{second_pages[i][1].fingerprint:016x}"
        assert docs[raw[i][0]]["status"] == "kept"
    assert docs[raw[victim][0]]["status"] == "duplicate"  # no longer a candidate
    # The victim's former copies are judged afresh on the next crawl: none names it any more.
    third, _ = run_batches(es_url, index_name, second_pages, 16)
    former = [i for i, d in enumerate(first) if d.match and d.match.key == raw[victim][0]]
    assert former
    for i in former:
        assert third[i].match is None or third[i].match.key != raw[victim][0]
    assert third[victim].outcome == "duplicate" and third[victim].match is not None
    assert third[victim].match.key == raw[target][0]


def test_two_crawlers_recrawl_one_index_at_once(es_url: str, es_client: Elasticsearch, index_name: str) -> None:
    """Two backends (no shared lock, as two processes) recrawl the same pages at the same time, 3 of them
    changed: every kept page is a revisit for both, never a duplicate of itself; every drop names a kept page;
    the changed pages end with their new content; no page is left pending and each key has one document."""
    raw = stream(seed=6, n=96)
    pages = crawl(seed=6)
    first, _ = run_batches(es_url, index_name, pages, 16)
    kept = [i for i, d in enumerate(first) if d.outcome == "kept"]
    changed = {i: _edited(raw[i][1], 2, i) for i in kept[:3]}
    second_pages = [(key, SKETCHER.sketch(changed.get(i, text))) for i, (key, text) in enumerate(raw)]

    async def crawler(order: list[int]) -> dict[int, Decision]:
        backend = make_backend(es_url, index_name)
        await backend.open()
        out: dict[int, Decision] = {}
        try:
            for start in range(0, len(order), 8):
                chunk = order[start : start + 8]
                out.update(zip(chunk, await backend.check_and_add_many([second_pages[i] for i in chunk]),
                               strict=True))
            assert backend.errors == 0
        finally:
            await backend.close()
        return out

    async def both() -> list[dict[int, Decision]]:
        forward = list(range(len(pages)))
        shuffled = random.Random(1).sample(forward, len(forward))
        return list(await asyncio.gather(crawler(forward), crawler(shuffled)))

    docs_kept = {raw[i][0] for i in kept}
    answers_of_both = asyncio.run(both())
    for i in kept:  # a changed page is seen changed by the first to decide it, unchanged by the other
        assert any(answers[i].changed for answers in answers_of_both) == (i in changed), i
    for answers in answers_of_both:
        for i, decision in answers.items():
            if i in kept:
                assert decision.outcome == "revisit", (i, decision)
            else:
                assert decision.outcome == "duplicate" and decision.match is not None
                assert decision.match.key in docs_kept and decision.match.shared >= T
    docs = index_docs(es_client, index_name)
    assert {k for k, d in docs.items() if d["status"] == "kept"} == docs_kept
    assert "pending" not in {d["status"] for d in docs.values()}
    for i in changed:
        assert docs[raw[i][0]]["fingerprint"] == f"{second_pages[i][1].fingerprint:016x}"


def test_interleaved_batches_of_two_crawlers_do_not_wait_for_each_other(
    es_url: str, es_client: Elasticsearch, index_name: str
) -> None:
    """Two crawlers whose pending writes interleave on the node, ``a1 < b1 < b2 < a2``, with ``b2`` a copy of
    ``a1`` and ``a2`` a copy of ``b1``. The order is the batches' (their sequencer markers), so one batch is
    wholly before the other whatever the shards saw: its two pages are kept, the other batch's two name them,
    nobody waits until ``pending_timeout``. (Regression, with the order taken from one shard's ``_seq_no``: the
    two crawlers waited for each other and then kept all four pages.)

    The node really receives A's pending writes as two bulk requests with all of B's between them: the only way
    to pin an interleaving that Elasticsearch otherwise produces at random (a 3-node cluster did in 65% of groups).
    """
    x, y = near_duplicates(seed=21, count=2), near_duplicates(seed=22, count=2)
    a_pages = [("https://a.example/1", SKETCHER.sketch(x[0])), ("https://a.example/2", SKETCHER.sketch(y[1]))]
    b_pages = [("https://b.example/1", SKETCHER.sketch(y[0])), ("https://b.example/2", SKETCHER.sketch(x[1]))]
    events: dict[str, asyncio.Event] = {}

    class SplitWrites(Writes):
        """Crawler A: sends its first pending write alone, then waits until B's pending writes have landed."""

        async def _write_each(self, todo: list[Any], operations: list[dict[str, Any]], token: str, what: str) -> None:
            if operations[1][ROOT]["status"] != PENDING:
                return await super()._write_each(todo, operations, token, what)
            await events["b_ready"].wait()
            await super()._write_each(todo[:1], operations[:2], token, what)
            events["a1_landed"].set()
            await events["b_written"].wait()
            await super()._write_each(todo[1:], operations[2:], token, what)

    class LateWrites(Writes):
        """Crawler B: writes its pending pages between A's two writes."""

        async def write_pending(self, pages: Any, token: str) -> Any:
            events["b_ready"].set()
            await events["a1_landed"].wait()
            again = await super().write_pending(pages, token)
            events["b_written"].set()
            return again

    async def run() -> tuple[list[Decision], list[Decision], int]:
        events.update((name, asyncio.Event()) for name in ("b_ready", "a1_landed", "b_written"))
        a, b = (ElasticsearchBackend(url=es_url, index=index_name, params=SketchParams.from_tag(SKETCHER.tag,
                                                                                             min_shared=T))
                for _ in range(2))
        # The writes are a part of their own: each crawler gets its instrumented one.
        a._rounds.writes = SplitWrites(a._transport, crawl_id=a.crawl_id)
        b._rounds.writes = LateWrites(b._transport, crawl_id=b.crawl_id)
        a.pending_timeout = b.pending_timeout = 8.0
        await a.open()
        await b.open()
        try:
            answers = await asyncio.wait_for(
                asyncio.gather(a.check_and_add_many(a_pages), b.check_and_add_many(b_pages)), 60)
            return answers[0], answers[1], len(a._abandoned) + len(b._abandoned)
        finally:
            await a.close()
            await b.close()

    a_answers, b_answers, abandoned = asyncio.run(run())
    assert abandoned == 0
    docs = index_docs(es_client, index_name)
    # The batch ordered first (its pages' seq are the smaller) keeps both its pages; the other names them.
    a_first = docs[a_pages[0][0]]["seq"] < docs[b_pages[0][0]]["seq"]
    first, second = (a_answers, b_answers) if a_first else (b_answers, a_answers)
    first_pages, second_pages = (a_pages, b_pages) if a_first else (b_pages, a_pages)
    assert [d.outcome for d in first] == ["kept", "kept"]
    assert [d.outcome for d in second] == ["duplicate", "duplicate"]
    # a1 ~ b2 and a2 ~ b1: each page of the second batch names the copy the first batch kept.
    copy_of = {a_pages[0][0]: b_pages[1][0], b_pages[1][0]: a_pages[0][0],
               a_pages[1][0]: b_pages[0][0], b_pages[0][0]: a_pages[1][0]}
    for (key, _), decision in zip(second_pages, second, strict=True):
        assert decision.match is not None and decision.match.key == copy_of[key]
        assert docs[key]["duplicate_of"] == copy_of[key]
    assert {k for k, d in docs.items() if d["status"] == "kept"} == {key for key, _ in first_pages}


def test_a_page_met_again_by_the_same_crawl_is_a_repeat(es_url: str, es_client: Elasticsearch, index_name: str) -> None:
    """Within one crawl (one crawl identity, in one process or in several, before and after a resume) an unchanged
    page met again is a repeat; another crawl meets it as a revisit, once. Crawls running at the same time on one
    index keep their own."""
    raw = stream(seed=8, n=48)
    pages = crawl(seed=8, n=48)

    async def run(crawl_id: str, batches: list[list[tuple[str, Sketch]]]) -> list[list[Decision]]:
        params = SketchParams.from_tag(SKETCHER.tag, min_shared=T)
        backend = ElasticsearchBackend(url=es_url, index=index_name, params=params, crawl_id=crawl_id)
        await backend.open()
        try:
            return [await backend.check_and_add_many(batch) for batch in batches]
        finally:
            await backend.close()

    (first, again) = asyncio.run(run("crawl-1", [pages, pages[:16] + pages[:16]]))
    kept = {i for i, d in enumerate(first) if d.outcome == "kept"}
    assert kept and len(kept) < len(pages)
    for i, decision in enumerate(again):  # the same pages twice more, the same key twice in one call too
        assert decision == (Decision.repeat() if i % 16 in kept else first[i % 16]), i
    # The same crawl resumed (another backend, as another process): still repeats.
    (resumed,) = asyncio.run(run("crawl-1", [pages]))
    assert [d.outcome == "repeat" for d in resumed] == [i in kept for i in range(len(pages))]
    # Two other crawls at once: each meets every kept page as a revisit once, then as a repeat.
    async def both() -> list[list[list[Decision]]]:
        return list(await asyncio.gather(run("crawl-2", [pages, pages]), run("crawl-3", [pages, pages])))

    for revisits, repeats in asyncio.run(both()):
        assert [d == Decision.revisit(False) for d in revisits] == [i in kept for i in range(len(pages))]
        assert [d == Decision.repeat() for d in repeats] == [i in kept for i in range(len(pages))]
    (still,) = asyncio.run(run("crawl-1", [pages]))  # the first crawl is still named on the documents
    assert [d.outcome == "repeat" for d in still] == [i in kept for i in range(len(pages))]
    # A page changed within a crawl is a changed revisit (emitted with its new content), then a repeat.
    i = min(kept)
    changed = (raw[i][0], SKETCHER.sketch(_edited(raw[i][1], 2, seed=3)))
    (first_time, second_time) = asyncio.run(run("crawl-1", [[changed], [changed]]))
    assert first_time == [Decision.revisit(True)] and second_time == [Decision.repeat()]
    docs = index_docs(es_client, index_name)
    assert "pending" not in {d["status"] for d in docs.values()}
