"""The candidate searches of a round and what their hits say.

A page's candidates are the ``kept`` or ``pending`` documents sharing ``>= t`` of its ``k`` positions: from the
band query, verified on each hit's compact signature (one search for a whole batch when the union of its band
tokens allows it), or from the position query, which counts server-side. A hit or a real-time read then tells
whether its page is still being decided by a live crawler (:meth:`Searches.is_pending`; :meth:`Searches.read_settled`
waits for it) and, once settled, whether it is a kept candidate written before the page (:meth:`Searches.kept`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from scrapy_neardup.core.stored_signature import StoredSignature, decode_many, distinct_band_tokens, verified

from ..candidates import band_query, candidate_query, hit_signatures, ranked_band_query
from ..mapping import (
    F_BANDS,
    F_CRAWL,
    F_FINGERPRINT,
    F_KEY,
    F_SEQ,
    F_SIG,
    F_STATUS,
    F_TAG,
    F_WRITER,
    KEPT,
    PENDING,
    ROOT,
    TEXT_FIELDS,
    stored_sketched,
)
from ..retry import ItemsRefused, ShardsUnavailable
from .pages import _Candidate, _Page
from .sequencer import LATER
from .transport import _POLL_FIRST, _POLL_MAX

if TYPE_CHECKING:
    from scrapy_neardup.core.params import SketchParams

    from .transport import Transport

#: One logger for the package, under the name it had as one module: log filters and tests select it.
logger = logging.getLogger("es_integration.backend")

#: Raw hits of one page's band query at most (beyond, the ranked band query), and candidates of its position
#: query at most.
_CANDIDATES = 1000
#: Raw hits of a batch's one band query at most (beyond, one query per page).
_UNION_HITS = 10_000
#: Hits of a page's ranked band query (its band hits beyond :data:`_CANDIDATES`), each verified.
_RANKED = 10_000
#: What a real-time read of a page's own document (or of a pending candidate) returns.
OWN_SOURCE = [F_KEY, F_STATUS, F_SEQ, F_FINGERPRINT, F_SIG, F_WRITER, F_CRAWL, *TEXT_FIELDS]
#: What a candidate's ``_source`` is read for: its key, state, order, fingerprint and what of it was sketched.
_CANDIDATE_SOURCE = [F_KEY, F_STATUS, F_SEQ, F_FINGERPRINT, F_WRITER, *TEXT_FIELDS]


def _search_kwargs(body: dict[str, Any]) -> dict[str, Any]:
    """A search body as elasticsearch-py keyword arguments (``_source`` is ``source``)."""
    return {("source" if name == "_source" else name): value for name, value in body.items()}


class Searches:
    """Candidate searches of one index and what their hits say.

    Args:
        transport: the index's requests.
        params: ``k = params.num_perm`` positions, a candidate shares ``>= t = params.min_shared`` of them;
            only sketches tagged ``params.tag`` are searched.
        writer: this process's writer token: its own pending pages are never waited for.
        pending_timeout: seconds to wait for a page another process left ``pending`` before ignoring it.
    """

    def __init__(self, transport: Transport, params: SketchParams, *, writer: str, pending_timeout: float) -> None:
        self.transport = transport
        self.index = transport.index
        self.num_perm = params.num_perm
        self.min_shared = params.min_shared
        self.tag = params.tag
        self.writer = writer
        self.pending_timeout = pending_timeout
        #: candidates from the band query (else the position query); set when the index is opened
        self.bands = False
        #: (``_id``, ``_seq_no``) of pending documents of other crawlers no longer waited for
        self.abandoned: set[tuple[str, int | None]] = set()
        #: the order of other crawlers' batches whose pending pages this round met (writer token -> order)
        self.batch_orders: dict[str, int] = {}

    def order(self, doc: Mapping[str, Any]) -> int:
        """A document's place in the write order: its final ``seq``, else (pending) its batch's, from the
        batch's marker (:mod:`.sequencer`; after every batch with a marker when its marker is not known)."""
        source = doc.get("_source", {}).get(ROOT, {})
        if "seq" in source:
            return int(source["seq"])
        return self.batch_orders.get(str(source.get("writer", "")), LATER)

    def _search_body(
        self, stored: StoredSignature, exclude: str | None, *, positions: bool, ranked: bool = False
    ) -> dict[str, Any]:
        """The candidate search of one page (kept or pending documents; not ``exclude``, its own)."""
        statuses, exclude_ids = (KEPT, PENDING), [exclude] if exclude else []
        source = {"includes": _CANDIDATE_SOURCE}
        if positions:
            query = candidate_query(stored.tokens(), self.min_shared, self.tag, statuses=statuses,
                                    exclude_ids=exclude_ids)
            return {"query": query, "size": _CANDIDATES, "seq_no_primary_term": True, "_source": source,
                    "track_total_hits": False}
        make = ranked_band_query if ranked else band_query
        return {"query": make(stored, statuses=statuses, exclude_ids=exclude_ids),
                "size": _RANKED if ranked else _CANDIDATES, "seq_no_primary_term": True, "_source": source,
                "docvalue_fields": [{"field": F_SIG}], "track_total_hits": False}

    def _parse_hits(
        self, response: Mapping[str, Any], stored: StoredSignature, *, positions: bool
    ) -> list[tuple[dict[str, Any], int]] | None:
        """Candidates sharing ``>= t`` positions, with the count; ``None`` when the band query has
        :data:`_CANDIDATES` raw hits or more (then the ranked band query is used)."""
        raw: list[dict[str, Any]] = self._checked(response)["hits"]["hits"]
        if positions:
            if len(raw) >= _CANDIDATES:
                logger.warning("a page has %d or more kept candidates in %s; only those were compared", len(raw),
                               self.index)
            return [(hit, round(hit["_score"])) for hit in raw]
        if len(raw) >= _CANDIDATES:
            return None
        return self._verified(raw, stored)

    async def _search(self, stored: StoredSignature, exclude: str | None) -> list[tuple[dict[str, Any], int]]:
        """One page's candidates (kept or pending, sharing ``>= t`` positions) with their shared positions: the
        band query (verified on the hits' compact signatures) when :attr:`bands` allows it, else positions.
        A page with :data:`_CANDIDATES` band hits or more: up to :data:`_RANKED` of them, those sharing most
        bands first (the pages carry no position tokens to rank by)."""
        positions = not self.bands
        body = self._search_body(stored, exclude, positions=positions)
        response = await self.transport.es.search(index=self.index, **_search_kwargs(body))
        hits = self._parse_hits(response.body, stored, positions=positions)
        if hits is not None:
            return hits
        body = self._search_body(stored, exclude, positions=False, ranked=True)
        response = await self.transport.es.search(index=self.index, **_search_kwargs(body))
        raw: list[dict[str, Any]] = self._checked(response.body)["hits"]["hits"]
        if len(raw) >= _RANKED:
            logger.warning("a page shares bands with %d or more kept pages in %s; those sharing most were compared",
                           len(raw), self.index)
        return self._verified(raw, stored)

    def _verified(self, raw: list[dict[str, Any]], stored: StoredSignature) -> list[tuple[dict[str, Any], int]]:
        """The band hits sharing ``>= t`` positions with ``stored``, each with the count (on its compact signature)."""
        sigs, valid = hit_signatures(raw, self.num_perm)
        return [(raw[i], shared) for i, shared in verified(sigs, valid, stored.values, self.min_shared)]

    @staticmethod
    def _checked(response: Mapping[str, Any]) -> Mapping[str, Any]:
        """``response``, unless it failed or missed a shard (then retried: never read as "no candidate")."""
        if "error" in response:
            failed = f"a candidate search failed: {str(response['error'])[:200]}"
            # A search refused by a full queue (429) is an overloaded node, not a failover (es_integration.retry).
            raise ItemsRefused(failed) if response.get("status") == 429 else ShardsUnavailable(failed)
        shards = response["_shards"]
        if shards["successful"] < shards["total"]:
            raise ShardsUnavailable(f"the search reached {shards['successful']} of {shards['total']} shard(s)")
        return response

    async def search_many(
        self, stored: list[StoredSignature], exclude: list[str]
    ) -> list[list[tuple[dict[str, Any], int]]]:
        """:meth:`_search` for each page of a batch: one ``_search`` for one page, else one ``_msearch``."""
        if len(stored) == 1:
            return [await self._search(stored[0], exclude[0])]
        if self.bands:
            union = await self._search_union(stored, exclude)
            if union is not None:
                return union
        positions = not self.bands
        searches: list[dict[str, Any]] = []
        for one, own in zip(stored, exclude, strict=True):
            searches += [{"index": self.index}, self._search_body(one, own, positions=positions)]
        response = await self.transport.es.msearch(searches=searches)
        out: list[list[tuple[dict[str, Any], int]]] = []
        for one, own, answer in zip(stored, exclude, response["responses"], strict=True):
            hits = self._parse_hits(answer, one, positions=positions)
            out.append(hits if hits is not None else await self._search(one, own))
        return out

    async def _search_union(
        self, stored: list[StoredSignature], exclude: list[str]
    ) -> list[list[tuple[dict[str, Any], int]]] | None:
        """The candidates of every page of a batch from **one** band query (the union of their band tokens),
        each hit verified against each page on its compact signature: one search instead of one per page (the
        server's cost per search, not per term, dominates). ``None`` when the union has too many raw hits
        (then one search per page)."""
        size = min(_UNION_HITS, _CANDIDATES * len(stored))
        tokens = distinct_band_tokens(np.vstack([one.values for one in stored]))
        query = {"bool": {"filter": [{"term": {F_TAG: self.tag}}, {"terms": {F_BANDS: tokens}},
                                     {"terms": {F_STATUS: [KEPT, PENDING]}}]}}
        response = await self.transport.es.search(
            index=self.index, query=query, size=size, seq_no_primary_term=True,
            source={"includes": _CANDIDATE_SOURCE},
            docvalue_fields=[{"field": F_SIG}], track_total_hits=False,
        )
        shards = response["_shards"]
        if shards["successful"] < shards["total"]:
            raise ShardsUnavailable(f"the search reached {shards['successful']} of {shards['total']} shard(s)")
        raw: list[dict[str, Any]] = response["hits"]["hits"]
        if len(raw) >= size:
            return None
        if not raw:
            return [[] for _ in stored]
        sigs, valid = hit_signatures(raw, self.num_perm)  # decoded once for every page of the union
        ids = [hit["_id"] for hit in raw]
        return [[(raw[i], shared) for i, shared in verified(sigs, valid, one.values, self.min_shared) if ids[i] != own]
                for one, own in zip(stored, exclude, strict=True)]

    def is_pending(self, doc: Mapping[str, Any]) -> bool:
        """Whether ``doc`` (a hit or a real-time read) is a page still being decided by a live crawler."""
        source = doc.get("_source", {}).get(ROOT, {})
        if source.get("status") != PENDING:
            return False
        if str(source.get("writer", "")).startswith(self.writer):
            return False  # ours, from a failed check: it never settles
        return (doc["_id"], doc.get("_seq_no")) not in self.abandoned

    def waits_for(self, doc: Mapping[str, Any]) -> bool:
        """Whether ``doc`` (a hit or a real-time read) exists and is pending with a live writer."""
        return bool(doc.get("found", True)) and self.is_pending(doc)

    def kept(
        self, hits: list[tuple[dict[str, Any], int]], settled: dict[str, dict[str, Any]], page: _Page,
        *, before: int | None,
    ) -> list[_Candidate]:
        """The kept candidates among a page's hits (pending ones replaced by their settled read; only those
        written before ``before`` when given); shared positions recounted on what was read."""
        out: list[_Candidate] = []
        for hit, shared in hits:
            doc = settled.get(hit["_id"], hit)
            if not doc.get("found", True) or "_source" not in doc:
                continue
            source = doc["_source"][ROOT]
            if source.get("status") != KEPT:
                continue
            if before is not None and self.order(hit) >= before:
                continue  # written after the page: the page is a candidate of its check, not the reverse
            order = self.order(doc)
            if before is not None and order >= before:
                continue
            if doc is not hit:  # settled since the search: its content may have been replaced (a recrawl)
                values, valid = decode_many([source.get("sig")], self.num_perm)
                if valid[0]:
                    found = verified(values, valid, page.stored.values, self.min_shared)
                    if not found:
                        continue
                    shared = found[0][1]
                elif shared < self.min_shared:
                    continue
            out.append(_Candidate(hit["_id"], str(source.get("key", hit["_id"])), shared,
                                  source.get("fingerprint") == page.fingerprint, order, stored_sketched(source)))
        return out

    async def read_settled(self, ids: set[str], *, wait: bool = True) -> dict[str, dict[str, Any]]:
        """Real-time reads of ``ids`` polled until none is pending with a live writer; those still pending after
        ``pending_timeout`` are abandoned (a warning is logged) and returned as read. With ``wait=False``, one
        read, whatever it finds."""
        out: dict[str, dict[str, Any]] = {}
        todo = set(ids)
        deadline = time.monotonic() + self.pending_timeout
        delay = _POLL_FIRST
        while todo:
            docs = await self.transport.call("reading pending pages", self.transport.mget, sorted(todo), OWN_SOURCE)
            for doc in docs:
                if "error" in doc:  # its shard copy failed (e.g. a failover): still pending for us
                    continue
                out[doc["_id"]] = doc
                if not self.waits_for(doc):
                    todo.discard(doc["_id"])
            if not todo or not wait:
                break
            if time.monotonic() >= deadline:
                logger.warning(
                    "ignoring %d page(s) left pending for over %.0fs in %s (a crawler stopped mid-check?)",
                    len(todo), self.pending_timeout, self.index,
                )
                self.abandoned.update((i, out[i].get("_seq_no")) for i in todo if i in out)
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, _POLL_MAX)
        return out
