"""The mirror-host counts of a fleet of crawlers, shared through a small sibling index of the backend's.

Design notes: docs/architecture.md#es_integrationhosts
"""

from __future__ import annotations

import dataclasses
import logging
import os
import uuid
from typing import TYPE_CHECKING, Any

from scrapy_neardup.core.mirror_table import HostCounts, HostStore
from scrapy_neardup.errors import EsError

from .client import ConnectionSettings, connect_async
from .mapping import REPLICA_SETTINGS, create_missing_steps
from .names import validate_index_name
from .steps import run_async

if TYPE_CHECKING:
    from elasticsearch import AsyncElasticsearch


logger = logging.getLogger(__name__)

#: The sibling index of backend index ``I`` is ``I`` + this.
HOSTS_SUFFIX = "-hosts"
#: Buckets per page of a composite aggregation.
_PAGE = 1000
#: Upper bound of one request's timeout (seconds): a sync never hangs on a stalled node for long.
_TIMEOUT = 5.0
HOST, PAIR = "host", "pair"


def hosts_index(index: str) -> str:
    """The mirror-count index that goes with backend index ``index``."""
    return validate_index_name(index + HOSTS_SUFFIX)


def hosts_mappings() -> dict[str, Any]:
    """Mapping of the mirror-count index (see the module doc)."""
    keyword = {"type": "keyword"}
    return {"dynamic": "strict", "properties": {
        "kind": keyword, "process": keyword, "host": keyword, "other": keyword,
        "checked": {"type": "long"}, "copies": {"type": "long"}, "first_seen": {"type": "double"},
    }}


async def ensure_hosts_index_async(client: AsyncElasticsearch, index: str) -> bool:
    """Create the mirror-count index when missing (one primary shard, the project's replica rule); a race
    with another creator is fine. True when this call created it."""
    return await run_async(client, create_missing_steps(
        index, {"mappings": hosts_mappings(), "settings": {**REPLICA_SETTINGS, "number_of_shards": 1}}))


class ElasticsearchHostStore(HostStore):
    """A :class:`~scrapy_neardup.core.mirror_table.HostStore` in index ``index`` (see the module doc).

    Args:
        settings: where and how to connect (the backend's); the request timeout is capped at 5 s.
        index: the mirror-count index (:func:`hosts_index` of the backend's index).
        process: this process's id in the documents (default: ``<pid>-<random>``).
    """

    def __init__(self, settings: ConnectionSettings, index: str, *, process: str | None = None) -> None:
        self.settings = dataclasses.replace(settings, request_timeout=min(settings.request_timeout, _TIMEOUT))
        self.index = validate_index_name(index)
        self.process = process or f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._client: AsyncElasticsearch | None = None
        # What the store holds of this process (document id -> source), so a push writes only what changed.
        self._pushed: dict[str, dict[str, Any]] = {}

    def __repr__(self) -> str:
        return f"ElasticsearchHostStore(url={self.settings.url!r}, index={self.index!r}, process={self.process!r})"

    async def open(self) -> None:
        if self._client is None:
            client = await connect_async(self.settings, max_retries=0, retry_on_timeout=False)
            try:
                await ensure_hosts_index_async(client, self.index)
            except BaseException:
                await client.close()
                raise
            self._client = client

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    @property
    def _es(self) -> AsyncElasticsearch:
        if self._client is None:
            raise RuntimeError("ElasticsearchHostStore used before open() or after close()")
        return self._client

    async def push(self, counts: HostCounts) -> None:
        """Overwrite this process's documents whose counts changed (one bulk request), then refresh."""
        docs: dict[str, dict[str, Any]] = {}
        # Every host met, checked or not: "first seen" is the fleet's earliest meeting.
        for host in counts.first_seen.keys() | counts.checked.keys():
            docs[f"{self.process}:{host}"] = {"kind": HOST, "process": self.process, "host": host,
                                              "checked": counts.checked.get(host, 0),
                                              "first_seen": counts.first_seen.get(host)}
        for (b, a), copies in counts.twins.items():
            docs[f"{self.process}:{b}:{a}"] = {"kind": PAIR, "process": self.process, "host": b, "other": a,
                                               "copies": copies}
        changed = {doc_id: doc for doc_id, doc in docs.items() if self._pushed.get(doc_id) != doc}
        if not changed:
            return
        operations: list[dict[str, Any]] = []
        for doc_id, doc in changed.items():
            operations += [{"index": {"_index": self.index, "_id": doc_id}}, doc]
        response = (await self._es.bulk(operations=operations, refresh=True)).body
        if response.get("errors"):
            failed = [item["index"] for item in response["items"] if "error" in item["index"]]
            raise EsError(f"writing mirror counts to {self.index}: {len(failed)} of {len(changed)} documents "
                          f"refused ({failed[0]['error'].get('reason', failed[0]['error'])})")
        self._pushed.update(changed)

    async def pull(self) -> HostCounts:
        """The sums over the other processes' documents (see the module doc)."""
        totals = HostCounts()
        async for key, bucket in self._buckets(HOST, ["host"], {"checked": {"sum": {"field": "checked"}},
                                                                "first_seen": {"min": {"field": "first_seen"}}}):
            host = key["host"]
            totals.checked[host] = round(bucket["checked"]["value"] or 0)
            if bucket["first_seen"]["value"] is not None:
                totals.first_seen[host] = float(bucket["first_seen"]["value"])
        async for key, bucket in self._buckets(PAIR, ["host", "other"], {"copies": {"sum": {"field": "copies"}}}):
            totals.twins[(key["host"], key["other"])] = round(bucket["copies"]["value"] or 0)
        return totals

    async def _buckets(self, kind: str, fields: list[str], metrics: dict[str, Any]) -> Any:
        """Every bucket of a composite aggregation over ``fields`` of the other processes' ``kind`` documents."""
        query = {"bool": {"filter": [{"term": {"kind": kind}}],
                          "must_not": [{"term": {"process": self.process}}]}}
        after: dict[str, Any] | None = None
        while True:
            composite: dict[str, Any] = {"size": _PAGE, "sources": [{f: {"terms": {"field": f}}} for f in fields]}
            if after is not None:
                composite["after"] = after
            response = await self._es.search(index=self.index, size=0, query=query,
                                             aggs={"by": {"composite": composite, "aggs": metrics}})
            shards = response["_shards"]
            if shards["successful"] < shards["total"]:
                raise EsError(f"reading mirror counts from {self.index}: {shards['successful']} of "
                              f"{shards['total']} shard(s) answered")
            by = response["aggregations"]["by"]
            for bucket in by["buckets"]:
                yield bucket["key"], bucket
            after = by.get("after_key")
            if after is None or len(by["buckets"]) < _PAGE:
                return
