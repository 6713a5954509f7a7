"""The node of the search index becomes unreachable in the middle of a crawl (NEARDUP_SEARCH_INDEX).

The crawl reaches the node through :class:`test_es_faults.FaultProxy`; once some of its items are in the index,
the proxy refuses every connection (accept and reset: a node gone). The items after that are retried
(NEARDUP_SEARCH_RETRIES), then recorded in NEARDUP_SEARCH_FAILED_FILE; the crawl goes on, closes with reason
``neardup_search_failed`` and exit status 1. Every item of the crawl is either in the index or in the file: none
is lost.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from reliability_kit import Ledger
from test_es_faults import FaultProxy, HookSite, group_pages, run_in_thread, wait_for

from es_integration.backend import doc_id_of

pytestmark = pytest.mark.es


def test_node_unreachable_mid_crawl_items_retried_then_recorded(
    es_url: str, es_client: Any, tmp_path: Path, ledger: Ledger,
) -> None:
    index = f"search-outage-{uuid.uuid4().hex[:10]}"
    target = es_url.split("://", 1)[1].split(",")[0]
    host, port = target.rsplit(":", 1)
    proxy = FaultProxy((host, int(port)))
    cut_at = 25

    def written() -> int:
        if not es_client.indices.exists(index=index):
            return 0
        es_client.indices.refresh(index=index)
        return int(es_client.count(index=index)["count"])

    def hook(n: int) -> None:
        if n == cut_at:  # some items are in the index, then the node is gone for the rest of the crawl
            wait_for(lambda: written() >= 5, 30, "the first documents")
            proxy.set(mode="refuse")

    pages = group_pages()
    site = HookSite(pages, delay=0.1, hook=hook)
    failed_file = tmp_path / "failed.jl"
    settings = {
        "ADDONS": {"scrapy_neardup.NearDuplicateAddon": 0}, "NEARDUP_SOFT404_ENABLED": False,
        "NEARDUP_ES_URL": proxy.url, "NEARDUP_SEARCH_INDEX": index, "NEARDUP_SEARCH_DUPLICATES": "index",
        "NEARDUP_SEARCH_BATCH_SIZE": 5, "NEARDUP_SEARCH_RETRIES": 2, "NEARDUP_SEARCH_FAILED_FILE": str(failed_file),
        "CONCURRENT_REQUESTS": 1, "LOG_LEVEL": "INFO",
    }
    try:
        thread, box = run_in_thread(tmp_path, settings=settings, spider={"start_url": site.url + "/"}, name="cut")
        thread.join(170)
        assert not thread.is_alive(), "crawl did not finish"
    finally:
        site.stop()
        proxy.close()
    try:
        assert "error" not in box, box.get("error")
        result = box["result"]
        assert result.returncode == 1, result.log[-3000:]
        assert result.data["finish_reason"] == "neardup_search_failed"
        items = {item["url"] for item in result.scraped} | {
            d["item"]["url"] for d in result.dropped if d["reason"] == "NearDuplicateDropped"}
        assert len(items) == len(pages) + 1  # the control: every page (and the index page) became an item to write
        es_client.indices.refresh(index=index)
        hits = es_client.search(index=index, size=1000, source=["url"])["hits"]["hits"]
        in_index = {hit["_source"]["url"] for hit in hits}
        assert all(hit["_id"] == doc_id_of(hit["_source"]["url"]) for hit in hits)
        records = [json.loads(line) for line in failed_file.read_text().splitlines()]
        recorded = {record["item"]["url"] for record in records}
        assert {record["error"] for record in records} == {"connection_error"}
        assert all(record["key"] == record["item"]["url"] and record["status"] in ("kept", "duplicate")
                   for record in records)
        lost = items - in_index - recorded
        assert not lost and not in_index & recorded
        assert len(in_index) >= 5 and recorded
        assert result.stat("neardup/search_failed") == result.stat("neardup/search_failed/connection_error") == len(
            records)
        assert result.stat("neardup/search_indexed") == len(in_index)
        assert result.stat("neardup/search_retries") >= 2
        assert (f"the crawl ends with a non-zero exit status: {len(records)} items could not be written to search "
                f"index {index} (recorded in {failed_file})") in result.log
        errors = [line for line in result.log.splitlines() if "ERROR" in line and "could not write" in line]
        assert len(errors) == 1 and "connection_error" in errors[0]
        ledger.record(f"search-index node unreachable after {len(in_index)} of {len(items)} items", len(lost),
                      written=len(in_index), recorded=len(records))
    finally:
        es_client.indices.delete(index=index, ignore_unavailable=True)
