"""Candidate queries: every indexed page sharing at least t of k signature positions with a sketch.

Design notes: docs/architecture.md#es_integrationcandidates
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from scrapy_neardup.core.match import Match, best_first
from scrapy_neardup.core.sketch import Sketch
from scrapy_neardup.core.stored_signature import StoredSignature, band_layout, decode_many, verified

from .mapping import (
    F_BANDS,
    F_EMPTY,
    F_FINGERPRINT,
    F_POSITIONS,
    F_SEQ,
    F_SIG,
    F_STATUS,
    F_TAG,
    fingerprint_hex,
    position_tokens,
)
from .names import validate_index_name

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch

__all__ = [
    "Candidate",
    "candidate_query",
    "candidate_search",
    "find_candidates",
    "find_exact_duplicates",
    "parse_candidates",
    "band_query",
    "band_search",
    "parse_band_candidates",
    "rank",
]

logger = logging.getLogger(__name__)

#: Hits fetched per candidate query by default (a page rarely has more near-duplicates than this).
DEFAULT_SIZE = 100
#: Raw hits fetched by a band query (before verification); more fall back to the position query.
DEFAULT_BAND_HITS = 1000


@dataclass(frozen=True, slots=True)
class Candidate:
    """An indexed page near-duplicating the query sketch.

    Attributes:
        id: the document's ``_id``.
        index: the index holding it.
        shared: signature positions it shares with the query sketch (``>= t``).
        resemblance: ``shared / k``.
        exact: equal fingerprints (identical normalized text).
        seq: its ``neardup.seq`` (indexing order), if stored.
        source: its ``_source`` (as filtered by the query), if fetched.
    """

    id: str
    index: str
    shared: int
    resemblance: float
    exact: bool
    seq: int | None = None
    source: dict[str, Any] | None = None

    def to_match(self) -> Match:
        """The core :class:`~scrapy_neardup.core.match.Match` (key = ``_id``)."""
        return Match(key=self.id, shared=self.shared, resemblance=self.resemblance, exact=self.exact)


def rank(candidates: Sequence[Candidate]) -> list[Candidate]:
    """``candidates`` best first, by the one ranking of matches (:func:`~scrapy_neardup.core.match.best_first`):
    exact duplicates, then most shared positions, then earliest indexed (``neardup.seq``), then ``_id``."""
    if not candidates:
        return []
    order = best_first(
        [c.exact for c in candidates], [c.shared for c in candidates],
        [math.inf if c.seq is None else c.seq for c in candidates], [c.id for c in candidates],
    )
    return [candidates[i] for i in order.tolist()]


def candidate_query(
    tokens: Sequence[str],
    min_shared: int,
    tag: str,
    *,
    statuses: Sequence[str] = (),
    exclude_ids: Sequence[str] = (),
    scored: bool = True,
) -> dict[str, Any]:
    """The t-of-k query for a signature's position tokens.

    Args:
        tokens: the sketch's ``"i_v"`` tokens (:func:`~es_integration.mapping.position_tokens`).
        min_shared: ``t``; hits share at least this many positions.
        tag: only documents with this parameter tag are candidates.
        statuses: if given, only documents whose ``neardup.status`` is one of these.
        exclude_ids: ``_id`` values never returned (e.g. the query page itself).
        scored: ``True``: score = shared positions (constant-score clauses). ``False``: the whole query in
            filter context (no scores; cheaper when only the ids matter).
    """
    if not 1 <= min_shared <= len(tokens):
        raise ValueError(f"min_shared must lie in [1, {len(tokens)}], got {min_shared}")
    filters: list[dict[str, Any]] = [{"term": {F_TAG: tag}}]
    if statuses:
        filters.append({"terms": {F_STATUS: list(statuses)}})
    must_not: list[dict[str, Any]] = [{"ids": {"values": list(exclude_ids)}}] if exclude_ids else []
    if scored:
        should = [{"constant_score": {"filter": {"term": {F_POSITIONS: t}}, "boost": 1.0}} for t in tokens]
        body: dict[str, Any] = {"filter": filters, "should": should, "minimum_should_match": min_shared}
    else:
        should = [{"term": {F_POSITIONS: t}} for t in tokens]
        body = {"filter": [*filters, {"bool": {"should": should, "minimum_should_match": min_shared}}]}
    if must_not:
        body["must_not"] = must_not
    return {"bool": body}


def candidate_search(
    sketch: Sketch,
    min_shared: int,
    *,
    size: int = DEFAULT_SIZE,
    statuses: Sequence[str] = (),
    exclude_ids: Sequence[str] = (),
    source: bool | list[str] = False,
) -> dict[str, Any]:
    """A search body returning the candidates of ``sketch``, most shared positions first (for ``msearch``);
    :func:`parse_candidates` ranks them fully (ties on shared positions are broken client-side)."""
    return {
        "query": candidate_query(
            position_tokens(sketch.signature), min_shared, sketch.tag, statuses=statuses, exclude_ids=exclude_ids
        ),
        "size": size,
        "_source": source,
        "docvalue_fields": [F_FINGERPRINT, F_SEQ],
        "track_total_hits": False,
    }


def parse_candidates(response: Mapping[str, Any], sketch: Sketch) -> list[Candidate]:
    """Candidates from a search response of :func:`candidate_search`, best first (:func:`rank`)."""
    k = sketch.num_perm
    fingerprint = fingerprint_hex(sketch.fingerprint)
    found = []
    for hit in response["hits"]["hits"]:
        fields = hit.get("fields", {})
        shared = round(hit["_score"])
        seqs = fields.get(F_SEQ)
        found.append(
            Candidate(
                id=hit["_id"],
                index=hit["_index"],
                shared=shared,
                resemblance=shared / k,
                exact=fields.get(F_FINGERPRINT, [None])[0] == fingerprint,
                seq=int(seqs[0]) if seqs else None,
                source=hit.get("_source"),
            )
        )
    return rank(found)


def band_query(
    stored: StoredSignature,
    *,
    statuses: Sequence[str] = (),
    exclude_ids: Sequence[str] = (),
) -> dict[str, Any]:
    """The band query: documents with the same tag sharing at least one band token with ``stored`` (a superset
    of those sharing ``>= t0`` positions; see the module doc). Filter context only: no scores."""
    filters: list[dict[str, Any]] = [{"term": {F_TAG: stored.tag}}, {"terms": {F_BANDS: stored.band_tokens()}}]
    if statuses:
        filters.append({"terms": {F_STATUS: list(statuses)}})
    body: dict[str, Any] = {"filter": filters}
    if exclude_ids:
        body["must_not"] = [{"ids": {"values": list(exclude_ids)}}]
    return {"bool": body}


def ranked_band_query(
    stored: StoredSignature,
    *,
    statuses: Sequence[str] = (),
    exclude_ids: Sequence[str] = (),
) -> dict[str, Any]:
    """:func:`band_query` scoring each document by the number of band tokens it shares with ``stored``.

    For an index without position tokens, when a page has more band hits than one search returns: the hits
    sharing most bands come first. Sharing ``j`` of the ``b`` bands means at least ``j * r`` equal positions
    (``r`` positions a band), so a document sharing ``>= t`` positions ranks among the first unless more than a
    search's worth of documents share more bands with the page (each then verified on its signature).
    """
    query = band_query(stored, statuses=statuses, exclude_ids=exclude_ids)
    body = query["bool"]
    body["filter"] = [f for f in body["filter"] if F_BANDS not in f.get("terms", {})]
    body["should"] = [{"constant_score": {"filter": {"term": {F_BANDS: token}}, "boost": 1.0}}
                      for token in stored.band_tokens()]
    body["minimum_should_match"] = 1
    return query


def band_search(
    stored: StoredSignature,
    *,
    size: int = DEFAULT_BAND_HITS,
    statuses: Sequence[str] = (),
    exclude_ids: Sequence[str] = (),
    source: bool | list[str] = False,
) -> dict[str, Any]:
    """A search body of :func:`band_query` returning each hit's compact signature, fingerprint and seq."""
    return {
        "query": band_query(stored, statuses=statuses, exclude_ids=exclude_ids),
        "size": size,
        "_source": source,
        "docvalue_fields": [F_SIG, F_FINGERPRINT, F_SEQ],
        "track_total_hits": False,
    }


