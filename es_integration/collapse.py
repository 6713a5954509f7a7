"""Serve-time collapse: one result per near-duplicate group, each saying how many similar pages it hides.

Design notes: docs/architecture.md#es_integrationcollapse
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from scrapy_neardup.core.evidence import Rule, evidence, sides
from scrapy_neardup.core.match import Sketched
from scrapy_neardup.core.params import SketchParams
from scrapy_neardup.core.stored_signature import decode_many, verified

from .indexing import get_field
from .mapping import (
    F_BANDS,
    F_FINGERPRINT,
    F_GROUP,
    F_PAGE_WORDS,
    F_POSITIONS,
    F_SIG,
    F_SKETCHED,
    F_STATUS,
    F_TAG,
    F_WORDS,
    ROOT,
    signature_from_tokens,
    stored_sketched,
)
from .names import validate_field_name, validate_index_name

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch

__all__ = [
    "CollapsedHit", "CollapsedResults", "collapse_hits", "hit_signature", "search_collapsed", "search_with_collapse",
    "text_fields", "text_query",
]

logger = logging.getLogger(__name__)


@dataclass
class CollapsedHit:
    """A hit shown after collapsing.

    Attributes:
        id, index, score: the hit's ``_id``, ``_index`` and ``_score``.
        omitted: near-duplicates of it that matched the query and are not shown.
        group: its group id (``search_collapsed``), or None.
        source: its ``_source`` (without the position tokens).
        hidden: ids of the hidden near-duplicates (``collapse_hits`` only; ``search_collapsed`` counts them).
        evidence: why each of ``hidden`` is hidden under this hit (``collapse_hits`` only), by id:
            ``{"resemblance", "rule", "shared", "k", "interval"}`` (:func:`scrapy_neardup.core.evidence.evidence`;
            ``shared`` of the ``k`` signature positions agree with this hit's).
        hit: the original hit (``collapse_hits`` only).
    """

    id: str
    index: str
    score: float | None
    omitted: int = 0
    group: str | None = None
    source: dict[str, Any] | None = None
    hidden: list[str] = field(default_factory=list)
    evidence: dict[str, dict[str, Any]] = field(default_factory=dict)
    hit: dict[str, Any] | None = field(default=None, repr=False)

    def to_json(self, fields: Sequence[str] = (), *, source: bool = False) -> dict[str, Any]:
        """The hit as JSON: ``id``, ``index``, ``score``, ``omitted``, ``group`` (None without group ids), the
        ``hidden`` ids when known, with ``hidden_pages``: ``[{"id", "resemblance", "evidence"}]`` (``evidence``:
        ``{"rule", "shared", "k", "interval"}`` against this hit); ``fields``: the values of the named (dotted)
        fields, None where absent; ``source``: the whole ``_source`` only when asked for (it can be large: whole
        pages)."""
        out: dict[str, Any] = {
            "id": self.id, "score": self.score, "omitted": self.omitted, "index": self.index, "group": self.group,
        }
        if self.hidden:
            out["hidden"] = list(self.hidden)
            out["hidden_pages"] = [_hidden_page(h, self.evidence.get(h)) for h in self.hidden]
        if fields:
            out["fields"] = {name: get_field(self.source or {}, name) for name in fields}
        if source:
            out["source"] = self.source
        return out


def text_fields(client: Elasticsearch, index: str) -> list[str]:
    """The ``text`` fields of ``index`` (dotted paths): what a text query searches by default, so that words
    like "kept" never match this package's keyword fields."""
    found: set[str] = set()

    def walk(properties: dict[str, Any], prefix: str) -> None:
        for name, spec in properties.items():
            path = prefix + name
            if spec.get("type") == "text":
                found.add(path)
            walk(spec.get("properties", {}), path + ".")

    for body in client.indices.get_mapping(index=validate_index_name(index)).body.values():
        walk(body.get("mappings", {}).get("properties", {}), "")
    return sorted(found)


def text_query(text: str, fields: Sequence[str] = ()) -> dict[str, Any]:
    """A ``simple_query_string`` query (all terms required) over ``fields`` (default: the index's default
    fields, ``index.query.default_field``)."""
    query: dict[str, Any] = {"query": text, "default_operator": "and"}
    if fields:
        query["fields"] = [validate_field_name(f) for f in fields]
    return {"simple_query_string": query}


@dataclass
class CollapsedResults:
    """What :func:`search_with_collapse` found.

    Attributes:
        hits: one per near-duplicate group (without collapse: every hit), in the order of the answer, each
            with ``omitted``, ``group`` and the raw hit (``hit``: highlights, sort values, ``fields``).
        total: the documents matching the query (``hits.total.value`` of the answer; a lower bound when the
            answer says ``gte``), or None when the body switched ``track_total_hits`` off.
        response: the search answer itself (aggregations, ``took``, ...).
    """

    hits: list[CollapsedHit]
    total: int | None
    response: Mapping[str, Any] = field(repr=False)


#: The sketch fields left out of ``_source`` unless the body asks for ``_source`` itself: they are large and of no
#: use to a results page.
SKETCH_SOURCE = [F_POSITIONS, F_SIG, F_BANDS]


def search_with_collapse(
    client: Elasticsearch, index: str, body: Mapping[str, Any], *, collapse: bool = True, hidden: int = 0,
    min_shared: int | None = None,
) -> CollapsedResults:
    """Run a search request of your own with near-duplicates collapsed: one hit per group, with the number of
    matching pages it hides.

    Two requests whatever the page size: the body plus ``collapse`` on ``neardup.group`` (groups ranked by
    their best hit, as the body ranks hits), then one ``terms`` aggregation counting, for the groups shown, the
    documents that match the body's ``query`` (and ``post_filter``, ``min_score``): ``omitted = count - 1``; in
    the same request a ``top_hits`` per group picks the page shown: the group's kept page (its representative)
    when it matches, else its best match. A group counts the pages that match, not its whole size: a
    near-duplicate that does not match is not "omitted".

    Args:
        client: an elasticsearch-py client, or an OpenSearch one from :func:`es_integration.client.make_client`.
        index: the index (or a comma-separated list, or an alias) to search.
        body: the search request body: ``query``, ``size``, ``from``, ``sort``, ``highlight``, ``aggs``, ...,
            never a ``collapse`` of its own. Without ``_source`` the sketch fields are left out of the sources.
        collapse: False runs the body as it is (every matching page, each with its group; ``omitted`` 0).
        hidden: with collapse, up to this many of the pages each hit hides are named (``CollapsedHit.hidden``,
            best first) with their evidence against the group's representative (``CollapsedHit.evidence``:
            ``{"resemblance", "rule", "shared", "k", "interval"}``, counted on their stored signatures; rule
            ``exact`` for equal fingerprints, ``near_duplicate`` at ``shared >= t``, ``transitive`` below). Read
            in the same aggregation (and one more request for representatives that do not match the query).
        min_shared: ``t`` of those rules (default: that of threshold 0.9 for the signatures' ``k``).

    Raises:
        ValueError: the body has a ``collapse`` already, or ``hidden < 0``.
    """
    if hidden < 0:
        raise ValueError(f"hidden must be >= 0, got {hidden}")
    request = dict(body)
    if collapse and "collapse" in request:
        raise ValueError(f"the search body collapses on its own ({request['collapse']!r}); search_with_collapse "
                         f"adds the collapse on {F_GROUP}")
    request.setdefault("_source", {"excludes": SKETCH_SOURCE})
    if collapse:
        request["collapse"] = {"field": F_GROUP}
    else:  # each hit's group from its doc values (the collapse returns it, as these do)
        request["docvalue_fields"] = [*request.get("docvalue_fields", []), F_GROUP]
    response = client.search(index=index, body=request)
    hits = [
        CollapsedHit(
            id=hit["_id"], index=hit["_index"], score=hit.get("_score"), source=hit.get("_source"), hit=hit,
            group=(hit.get("fields", {}).get(F_GROUP) or [None])[0],
        )
        for hit in response["hits"]["hits"]
    ]
    groups = sorted({h.group for h in hits if h.group is not None})
    if collapse and groups:
        clause = request.get("query") or {"match_all": {}}
        shown = {name: request[name] for name in _TOP_HIT_OPTIONS if name in request}
        members = _group_members(client, index, clause, groups, post_filter=request.get("post_filter"),
                                 min_score=request.get("min_score"), shown=shown, hidden=hidden)
        for h in hits:
            if h.group is not None and h.group in members:
                count, tops = members[h.group]
                top = tops[0] if tops else None
                h.omitted = max(0, count - 1)
                if top is not None and top["_id"] != h.id:  # the group's kept page is the one to show
                    h.id, h.index, h.score, h.source, h.hit = (top["_id"], top["_index"], top.get("_score"),
                                                               top.get("_source"), top)
                h.hidden = [t["_id"] for t in tops[1:]]
        if hidden:
            _hidden_evidence(client, index, hits, members, min_shared)
    total = response["hits"].get("total")
    answer: Mapping[str, Any] = response.body  # elasticsearch-py's ObjectApiResponse, or the adapter's dict
    return CollapsedResults(hits, int(total["value"]) if isinstance(total, dict) else total, answer)


def search_collapsed(
    client: Elasticsearch,
    index: str,
    query: dict[str, Any] | str,
    *,
    size: int = 10,
    from_: int = 0,
    fields: Sequence[str] = (),
    source: bool | Sequence[str] = True,
    collapse: bool = True,
    hidden: int = 0,
    min_shared: int | None = None,
) -> list[CollapsedHit]:
    """The top ``size`` groups matching ``query``, one hit each, with the count of hits it hides
    (:func:`search_with_collapse` for one query).

    Args:
        query: a query clause, or text for :func:`text_query`.
        from_: groups to skip (paging).
        fields: fields searched by a text query (default: :func:`text_fields`).
        source: ``_source`` to fetch: True (all but the sketch fields), False (none), or the fields to
            include (dotted paths).
        collapse: False: every matching page (each with its group, none omitted).
        hidden: up to this many hidden pages per hit, with their evidence (:func:`search_with_collapse`).
        min_shared: ``t`` of their rules (:func:`search_with_collapse`).
    """
    validate_index_name(index)
    clause = text_query(query, fields or text_fields(client, index)) if isinstance(query, str) else query
    body = {"query": clause, "size": size, "from": from_, "_source": _source_filter(source)}
    return search_with_collapse(client, index, body, collapse=collapse, hidden=hidden, min_shared=min_shared).hits


#: Options of a search body that apply to the hit shown for a group too.
_TOP_HIT_OPTIONS = ("_source", "highlight", "fields", "docvalue_fields", "stored_fields", "version",
                    "seq_no_primary_term", "explain")


def _group_members(
    client: Elasticsearch, index: str, clause: dict[str, Any], groups: list[str], *,
    post_filter: dict[str, Any] | None = None, min_score: float | None = None, shown: dict[str, Any] | None = None,
    hidden: int = 0,
) -> dict[str, tuple[int, list[dict[str, Any]]]]:
    """For each of ``groups``: the documents matching ``clause`` (and ``post_filter``, ``min_score``), and the
    one to show first: the group's kept page when it matches, else its best match (``neardup.status`` sorts
    ``kept`` before ``duplicate``), then up to ``hidden`` more with their signature doc values. One terms
    aggregation with a ``top_hits`` per bucket (exact: ``include`` lists every term, so each shard reports all
    of them)."""
    filters: list[dict[str, Any]] = [{"terms": {F_GROUP: groups}}]
    if post_filter:
        filters.append(post_filter)
    status_first = {F_STATUS: {"order": "desc", "unmapped_type": "keyword"}}  # an index without it: by score
    top = {"size": 1 + hidden, "sort": [status_first, "_score"], "track_scores": True, **(shown or {})}
    if hidden:
        top["docvalue_fields"] = [*top.get("docvalue_fields", []), *_EVIDENCE_FIELDS]
    body: dict[str, Any] = {
        "size": 0,
        "query": {"bool": {"must": [clause], "filter": filters}},
        "aggs": {"groups": {"terms": {"field": F_GROUP, "include": groups, "size": len(groups),
                                      "shard_size": len(groups)},
                            "aggs": {"shown": {"top_hits": top}}}},
        "track_total_hits": False,
    }
    if min_score is not None:
        body["min_score"] = min_score
    response = client.search(index=index, body=body)
    return {
        b["key"]: (int(b["doc_count"]), list(b["shown"]["hits"]["hits"]))
        for b in response["aggregations"]["groups"]["buckets"]
    }


#: The doc values the evidence of a hidden page is counted on (and what of each page was sketched).
_EVIDENCE_FIELDS = [F_SIG, F_FINGERPRINT, F_TAG, F_SKETCHED, F_WORDS, F_PAGE_WORDS]
_SHORT = {F_SKETCHED: "sketched", F_WORDS: "words", F_PAGE_WORDS: "page_words"}


def _hidden_evidence(
    client: Elasticsearch, index: str, hits: list[CollapsedHit], members: dict[str, tuple[int, list[dict[str, Any]]]],
    min_shared: int | None,
) -> None:
    """Each hit's ``evidence``: its hidden pages' stored signatures against the group's representative's (the
    document whose ``_id`` is the group id: among the group's hits when it matches, else read)."""
    def fields(hit: dict[str, Any]) -> tuple[Any, Any, Any, Sketched | None]:
        values = hit.get("fields") or {}
        sig, fingerprint, tag = ((values.get(name) or [None])[0] for name in _EVIDENCE_FIELDS[:3])
        return sig, fingerprint, tag, stored_sketched({_SHORT[name]: values.get(name) for name in _SHORT})

    leaders = {t["_id"]: fields(t) for _, tops in members.values() for t in tops}
    missing = sorted({h.group for h in hits if h.hidden and h.group is not None} - set(leaders))
    if missing:
        answer = client.search(index=index, query={"ids": {"values": missing}}, size=len(missing), source=False,
                               docvalue_fields=[{"field": name} for name in _EVIDENCE_FIELDS])
        leaders.update({t["_id"]: fields(t) for t in answer["hits"]["hits"]})
    for h in hits:
        if not h.hidden or h.group is None or h.group not in leaders:
            continue
        sig, fingerprint, tag, kept = leaders[h.group]
        if not isinstance(tag, str):
            continue
        params = SketchParams.from_tag(tag, min_shared=min_shared)
        tops = {t["_id"]: fields(t) for t in members[h.group][1]}
        others = [tops[i] for i in h.hidden]
        values, valid = decode_many([sig, *(o[0] for o in others)], params.num_perm)
        if not valid[0]:
            continue
        for doc_id, other, row in zip(h.hidden, others, range(1, len(others) + 1), strict=True):
            if not valid[row] or other[2] != tag:
                continue
            shared = int(np.count_nonzero(values[row] == values[0]))
            rule: Rule = ("exact" if other[1] is not None and other[1] == fingerprint
                          else "near_duplicate" if shared >= params.min_shared else "transitive")
            h.evidence[doc_id] = {"resemblance": round(shared / params.num_perm, 4),
                                  **evidence(shared, params.num_perm, rule), **sides(other[3], kept)}


def hit_signature(hit: dict[str, Any], num_perm: int | None = None) -> tuple[str, np.ndarray] | None:
    """``(tag, signature)`` of a search hit whose ``_source`` holds ``neardup.positions`` and ``neardup.tag``;
    None when it has no sketch (or a malformed one)."""
    source = hit.get("_source") or {}
    tokens, tag = get_field(source, F_POSITIONS), get_field(source, F_TAG)
    if not tokens or not isinstance(tag, str):
        return None
    try:
        return tag, signature_from_tokens(tokens, num_perm or len(tokens))
    except ValueError:
        logger.debug("hit %s has a malformed sketch", hit.get("_id"))
        return None


def collapse_hits(
    hits: Sequence[dict[str, Any]],
    min_shared: int,
    *,
    signature_of: Callable[[dict[str, Any]], tuple[str, np.ndarray] | None] = hit_signature,
) -> list[CollapsedHit]:
    """Drop near-duplicates from a ranked list of hits, best-ranked first (see the module doc).

    Args:
        hits: search hits in rank order (``{"_id", "_index", "_score", "_source"}``).
        min_shared: ``t``: a hit sharing ``>= t`` positions with a kept hit (same tag) is hidden under it.
        signature_of: ``(tag, signature)`` of a hit, or None for a hit without a sketch (always kept).

    Returns:
        The kept hits in their original order, each with ``omitted`` and the ``hidden`` ids. Cost
        ``O(n * kept * k)`` comparisons, vectorized per hit.
    """
    kept: list[CollapsedHit] = []
    by_tag: dict[str, tuple[list[int], list[np.ndarray]]] = {}
    for hit in hits:
        sketch = signature_of(hit)
        entry = CollapsedHit(
            id=str(hit.get("_id")), index=str(hit.get("_index", "")), score=hit.get("_score"),
            source=_without_positions(hit.get("_source")), hit=hit,
        )
        if sketch is not None:
            tag, signature = sketch
            owners, signatures = by_tag.setdefault(tag, ([], []))
            best = _best_kept(signatures, signature, min_shared)
            if best is not None:
                owner = kept[owners[best[0]]]
                owner.omitted += 1
                owner.hidden.append(entry.id)
                k = len(signature)
                owner.evidence[entry.id] = {"resemblance": round(best[1] / k, 4),
                                            **evidence(best[1], k, "near_duplicate"),
                                            **sides(_source_sketched(hit), _source_sketched(owner.hit))}
                continue
            owners.append(len(kept))
            signatures.append(signature)
        kept.append(entry)
    return kept


def _best_kept(signatures: list[np.ndarray], signature: np.ndarray, min_shared: int) -> tuple[int, int] | None:
    """Which of the kept ``signatures`` ``signature`` shares most positions with, at least ``t = min_shared`` (the
    first, best-ranked, of ties), and how many; None when none does."""
    if not signatures or len(signature) != len(signatures[0]):
        return None
    found = verified(np.vstack(signatures), None, signature, min_shared)
    if not found:
        return None
    row, shared = max(found, key=lambda row_shared: row_shared[1])
    return int(row), int(shared)


def _hidden_page(doc_id: str, fields: dict[str, Any] | None) -> dict[str, Any]:
    if not fields:
        return {"id": doc_id, "resemblance": None, "evidence": None}
    return {"id": doc_id, "resemblance": fields["resemblance"],
            "evidence": {k: v for k, v in fields.items() if k != "resemblance"}}


def _source_filter(source: bool | Sequence[str]) -> bool | dict[str, list[str]]:
    if source is True:
        return {"excludes": SKETCH_SOURCE}
    if source is False or not source:
        return False
    return {"includes": list(source), "excludes": SKETCH_SOURCE}


def _without_positions(source: dict[str, Any] | None) -> dict[str, Any] | None:
    if not source or not isinstance(source.get("neardup"), dict) or "positions" not in source["neardup"]:
        return source
    neardup = {k: v for k, v in source["neardup"].items() if k != "positions"}
    return {**source, "neardup": neardup}


def _source_sketched(hit: Mapping[str, Any] | None) -> Sketched | None:
    """What of a hit's page was sketched, from its ``_source`` (``None`` when it does not say)."""
    source = (hit or {}).get("_source") or {}
    return stored_sketched(source.get(ROOT)) if isinstance(source, dict) else None
