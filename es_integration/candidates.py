"""Candidate queries: every indexed page sharing at least t of k signature positions with a sketch.

The query is one term clause per position token ``"i_v"`` (see :mod:`es_integration.mapping`), each wrapped in
``constant_score`` (score 1 when it matches), combined in a ``bool.should`` with ``minimum_should_match: t``::

    score(doc) = sum_i [doc has token "i_v_i"] = #{i : low16(sig_doc[i]) == low16(sig_query[i])}
               ~ Binomial(k, r + (1 - r) / 65536)

so a hit's score *is* its shared-position count (exact: small integers in float32) and the hits are exactly the
pages the t-of-k rule flags, counted on the same 16-bit values as the embedded index;
``resemblance = shared / k`` estimates Jaccard with standard deviation ``sqrt(r (1 - r) / k)``. The parameter
tag is a filter clause (scores 0), so sketches made with other parameters are never compared. Exact duplicates
(equal 64-bit fingerprints of the normalized text) share all k positions and are found by the same query;
:func:`find_exact_duplicates` looks them up by fingerprint alone.

Elasticsearch's default limit of boolean clauses (at least 1024 in 8.x, scaled with the heap) bounds ``k``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy_neardup.core.index import Match
from scrapy_neardup.core.sketch import Sketch

from .mapping import F_EMPTY, F_FINGERPRINT, F_POSITIONS, F_SEQ, F_STATUS, F_TAG, fingerprint_hex, position_tokens
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
    "rank_key",
]

logger = logging.getLogger(__name__)

#: Hits fetched per candidate query by default (a page rarely has more near-duplicates than this).
DEFAULT_SIZE = 100


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
        """The core :class:`~scrapy_neardup.core.index.Match` (key = ``_id``)."""
        return Match(key=self.id, shared=self.shared, resemblance=self.resemblance, exact=self.exact)


def rank_key(candidate: Candidate) -> tuple[bool, int, float, str]:
    """Best first when sorted descending: exact duplicates, then most shared positions, then earliest indexed
    (the order of :class:`~scrapy_neardup.core.index.SketchIndex`), then ``_id``."""
    seq = float("inf") if candidate.seq is None else float(candidate.seq)
    return (candidate.exact, candidate.shared, -seq, _reverse(candidate.id))


def _reverse(text: str) -> str:
    # descending sort of the whole key must order ids ascending: map each character to its complement
    return "".join(chr(0x10FFFF - ord(c)) for c in text)


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
    """Candidates from a search response of :func:`candidate_search`, best first (:func:`rank_key`)."""
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
    found.sort(key=rank_key, reverse=True)
    return found


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
) -> list[Candidate]:
    """Pages of ``index`` sharing ``>= min_shared`` positions with ``sketch`` (same tag), best first.

    An empty sketch (text without shingles) has no near-duplicates: the answer is ``[]``.

    Args:
        size: at most this many candidates (the ones sharing most positions).
        statuses, exclude_ids: see :func:`candidate_query`.
        source: ``_source`` fields to return with each candidate.
    """
    validate_index_name(index)
    if sketch.empty:
        return []
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