def hit_signatures(hits: Sequence[Mapping[str, Any]], num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    """The compact signatures (``neardup.sig`` doc values) of search hits, decoded: ``(uint16[n, k], valid[n])``."""
    return decode_many([(hit.get("fields", {}).get(F_SIG) or [None])[0] for hit in hits], num_perm)


def parse_band_candidates(
    response: Mapping[str, Any], stored: StoredSignature, fingerprint: int, min_shared: int
) -> list[Candidate]:
    """The hits of :func:`band_search` sharing ``>= min_shared`` positions with ``stored`` (counted on their
    compact signatures), best first. Hits without a readable ``neardup.sig`` are left out."""
    hits = response["hits"]["hits"]
    if not hits:
        return []
    k = stored.num_perm
    values, valid = hit_signatures(hits, k)
    wanted = fingerprint_hex(fingerprint)
    found = []
    for i, shared in verified(values, valid, stored.values, min_shared):
        hit = hits[i]
        fields = hit.get("fields", {})
        seqs = fields.get(F_SEQ)
        found.append(
            Candidate(
                id=hit["_id"], index=hit["_index"], shared=shared, resemblance=shared / k,
                exact=fields.get(F_FINGERPRINT, [None])[0] == wanted, seq=int(seqs[0]) if seqs else None,
                source=hit.get("_source"),
            )
        )
    return rank(found)


def find_candidates(
    client: Elasticsearch,
    index: str,
    sketch: Sketch,
    min_shared: int,
    *,
    size: int = DEFAULT_SIZE,
    statuses: Sequence[str] = (),
    exclude_ids: Sequence[str] = (),
    source: bool | list[str] = False,
    method: Literal["auto", "bands", "positions"] = "auto",
) -> list[Candidate]:
    """Pages of ``index`` sharing ``>= min_shared`` positions with ``sketch`` (same tag), best first.

    An empty sketch (text without shingles) has no near-duplicates: the answer is ``[]``.

    Args:
        size: at most this many candidates (the best ones).
        statuses: see :func:`candidate_query`.
        exclude_ids: see :func:`candidate_query`.
        source: ``_source`` fields to return with each candidate.
        method: ``"bands"`` (band tokens, verified on the compact signatures), ``"positions"`` (the
            ``minimum_should_match`` query), or ``"auto"``: bands when ``t >= t0`` (module doc), else positions.
            Both give the same candidates on documents that have both fields.
    """
    validate_index_name(index)
    if sketch.empty:
        return []
    stored = StoredSignature.from_sketch(sketch)
    use_bands = method == "bands" or (method == "auto" and min_shared >= band_layout(stored.num_perm))
    if use_bands:
        if min_shared < band_layout(stored.num_perm):
            raise ValueError(f"the band query finds every match only for t >= {band_layout(stored.num_perm)}, "
                             f"got {min_shared}: use method='positions'")
        hits = max(size, DEFAULT_BAND_HITS)
        body = band_search(stored, size=hits, statuses=statuses, exclude_ids=exclude_ids, source=source)
        response = client.search(index=index, **body).body
        if len(response["hits"]["hits"]) < hits:  # all raw candidates seen: the verified ones are complete
            return parse_band_candidates(response, stored, sketch.fingerprint, min_shared)[:size]
        logger.debug("band query of %s hit %d documents or more; using the position query", index, hits)
    body = candidate_search(sketch, min_shared, size=size, statuses=statuses, exclude_ids=exclude_ids, source=source)
    return parse_candidates(client.search(index=index, **body).body, sketch)


def find_exact_duplicates(
    client: Elasticsearch, index: str, sketch: Sketch, *, size: int = DEFAULT_SIZE
) -> list[Candidate]:
    """Pages of ``index`` whose normalized text is identical to the sketched one (equal fingerprints, same
    tag, text not empty); ``shared = k``."""
    validate_index_name(index)
    query = {
        "bool": {
            "filter": [
                {"term": {F_FINGERPRINT: fingerprint_hex(sketch.fingerprint)}},
                {"term": {F_TAG: sketch.tag}},
                {"term": {F_EMPTY: False}},
            ]
        }
    }
    response = client.search(
        index=index, query=query, size=size, source=False, docvalue_fields=[{"field": F_SEQ}],
        sort=[{F_SEQ: {"order": "asc", "unmapped_type": "long"}}], track_total_hits=False,
    )
    k = sketch.num_perm
    return [
        Candidate(
            id=hit["_id"], index=hit["_index"], shared=k, resemblance=1.0, exact=True,
            seq=int(hit["fields"][F_SEQ][0]) if hit.get("fields", {}).get(F_SEQ) else None,
        )
        for hit in response["hits"]["hits"]
    ]
