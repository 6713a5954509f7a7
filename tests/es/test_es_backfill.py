"""Backfill: an index holding only text gets its sketches in place (point-in-time sweep, bulk updates)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from elasticsearch import Elasticsearch

from es_integration.candidates import find_candidates
from es_integration.groups import find_groups
from es_integration.indexing import backfill
from es_integration.mapping import position_tokens
from es_integration.opensearch_adapter import bulk_helpers
from scrapy_neardup.cli.main import main
from scrapy_neardup.core.params import SketchParams
from scrapy_neardup.core.sketch import Sketcher
from scrapy_neardup.core.theory import min_shared_for

pytestmark = pytest.mark.es

T = min_shared_for(0.9, 128)


def text_only_docs(seed: int) -> dict[str, dict[str, Any]]:
    rng = random.Random(seed)
    docs: dict[str, dict[str, Any]] = {}
    for i in range(120):
        words = [f"w{rng.randrange(50_000)}" for _ in range(200)]
        docs[f"d{i}"] = {"page": {"body": " ".join(words)}, "n": i}
        if i % 4 == 0:
            words[rng.randrange(200)] = "changed"
            docs[f"d{i}-near"] = {"page": {"body": " ".join(words)}, "n": i}
    docs["no-body"] = {"page": {"title": "nothing to sketch"}}
    docs["numeric-body"] = {"page": {"body": 42}}
    docs["html-body"] = {"page": {"body": "<html><body><p>" + docs["d1"]["page"]["body"] + "</p></body></html>"}}
    return docs


@pytest.fixture
def text_index(es_client: Elasticsearch) -> Iterator[tuple[str, dict[str, dict[str, Any]]]]:
    index = f"nd-backfill-{uuid.uuid4().hex[:10]}"
    docs = text_only_docs(seed=3)
    actions = ({"_index": index, "_id": key, "_source": doc} for key, doc in docs.items())
    bulk_helpers(es_client).bulk(es_client, actions, refresh=True)
    yield index, docs
    es_client.indices.delete(index=index, ignore_unavailable=True)


def test_backfill_cli_sketches_every_document(
    es_client: Elasticsearch, es_url: str, text_index: tuple[str, dict[str, dict[str, Any]]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    index, docs = text_index
    mapping = es_client.indices.get_mapping(index=index)[index]["mappings"]
    assert "neardup" not in mapping["properties"]
    assert main(["es", "backfill", "--es-url", es_url, "--index", index, "--text-field", "page.body"]) == 0
    err = capsys.readouterr().err
    assert f"{len(docs)} documents written (2 without text), 0 errors" in err

    sketcher = Sketcher()
    hits = es_client.search(index=index, size=1000)["hits"]["hits"]
    assert len(hits) == len(docs)
    for hit in hits:
        source, original = hit["_source"], docs[hit["_id"]]
        assert {k: v for k, v in source.items() if k != "neardup"} == original  # the page is untouched
        fields = source["neardup"]
        assert fields["tag"] == sketcher.tag and fields["group"] == hit["_id"] and fields["status"] == "kept"
        body = original["page"].get("body")
        if isinstance(body, str):
            sketch = sketcher.sketch(body)
            assert fields["positions"] == position_tokens(sketch.signature)
            assert fields["fingerprint"] == f"{sketch.fingerprint:016x}" and fields["empty"] is False
        else:
            assert fields["empty"] is True and not fields.get("positions")

    # Sketches are comparable with freshly made ones, and the HTML copy is an exact duplicate of its text.
    found = find_candidates(es_client, index, sketcher.sketch(docs["d0"]["page"]["body"]), T)
    assert {c.id for c in found} == {"d0", "d0-near"}
    exact = find_candidates(es_client, index, sketcher.sketch(docs["d1"]["page"]["body"]), T)
    assert [(c.id, c.exact) for c in exact] == [("d1", True), ("html-body", True)]
    report = find_groups(es_client, index, SketchParams.from_tag(sketcher.tag, min_shared=T))
    assert sorted(sorted(g.members) for g in report.groups) == sorted(
        [["d1", "html-body"]] + [[f"d{i}", f"d{i}-near"] for i in range(0, 120, 4)]
    )

    # Nothing left to do on a second run; --force re-sketches all.
    assert backfill(es_client, index, sketcher, text_field="page.body").indexed == 0
    assert backfill(es_client, index, sketcher, text_field="page.body", force=True).indexed == len(docs)
    # Another tag (other parameters) is a fresh backfill.
    other = Sketcher(seed=5)
    stats = backfill(es_client, index, other, text_field="page.body")
    assert stats.indexed == len(docs) and stats.errors == 0
    tags = es_client.search(index=index, size=0, aggs={"t": {"terms": {"field": "neardup.tag"}}})
    assert [b["key"] for b in tags["aggregations"]["t"]["buckets"]] == [other.tag]


def test_backfill_rejects_bad_names(es_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["es", "backfill", "--es-url", es_url, "--index", "x", "--text-field", "_source"]) == 1
    assert "must not start with '_'" in capsys.readouterr().err
    assert main(["es", "backfill", "--es-url", es_url, "--index", "x", "--text-field", "body*"]) == 1
    assert "wildcards" in capsys.readouterr().err
