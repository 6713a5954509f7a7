"""Bulk writes of every `neardup es` command against a node that rejects them (HTTP 429), and the commands that
would do nothing saying so.

The node of this module has a tiny indexing-pressure budget (``indexing_pressure.memory.limit: 1mb``): a bulk
request of more than about 50 of these 20 KB pages is refused with ``es_rejected_execution_exception``
(``max_coordinating_bytes`` while indexing, ``max_primary_bytes`` when updating the group fields, whose updates
weigh the whole document on the primary), as a default node refuses the raw HTML of a real crawl.
"""

from __future__ import annotations

import json
import os
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scrapy_neardup.cli.main import main

pytestmark = pytest.mark.es


@pytest.fixture(scope="module")
def tight_node() -> Iterator[Any]:
    from neardup_devnode.java import default_version
    from neardup_devnode.node import start_node

    if os.environ.get("ES_URL"):
        pytest.skip("needs a node of its own (a node setting), not the cluster at ES_URL")
    engine = os.environ.get("NEARDUP_ENGINE", "elasticsearch")
    node = start_node(name=f"pytest-pressure-{os.getpid()}", engine=engine,
                      version=os.environ.get("NEARDUP_ES_VERSION") or default_version(engine), heap="256m",
                      settings={"indexing_pressure.memory.limit": "1mb"}, die_with_parent=True, timeout=240.0)
    try:
        yield node
    finally:
        node.stop()


def rejections(client: Any) -> int:
    stats = client.nodes.stats(metric="indexing_pressure")["nodes"]
    return sum(node["indexing_pressure"]["memory"]["total"]["coordinating_rejections"]
               + node["indexing_pressure"]["memory"]["total"]["primary_rejections"] for node in stats.values())


def pages(path: Path, groups: int) -> str:
    """``groups`` groups of three 20 KB pages, each copy one word apart."""
    rng = random.Random(7)
    words = [f"w{i}" for i in range(5000)]
    with path.open("w") as out:
        for g in range(groups):
            base = [rng.choice(words) for _ in range(3000)]
            for c in range(3):
                text = list(base)
                text[7 * c] = "changed"
                out.write(json.dumps({"url": f"https://a.test/{g}/{c}", "text": " ".join(text)}) + "\n")
    return str(path)


