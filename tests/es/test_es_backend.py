"""The Elasticsearch backend of the pipeline: embedded-index semantics, concurrency in and across processes."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import random
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from elasticsearch import Elasticsearch

from es_integration.backend import ElasticsearchBackend
from es_integration.mapping import fingerprint_hex, position_tokens, stored_fields
from scrapy_neardup.core.index import SketchIndex
from scrapy_neardup.core.match import Match
from scrapy_neardup.core.params import SketchParams
from scrapy_neardup.core.sketch import Sketch, Sketcher
from scrapy_neardup.core.stored_signature import StoredSignature
from scrapy_neardup.core.theory import min_shared_for
from scrapy_neardup.errors import EsError, IncompatibleSketches
from scrapy_neardup.store.backend import Backend, Decision

pytestmark = pytest.mark.es

K = 128
T = min_shared_for(0.9, K)
SKETCHER = Sketcher(num_perm=K)
PARAMS = SketchParams.from_tag(SKETCHER.tag, min_shared=T)


@pytest.fixture
def index_name(es_client: Elasticsearch) -> Iterator[str]:
    name = f"nd-backend-{uuid.uuid4().hex[:10]}"
    yield name
    es_client.indices.delete(index=f"{name},{name}-order", ignore_unavailable=True)


def make_backend(url: str, index: str, **kwargs: Any) -> ElasticsearchBackend:
    return ElasticsearchBackend(url=url, index=index, params=PARAMS, **kwargs)


def near_duplicates(seed: int, count: int) -> list[str]:
    """``count`` texts, each one word edit away from one base text: every pair shares >= t positions."""
    rng = random.Random(seed)
    base = [f"w{rng.randrange(50_000)}" for _ in range(400)]
    texts = []
    for _ in range(count):
        copy = list(base)
        copy[rng.randrange(len(copy))] = f"x{rng.randrange(10**9)}"
        texts.append(" ".join(copy))
    sigs = np.vstack([s.signature for s in SKETCHER.sketch_many(texts)])
    shared = (sigs[:, None, :] == sigs[None, :, :]).sum(axis=2)
    assert shared.min() >= T, "test precondition: all pairs are near-duplicates"
    return texts


def stream(seed: int, n: int) -> list[tuple[str, str]]:
    """Pages of a crawl: families of variants (some near the threshold), exact copies, unrelated pages."""
    rng = random.Random(seed)
    bases = [[f"w{rng.randrange(50_000)}" for _ in range(250)] for _ in range(n // 8)]
    pages: list[tuple[str, str]] = []
    for i in range(n):
        if pages and rng.random() < 0.12:  # an exact copy (other whitespace and case) of an earlier page
            pages.append((f"https://example.org/{i}", "  " + rng.choice(pages)[1].upper()))
            continue
        words = list(rng.choice(bases)) if rng.random() < 0.75 else [f"u{rng.randrange(10**6)}" for _ in range(250)]
        for _ in range(rng.choice([0, 0, 0, 1, 1, 2, 3, 5, 10])):
            words[rng.randrange(250)] = f"x{rng.randrange(10**9)}"
        pages.append((f"https://example.org/{i}", " ".join(words)))
    return pages


def test_constructor_signature_and_protocol() -> None:
    params = inspect.signature(ElasticsearchBackend).parameters
    assert list(params) == ["url", "index", "params", "api_key", "username", "password", "ca_certs",
                            "request_timeout", "crawl_id", "shards"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())
    assert params["params"].default is inspect.Parameter.empty
    # A tag string is not parameters: refused in one line saying how to read one (no pre-release shim).
    with pytest.raises(TypeError, match=r"SketchParams\.from_tag"):
        ElasticsearchBackend(url="http://127.0.0.1:9200", index="pages", params=SKETCHER.tag)  # type: ignore[arg-type]
    assert params["request_timeout"].default == 10.0 and params["api_key"].default is None
    assert params["crawl_id"].default is None  # a crawl of its own (a new random identity)
    backend = make_backend("http://127.0.0.1:9200", "pages")
    assert isinstance(backend, Backend)
    assert "secret" not in repr(make_backend("http://127.0.0.1:9200", "pages", username="u", password="secret"))


def test_sequential_semantics_equal_the_embedded_index(es_url: str, index_name: str) -> None:
    pages = stream(seed=4, n=72)
    sketches = SKETCHER.sketch_many([text for _, text in pages])
    embedded = SketchIndex(K, T, SKETCHER.tag)
    expected = [embedded.check_and_add(key, s) for (key, _), s in zip(pages, sketches, strict=True)]

    async def run() -> list[Match | None]:
        backend = make_backend(es_url, index_name)
        await backend.open()
        try:
            return [await backend.check_and_add(key, s) for (key, _), s in zip(pages, sketches, strict=True)]
        finally:
            await backend.close()

    got = asyncio.run(run())
    assert got == expected
    kinds = {"kept": sum(m is None for m in got), "exact": sum(bool(m and m.exact) for m in got)}
    assert kinds["kept"] > 20 and kinds["exact"] > 5 and len(pages) - kinds["kept"] - kinds["exact"] > 10
    # A second process (a new backend on the same index) sees the same kept pages.
    async def again() -> list[Match | None]:
        backend = make_backend(es_url, index_name)
        await backend.open()
        try:
            return [await backend.check_and_add(key + "#2", s) for (key, _), s in zip(pages, sketches, strict=True)]
        finally:
            await backend.close()

    second = asyncio.run(again())
    kept = {key for (key, _), m in zip(pages, got, strict=True) if m is None}
    for (key, _), m in zip(pages, second, strict=True):
        assert m is not None and m.key in kept
        if key in kept:
            assert (m.key, m.exact, m.shared) == (key, True, K)


def _check_one_kept(results: list[tuple[str, Match | None]]) -> str:
    kept = [key for key, match in results if match is None]
    assert len(kept) == 1, kept
    for key, match in results:
        assert match is None or (match.key == kept[0] and match.shared >= T), (key, match)
    return kept[0]


def _index_statuses(es: Elasticsearch, index: str) -> dict[str, list[dict[str, Any]]]:
    es.indices.refresh(index=index)
    hits = es.search(index=index, size=1000, source_includes=["neardup.key", "neardup.status", "neardup.duplicate_of"])
    by_status: dict[str, list[dict[str, Any]]] = {}
    for hit in hits["hits"]["hits"]:
        fields = hit["_source"]["neardup"]
        by_status.setdefault(fields["status"], []).append(fields)
    return by_status


def test_concurrent_coroutines_and_backends(es_url: str, es_client: Elasticsearch, index_name: str) -> None:
    """Many coroutines on one backend (serialized by its lock) and several backends (no shared lock, like
    separate processes) checking near-duplicates of one page at once: one is kept, all others name it."""
    texts = near_duplicates(seed=8, count=36)
    sketches = SKETCHER.sketch_many(texts)

    async def run() -> list[tuple[str, Match | None]]:
        backends = [make_backend(es_url, index_name) for _ in range(6)]
        await asyncio.gather(*(b.open() for b in backends))
        try:
            calls = [backends[i % 6].check_and_add(f"page-{i}", s) for i, s in enumerate(sketches)]
            matches = await asyncio.gather(*calls)
            assert sum(b.errors for b in backends) == 0
            return [(f"page-{i}", m) for i, m in enumerate(matches)]
        finally:
            await asyncio.gather(*(b.close() for b in backends))

    kept = _check_one_kept(asyncio.run(run()))
    statuses = _index_statuses(es_client, index_name)
    assert [f["key"] for f in statuses["kept"]] == [kept]
    assert "pending" not in statuses
    assert all(f["duplicate_of"] == kept for f in statuses.get("duplicate", []))
    # The six backends' first checks all ran before any write: five pages were written and then found to be
    # duplicates of an earlier writer (step c), the path that needs no lock.
    assert len(statuses.get("duplicate", [])) >= 5


_WORKER = textwrap.dedent(
    """
    import asyncio, json, sys
    from es_integration.backend import ElasticsearchBackend
    from scrapy_neardup.core.params import SketchParams
    from scrapy_neardup.core.sketch import Sketcher

    url, index, t, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    texts = json.loads(sys.stdin.readline())
    sketcher = Sketcher(num_perm=128)
    sketches = sketcher.sketch_many(texts)

    async def main():
        backend = ElasticsearchBackend(url=url, index=index, params=SketchParams.from_tag(sketcher.tag, min_shared=t))
        await backend.open()
        print("ready", flush=True)
        sys.stdin.readline()  # "go": all processes start together
        matches = await asyncio.gather(*(backend.check_and_add(f"{name}-{i}", s) for i, s in enumerate(sketches)))
        await backend.close()
        for i, m in enumerate(matches):
            print(json.dumps({"key": f"{name}-{i}", "match": None if m is None else [m.key, m.shared]}))
        print(json.dumps({"errors": backend.errors}))

    asyncio.run(main())
    """
)


def test_several_os_processes(es_url: str, es_client: Elasticsearch, index_name: str) -> None:
    processes = 4
    texts = near_duplicates(seed=9, count=processes * 6)
    # Create the index first so that the processes race on pages, not on index creation.
    asyncio.run(_open_close(es_url, index_name))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, es_url, index_name, str(T), f"proc{p}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        for p in range(processes)
    ]
    try:
        for p, proc in enumerate(procs):
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps(texts[p::processes]) + "\n")
            proc.stdin.flush()
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results: list[tuple[str, Match | None]] = []
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err[-2000:]
            lines = [json.loads(line) for line in out.splitlines()]
            assert lines[-1] == {"errors": 0}
            for line in lines[:-1]:
                m = line["match"]
                results.append((line["key"], None if m is None else Match(m[0], m[1], m[1] / K, False)))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert len(results) == len(texts)
    kept = _check_one_kept(results)
    statuses = _index_statuses(es_client, index_name)
    assert [f["key"] for f in statuses["kept"]] == [kept] and "pending" not in statuses
    # The processes did race: pages were written before their check found an earlier writer (in practice
    # every process's first page).
    assert len(statuses.get("duplicate", [])) >= 1


async def _open_close(url: str, index: str) -> None:
    backend = make_backend(url, index)
    await backend.open()
    await backend.close()


def _pending_doc(es: Elasticsearch, index: str, key: str, sketch: Sketch) -> str:
    doc_id = uuid.uuid4().hex
    fields = {"key": key, "tag": sketch.tag, **stored_fields(StoredSignature.from_sketch(sketch)), "empty": False,
              "fingerprint": fingerprint_hex(sketch.fingerprint), "status": "pending", "group": doc_id}
    es.index(index=index, id=doc_id, document={"neardup": fields}, refresh=True)
    return doc_id


def test_waits_for_a_pending_page_then_follows_it(es_url: str, es_client: Elasticsearch, index_name: str) -> None:
    """A page another crawler is still deciding on is waited for; once kept, it is the match."""
    a, b = SKETCHER.sketch_many(near_duplicates(seed=10, count=2))

    async def run() -> tuple[Match | None, float]:
        backend = make_backend(es_url, index_name)
        await backend.open()
        doc_id = _pending_doc(es_client, index_name, "other-crawler-page", a)
        task = asyncio.create_task(backend.check_and_add("mine", b))
        await asyncio.sleep(0.8)
        assert not task.done()
        fields = es_client.get(index=index_name, id=doc_id)["_source"]["neardup"]
        es_client.index(index=index_name, id=doc_id, document={"neardup": {**fields, "status": "kept", "seq": 0}})
        started = time.monotonic()
        match = await asyncio.wait_for(task, 10)
        await backend.close()
        return match, time.monotonic() - started

    match, waited = asyncio.run(run())
    assert match is not None and match.key == "other-crawler-page" and match.shared >= T
    assert waited < 2.0


def test_abandoned_pending_page_is_ignored_after_timeout(
    es_url: str, es_client: Elasticsearch, index_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    a, b, c = SKETCHER.sketch_many(near_duplicates(seed=11, count=3))

    async def run() -> tuple[Match | None, Match | None, float, float]:
        backend = make_backend(es_url, index_name)
        backend.pending_timeout = 0.5
        await backend.open()
        _pending_doc(es_client, index_name, "crashed-crawler-page", a)
        started = time.monotonic()
        first = await backend.check_and_add("mine", b)
        slow = time.monotonic() - started
        started = time.monotonic()
        second = await backend.check_and_add("mine-2", c)
        await backend.close()
        return first, second, slow, time.monotonic() - started

    with caplog.at_level(logging.WARNING, logger="es_integration.backend"):
        first, second, slow, fast = asyncio.run(run())
    assert first is None and slow >= 0.5  # kept after waiting for the abandoned page
    assert second is not None and second.key == "mine"
    assert fast < slow  # the abandoned page is not waited for again
    assert "left pending" in caplog.text


def test_input_errors(es_url: str, es_client: Elasticsearch, index_name: str) -> None:
    sketch = SKETCHER.sketch("one two three four five six seven")

    async def run() -> None:
        backend = make_backend(es_url, index_name)
        with pytest.raises(RuntimeError, match="before open"):
            await backend.check_and_add("a", sketch)
        await backend.open()
        try:
            with pytest.raises(IncompatibleSketches):
                await backend.check_and_add("a", Sketcher(num_perm=K, seed=3).sketch("one two three four five six"))
            with pytest.raises(ValueError, match="empty"):
                await backend.check_and_add("a", SKETCHER.sketch(""))
            assert await backend.check_and_add("a", sketch) is None
        finally:
            await backend.close()

    asyncio.run(run())
    with pytest.raises(ValueError, match="lowercase"):
        make_backend(es_url, "Bad")


def test_an_existing_multi_shard_index_is_used(es_url: str, es_client: Elasticsearch, index_name: str) -> None:
    """Any shard count is accepted: the order comes from the sequencer index, which ``open`` creates."""
    es_client.indices.create(index=index_name, settings={"number_of_shards": 2, "number_of_replicas": 0})
    a, b = SKETCHER.sketch_many(near_duplicates(seed=31, count=2))

    async def run() -> list[Decision]:
        backend = make_backend(es_url, index_name)
        await backend.open()
        try:
            return await backend.check_and_add_many([("a", a), ("b", b)])
        finally:
            await backend.close()

    first, second = asyncio.run(run())
    assert first.kept and second.match is not None and second.match.key == "a"
    assert es_client.indices.exists(index=f"{index_name}-order")


def test_unreachable_node_fails_after_bounded_retries() -> None:
    backend = make_backend("http://127.0.0.1:9", "pages", request_timeout=2)
    backend.retries, backend.backoff = 2, 0.01

    async def run() -> None:
        await backend.open()

    started = time.monotonic()
    with pytest.raises(EsError) as info:
        asyncio.run(run())
    assert "cannot connect" in str(info.value) and "after 3 attempts" in str(info.value)
    assert backend.errors == 3 and backend.retried == 2
    assert time.monotonic() - started < 10


def test_positions_only_index_falls_back_to_the_position_query(
    es_url: str, es_client: Elasticsearch, index_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An index written before neardup.sig/bands existed: its kept pages have positions only. The band query
    would miss them, so the backend uses the position query for the run (and says so), and finds them."""
    a, b = SKETCHER.sketch_many(near_duplicates(seed=12, count=2))
    from es_integration.mapping import ensure_index

    ensure_index(es_client, index_name, shards=1)
    fields = {"key": "old-page", "tag": a.tag, "positions": position_tokens(a.signature), "empty": False,
              "fingerprint": fingerprint_hex(a.fingerprint), "status": "kept", "group": "old", "seq": 0}
    es_client.index(index=index_name, id="old", document={"neardup": fields}, refresh=True)

    async def run(fresh: bool) -> tuple[bool, Match | None]:
        backend = make_backend(es_url, index_name)
        await backend.open()
        try:
            return backend._bands, await backend.check_and_add("new-page" if fresh else "again", b)
        finally:
            await backend.close()

    with caplog.at_level(logging.WARNING, logger="es_integration.backend"):
        bands, match = asyncio.run(run(True))
    assert not bands and "no band fields" in caplog.text
    assert match is not None and match.key == "old-page" and match.shared >= T
    # Once the old page has the new fields (what `neardup es backfill` writes), bands are used and agree.
    from es_integration.indexing import upgrade_signatures

    assert upgrade_signatures(es_client, index_name, SketchParams.from_tag(a.tag)) == 1
    bands, again = asyncio.run(run(False))
    assert bands and again == match
