"""The near-duplicate mapping: index template, mapping of new and existing indices, strictness."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from elasticsearch import BadRequestError, Elasticsearch

from es_integration.mapping import (
    COMPONENT_TEMPLATE,
    ensure_index,
    put_index_template,
    sketch_fields,
)
from scrapy_neardup.core.sketch import Sketcher
from scrapy_neardup.errors import EsError

pytestmark = pytest.mark.es

EXPECTED_TYPES = {
    "positions": "keyword",
    "sig": "binary",
    "bands": "keyword",
    "fingerprint": "keyword",
    "tag": "keyword",
    "empty": "boolean",
    "seq": "long",
    "writer": "keyword",
    "crawl": "keyword",
    "group": "keyword",
    "status": "keyword",
    "duplicate_of": "keyword",
    "shared": "integer",
    "key": "keyword",
    "sketched": "keyword",
    "words": "integer",
    "page_words": "integer",
}


@pytest.fixture
def index_name(es_client: Elasticsearch) -> Iterator[str]:
    name = f"nd-map-{uuid.uuid4().hex[:10]}"
    yield name
    es_client.indices.delete(index=name, ignore_unavailable=True)


def _neardup_mapping(es: Elasticsearch, index: str) -> dict[str, Any]:
    mapping = es.indices.get_mapping(index=index)[index]["mappings"]
    return dict(mapping["properties"]["neardup"])


def _check_neardup_mapping(mapping: dict[str, Any]) -> None:
    props = mapping["properties"]
    assert {name: spec["type"] for name, spec in props.items()} == EXPECTED_TYPES
    assert props["positions"].get("doc_values") is False  # term queries only
    assert props["bands"].get("doc_values") is False
    assert props["sig"].get("doc_values") is True  # read by the group sweep without _source
    assert props["group"].get("doc_values", True) is True  # collapse needs doc values
    # What was sketched of a page: read as doc values by the evidence of collapse, never searched.
    assert all(props[name].get("index") is False and props[name].get("doc_values", True)
               for name in ("sketched", "words", "page_words"))
    assert mapping.get("dynamic") == "strict"


def test_index_template_applies_to_new_indices(es_client: Elasticsearch) -> None:
    prefix = f"nd-tpl-{uuid.uuid4().hex[:8]}"
    template = f"neardup-test-{prefix}"
    put_index_template(es_client, [f"{prefix}-*"], name=template)
    try:
        es_client.indices.create(index=f"{prefix}-pages")  # no mapping given: the template provides it
        _check_neardup_mapping(_neardup_mapping(es_client, f"{prefix}-pages"))
        es_client.indices.create(index=f"other-{prefix}")
        mapping = es_client.indices.get_mapping(index=f"other-{prefix}")[f"other-{prefix}"]["mappings"]
        assert "neardup" not in mapping.get("properties", {})
    finally:
        es_client.indices.delete(index=f"{prefix}-pages,other-{prefix}", ignore_unavailable=True)
        es_client.indices.delete_index_template(name=template)
    assert es_client.cluster.exists_component_template(name=COMPONENT_TEMPLATE)


def test_ensure_index_creates_and_extends(es_client: Elasticsearch, index_name: str) -> None:
    assert ensure_index(es_client, index_name, shards=1) is True
    _check_neardup_mapping(_neardup_mapping(es_client, index_name))
    assert ensure_index(es_client, index_name) is False  # idempotent

    existing = index_name + "-plain"
    es_client.index(index=existing, id="1", document={"text": "hello world"}, refresh=True)
    try:
        assert ensure_index(es_client, existing) is False
        _check_neardup_mapping(_neardup_mapping(es_client, existing))
        assert es_client.get(index=existing, id="1")["_source"] == {"text": "hello world"}
    finally:
        es_client.indices.delete(index=existing)


def test_conflicting_existing_mapping_is_a_clear_error(es_client: Elasticsearch, index_name: str) -> None:
    es_client.indices.create(index=index_name, mappings={"properties": {"neardup": {"type": "keyword"}}})
    with pytest.raises(EsError) as info:
        ensure_index(es_client, index_name)
    assert index_name in str(info.value) and "neardup" in str(info.value)


def test_sketch_fields_are_strict_and_searchable(es_client: Elasticsearch, index_name: str) -> None:
    ensure_index(es_client, index_name)
    sketch = Sketcher().sketch("one two three four five six seven eight nine ten")
    doc = {"text": "x", "neardup": sketch_fields(sketch, seq=1, group="a", status="kept")}
    es_client.index(index=index_name, id="a", document=doc, refresh=True)
    stored = es_client.get(index=index_name, id="a")["_source"]["neardup"]
    assert len(stored["positions"]) == 128 and stored["fingerprint"] == f"{sketch.fingerprint:016x}"
    assert es_client.count(index=index_name, query={"term": {"neardup.positions": stored["positions"][5]}})[
        "count"
    ] == 1
    with pytest.raises(BadRequestError) as info:
        es_client.index(index=index_name, id="b", document={"neardup": {"typo_field": 1}})
    assert "strict_dynamic_mapping_exception" in str(info.value)
    hits = es_client.search(
        index=index_name, query={"match_all": {}}, collapse={"field": "neardup.group"}
    )["hits"]["hits"]
    assert [h["_id"] for h in hits] == ["a"]