def test_index_and_assign_ride_out_rejections(tight_node: Any, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    client = tight_node.client()
    url, index = tight_node.url, f"nd-429-{uuid.uuid4().hex[:8]}"
    source = pages(tmp_path / "pages.jsonl", 60)
    before = rejections(client)
    assert main(["es", "index", source, "--es-url", url, "--index", index, "--chunk-size", "500"]) == 0
    assert "180 documents written" in capsys.readouterr().err
    after_index = rejections(client)
    assert after_index > before  # the node did reject: the run rode it out
    assert main(["es", "groups", "--es-url", url, "--index", index, "--assign", "--chunk-size", "1000"]) == 0
    err = capsys.readouterr().err
    assert "group fields updated on 120 documents" in err, err
    engine = os.environ.get("NEARDUP_ENGINE", "elasticsearch")
    if engine == "elasticsearch" and int(client.info()["version"]["number"].split(".")[0]) >= 9:
        # Elasticsearch 9 weighs an update's whole document on the primary (max_primary_bytes) and rejects these
        # batches; Elasticsearch 8.19 and OpenSearch let them through: there the run only has to finish.
        assert rejections(client) > after_index
    duplicates = client.count(index=index, query={"term": {"neardup.status": "duplicate"}})["count"]
    assert duplicates == 120
    client.close()


def test_a_document_too_big_for_any_request_fails_the_run_in_one_line(
        tight_node: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url, index = tight_node.url, f"nd-429-{uuid.uuid4().hex[:8]}"
    records = [{"url": f"https://a.test/{i}", "text": f"small page {i} " * 50} for i in range(5)]
    records.append({"url": "https://a.test/huge", "text": "huge " * 400_000})  # 2 MB, over the 1 MB budget
    path = tmp_path / "huge.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["es", "index", str(path), "--es-url", url, "--index", index, "--chunk-size", "10"]) == 1
    err = capsys.readouterr().err
    assert "5 documents written" in err and "1 errors" in err, err
    # es_rejected_execution_exception on Elasticsearch, rejected_execution_exception on OpenSearch
    assert "rejected_execution_exception: 1 document(s), first https://a.test/huge" in err, err
    assert len(err) < 2000, err


def test_commands_that_would_do_nothing_say_so(es_client: Any, es_url: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    plain = f"nd-plain-{uuid.uuid4().hex[:8]}"
    for i in range(3):
        es_client.index(index=plain, document={"body": f"hello world {i}"})
    es_client.indices.refresh(index=plain)
    assert main(["es", "groups", "--es-url", es_url, "--index", plain]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert f"none of the 3 documents of index {plain} has a sketch" in line and "neardup es backfill" in line
    assert main(["es", "search", "--es-url", es_url, "--index", plain, "hello"]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert "no group ids (neardup.group)" in line and "--no-collapse" in line and "HTTP 400" not in line
    assert main(["es", "search", "--es-url", es_url, "--index", plain, "hello", "--no-collapse"]) == 0
    assert capsys.readouterr().out.count("score") == 3

    records = [{"url": f"https://a.test/{i}", "text": f"page {i} " * 40} for i in range(4)]
    path = tmp_path / "pages.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    index = f"nd-field-{uuid.uuid4().hex[:8]}"
    assert main(["es", "index", str(path), "--es-url", es_url, "--index", index, "--text-field", "body"]) == 1
    err = capsys.readouterr().err
    assert "no record has the text field 'body'" in err and "4 missing the text field" in err, err
    path.write_text(path.read_text() + json.dumps({"url": "https://a.test/b", "body": "a body " * 40}) + "\n")
    assert main(["es", "index", str(path), "--es-url", es_url, "--index", index, "--text-field", "body"]) == 0
    assert "4 of 5 records have no 'body' field" in capsys.readouterr().err
    es_client.indices.delete(index=f"{plain},{index}")


def test_index_writes_the_records_before_a_bad_line(es_client: Any, es_url: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    lines = [json.dumps({"url": f"https://a.test/{i}", "text": f"page {i} " * 40}) for i in range(5)]
    lines += ['{"url": "https://a.test/bad", "text": "unterminated', lines[0]]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    index = f"nd-bad-{uuid.uuid4().hex[:8]}"
    assert main(["es", "index", str(path), "--es-url", es_url, "--index", index]) == 1
    err = capsys.readouterr().err
    assert "5 documents written" in err, err
    assert "error: line 6: invalid JSON (Invalid control character at column 52)" in err, err
    assert "at at" not in err
    assert es_client.count(index=index)["count"] == 5
    es_client.indices.delete(index=index)


def test_the_documented_search_collapsed_snippet_works(es_client: Any, es_url: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from es_integration.collapse import search_collapsed

    text = " ".join(f"harbor bridge word{i}" for i in range(100))
    records = [{"url": f"https://a.test/{i}", "title": f"Harbor {i}", "text": text} for i in range(3)]
    path = tmp_path / "pages.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    index = f"nd-doc-{uuid.uuid4().hex[:8]}"
    assert main(["es", "index", str(path), "--es-url", es_url, "--index", index]) == 0
    assert main(["es", "groups", "--es-url", es_url, "--index", index, "--assign"]) == 0
    capsys.readouterr()
    # docs/elasticsearch/collapse.md, as written there
    for hit in search_collapsed(es_client, index, "harbor bridge", size=5, source=["url", "title"]):
        print(hit.source["title"], hit.source["url"], f"{hit.omitted} similar omitted" if hit.omitted else "")
    assert capsys.readouterr().out == "Harbor 0 https://a.test/0 2 similar omitted\n"
    es_client.indices.delete(index=index)


def test_a_search_index_meets_a_down_node_at_start_with_the_backends_retries() -> None:
    """The search index's writer and the crawler backend give a node that is down the same retries at start, so a
    crawl with both stops as fast whichever meets the node first."""
    from es_integration.backend import ElasticsearchBackend
    from es_integration.search_index import STARTUP_BACKOFF, STARTUP_RETRIES

    assert (ElasticsearchBackend.retries, ElasticsearchBackend.backoff) == (STARTUP_RETRIES, STARTUP_BACKOFF)


class _SinkEvents:
    """What a crawl gets from the search index's writer: counts and the pages it could not write."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.failures: list[tuple[str, str]] = []

    def count(self, name: str, value: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + value

    def failed(self, key: str, page: Any, kind: str, reason: str) -> None:
        assert page is not None and page.key == key
        self.failures.append((key, kind))


def test_the_search_index_writer_retries_refused_requests_then_reports_each_page(tight_node: Any) -> None:
    """A bulk request over the node's indexing budget is refused (HTTP 429) however often it is sent: the writer
    sends it again ``retries`` times (counted in ``search_retries``), then reports each of its pages failed,
    none lost; the same pages in batches under the budget are all written."""
    import asyncio

    from es_integration.connection import ConnectionSettings
    from es_integration.search_index import ElasticsearchSearchSink
    from scrapy_neardup.store.search_sink import SearchPage

    rng = random.Random(11)
    words = [f"w{i}" for i in range(5000)]
    texts = [" ".join(rng.choice(words) for _ in range(3000)) for _ in range(80)]  # ~17 KB each

    async def write(index: str, batch_size: int) -> _SinkEvents:
        sink = ElasticsearchSearchSink(ConnectionSettings.create(tight_node.url), index, batch_size=batch_size,
                                       retries=2)
        sink.backoff = 0.05
        events = _SinkEvents()
        await sink.open(events)
        for i, text in enumerate(texts):
            await sink.write(SearchPage(f"https://a.test/{i}", {"url": f"https://a.test/{i}", "text": text}))
        await sink.close()
        return events

    client = tight_node.client()
    refused, written = (f"nd-search-429-{uuid.uuid4().hex[:8]}" for _ in range(2))
    try:
        before = rejections(client)
        big = asyncio.run(write(refused, batch_size=len(texts)))  # one request of ~1.3 MB, over the 1 MB budget
        assert rejections(client) >= before + 3, big.counts  # the control: refused, and refused both retries
        assert big.counts.get("search_indexed", 0) == 0
        assert big.counts["search_retries"] == 2
        assert sorted(key for key, _ in big.failures) == sorted(f"https://a.test/{i}" for i in range(len(texts)))
        # es_rejected_execution_exception on Elasticsearch, rejected_execution_exception on OpenSearch
        assert {kind for _, kind in big.failures} <= {"es_rejected_execution_exception",
                                                      "rejected_execution_exception"}, big.failures[:3]
        assert big.counts["search_failed"] == len(texts)
        small = asyncio.run(write(written, batch_size=5))
        assert small.failures == [] and small.counts["search_indexed"] == len(texts)
        assert client.count(index=written)["count"] == len(texts)
    finally:
        for index in (refused, written):
            client.indices.delete(index=index, ignore_unavailable=True)
        client.close()
