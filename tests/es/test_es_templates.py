"""Host templates through Elasticsearch: batch jobs learn them over their input, save them beside the index, and
every later job on the index (and every crawler) sketches a host's pages under the same one."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from elasticsearch import Elasticsearch

from scrapy_neardup.cli.main import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scrapy"))

from neardup_testkit import template_site  # noqa: E402

pytestmark = pytest.mark.es


@pytest.fixture
def index(es_client: Elasticsearch) -> Iterator[str]:
    name = f"nd-templates-{uuid.uuid4().hex[:10]}"
    yield name
    es_client.indices.delete(index=f"{name},{name}-templates", ignore_unavailable=True)


def test_index_learns_the_hosts_templates_and_backfill_reuses_them(
    es_client: Elasticsearch, es_url: str, index: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    site = template_site()
    host = "http://docs.example"
    records = tmp_path / "pages.jsonl"
    records.write_text("".join(json.dumps({"id": path, "url": host + path, "text": page.body}) + "\n"
                               for path, page in site.pages.items()))
    assert main(["es", "index", "--es-url", es_url, "--index", index, str(records), "--no-progress"]) == 0
    es_client.indices.refresh(index=f"{index}-templates")  # searches see what a refresh made visible
    saved = es_client.search(index=f"{index}-templates", query={"match_all": {}})["hits"]["hits"]
    assert [hit["_source"]["host"] for hit in saved] == [host + ":80"]  # scheme, host and port
    assert saved[0]["_source"]["pages"] == len(site.pages)
    first = _fingerprints(es_client, index)
    # Each copy and its original have the same own text: the template took the sidebars out.
    assert all(first[copy] == first[original] for copy, original in site.original_of.items())
    assert len(set(first.values())) == len(site.distinct)

    # Re-sketching the index reuses the saved template (it is not learned again from what the sweep sees).
    for doc_id in site.distinct[:20]:  # the sweep sees fewer pages than the index run learned from
        es_client.delete(index=index, id=doc_id)
    es_client.indices.refresh(index=index)
    assert main(["es", "backfill", "--es-url", es_url, "--index", index, "--text-field", "text", "--force",
                 "--no-progress"]) == 0
    again = _fingerprints(es_client, index)
    assert again == {key: value for key, value in first.items() if key not in site.distinct[:20]}
    capsys.readouterr()


def _fingerprints(client: Elasticsearch, index: str) -> dict[str, Any]:
    hits = client.search(index=index, size=1000, source=["neardup.fingerprint"])["hits"]["hits"]
    return {hit["_id"]: hit["_source"]["neardup"]["fingerprint"] for hit in hits}
