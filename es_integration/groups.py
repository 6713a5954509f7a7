"""Near-duplicate groups across an index: Broder's clustering, with Elasticsearch finding the pairs.

1. Sweep the sketched documents with a point in time (``search_after``), reading their position tokens.
2. For each document, one t-of-k candidate query (:func:`es_integration.candidates.candidate_query`, in filter
   context, ids only), batched with ``msearch`` against the same point in time. Every hit is a pair sharing
   ``>= t`` positions, exactly the pairs Broder's step 3 keeps: the query is exact (no LSH misses), so the
   groups equal :func:`scrapy_neardup.clustering.broder_clusters` on the same signatures. Documents with an
   identical signature (exact duplicates) are joined directly and only one of them is queried.
3. Union-find over the pairs (:class:`scrapy_neardup.clustering.UnionFind`); components of two or more
   documents are the groups. Near-duplication is not transitive: a group may hold two pages that share fewer
   than t positions, linked through a third (Broder's definition, and what a search engine collapses).
4. A representative per group by a keep-best rule (:class:`KeepRule`): first indexed (smallest
   ``neardup.seq``, the default), shortest URL, or highest value of a numeric field; ties go to the earlier
   indexed page, then the smaller ``_id``. The group id is the representative's ``_id``.
5. Optionally (:func:`assign_groups`) write ``neardup.group``, ``neardup.status`` (``kept`` for representatives
   and pages in no group, ``duplicate`` otherwise) and ``neardup.duplicate_of`` with bulk partial updates, only
   on the documents whose values change.

Cost: one candidate query per distinct signature; a query touches only the k posting lists of its tokens.
A page with more than ``max_neighbours`` near-duplicates is queried again with 10,000 (the default result
window); beyond that its extra pairs are dropped, which can only split a group if none of its members reaches
the dropped pages through their own queries (reported as ``truncated``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

from scrapy_neardup.clustering import UnionFind

from .indexing import get_field
from .mapping import (
    DUPLICATE,
    F_DUPLICATE_OF,
    F_GROUP,
    F_POSITIONS,
    F_SEQ,
    F_STATUS,
    F_TAG,
    KEPT,
    ROOT,
)
from .names import validate_field_name, validate_index_name
from .sweep import PointInTime, point_in_time, sweep

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch

__all__ = ["DocInfo", "Group", "GroupReport", "KeepRule", "assign_groups", "find_groups"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_NEIGHBOURS = 1000
_WIDE = 10_000
Progress = Callable[[int], Any]


@dataclass(frozen=True)
class KeepRule:
    """Which page of a group to keep (its representative).

    Attributes:
        kind: ``"first"`` (smallest ``neardup.seq``: indexed first), ``"shortest-url"`` (shortest value of
            ``field``; ``field=None`` uses the ``_id``), or ``"highest"`` (largest numeric value of ``field``).
            Pages missing the value rank last; ties go to the earlier indexed page, then the smaller ``_id``.
        field: the document field the rule reads (dotted path).
    """

    kind: Literal["first", "shortest-url", "highest"] = "first"
    field: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("first", "shortest-url", "highest"):
            raise ValueError(f"keep rule must be first, shortest-url or highest, got {self.kind!r}")
        if self.kind == "highest" and not self.field:
            raise ValueError("the 'highest' keep rule needs a numeric field")
        if self.field is not None:
            validate_field_name(self.field)

    def value_of(self, doc_id: str, source: dict[str, Any]) -> float:
        """The number this rule minimizes for one document (``inf`` when the value is missing)."""
        if self.kind == "first":
            return 0.0
        value = doc_id if self.field is None else get_field(source, self.field)
        if self.kind == "shortest-url":
            return float(len(value)) if isinstance(value, str) and value else math.inf
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            return math.inf
        return -float(value)


@dataclass(slots=True)
class DocInfo:
    """What the sweep keeps of a document: its ordering keys and its current group fields."""

    seq: float
    rank: float
    group: str | None
    status: str | None
    duplicate_of: str | None


@dataclass(frozen=True)
class Group:
    """A near-duplicate group: ``members[0]`` is the representative; the others in indexing order."""

    id: str
    representative: str
    members: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"group": self.id, "representative": self.representative, "members": list(self.members)}


@dataclass
class GroupReport:
    """Outcome of :func:`find_groups`.

    Attributes:
        groups: groups of two or more documents, in indexing order of their representatives.
        docs: information on every swept document (by ``_id``), for :func:`assign_groups`.
        documents: sketched documents swept.
        queries: candidate queries run (one per distinct signature).
        pairs: links found: candidate-query hits (a pair is usually found from both sides) plus joins of
            identical signatures.
        truncated: documents with more near-duplicates than the widest query returns.
        seconds: wall time.
    """

    groups: list[Group] = field(default_factory=list)
    docs: dict[str, DocInfo] = field(default_factory=dict)
    documents: int = 0
    queries: int = 0
    pairs: int = 0
    truncated: int = 0
    seconds: float = 0.0

    @property
    def duplicates(self) -> int:
        """Documents that are in a group and not its representative."""
        return sum(len(g.members) - 1 for g in self.groups)

    def summary(self) -> str:
        rate = self.documents / self.seconds if self.seconds > 0 else 0.0
        text = (
            f"{self.documents} documents, {len(self.groups)} groups, {self.duplicates} duplicates, "
            f"{self.queries} candidate queries, {self.seconds:.1f}s ({rate:.0f} docs/s)"
        )
        return text + (f", {self.truncated} truncated" if self.truncated else "")


def find_groups(
    client: Elasticsearch,
    index: str,
    tag: str,
    min_shared: int,
    *,
    keep: KeepRule | None = None,
    batch_size: int = 250,
    page_size: int = 1000,
    max_neighbours: int = DEFAULT_MAX_NEIGHBOURS,
    progress: Progress | None = None,
    total: Callable[[int], Any] | None = None,
) -> GroupReport:
    """Broder's clustering of the documents of ``index`` sketched with ``tag`` (see the module doc).

    Args:
        tag: the sketch parameter tag (``Sketcher.tag``); documents with other tags are ignored.
        min_shared: ``t``: documents sharing ``>= t`` of their ``k`` positions are linked.
        keep: the representative rule (default: first indexed).
        batch_size: candidate queries per ``msearch`` request.
        page_size: documents per sweep request.
        max_neighbours: hits per candidate query before it is widened.
        progress: called with the number of documents done since the last call.
        total: called once with the number of documents to sweep.
    """
    validate_index_name(index)
    keep = keep or KeepRule()
    started = time.perf_counter()
    report = GroupReport()
    uf: UnionFind[str] = UnionFind()
    query = {"bool": {"filter": [{"term": {F_TAG: tag}}, {"exists": {"field": F_POSITIONS}}]}}
    if total is not None:
        total(int(client.count(index=index, query=query)["count"]))
    fields = [F_POSITIONS, F_SEQ, F_GROUP, F_STATUS, F_DUPLICATE_OF]
    if keep.field:
        fields.append(keep.field)
    first_with: dict[bytes, str] = {}
    with point_in_time(client, index) as pit:
        for hits in sweep(client, pit, query=query, source=fields, page_size=page_size):
            todo: list[tuple[str, list[str]]] = []
            for hit in hits:
                doc_id, source = hit["_id"], hit.get("_source") or {}
                report.docs[doc_id] = _doc_info(doc_id, source, keep)
                tokens = get_field(source, F_POSITIONS) or []
                digest = hashlib.blake2b("\n".join(tokens).encode(), digest_size=16).digest()
                twin = first_with.setdefault(digest, doc_id)
                if twin != doc_id:
                    uf.union(twin, doc_id)
                    report.pairs += 1
                elif len(tokens) >= min_shared:
                    todo.append((doc_id, tokens))
            for start in range(0, len(todo), batch_size):
                chunk = todo[start : start + batch_size]
                _link_candidates(client, pit, chunk, tag, min_shared, max_neighbours, uf, report)
            report.documents += len(hits)
            if progress is not None:
                progress(len(hits))
    report.groups = _make_groups(uf, report.docs)
    report.seconds = time.perf_counter() - started
    logger.info("groups in %s: %s", index, report.summary())
    return report


def _doc_info(doc_id: str, source: dict[str, Any], keep: KeepRule) -> DocInfo:
    seq = get_field(source, F_SEQ)
    return DocInfo(
        seq=float(seq) if isinstance(seq, int | float) else math.inf,
        rank=keep.value_of(doc_id, source),
        group=get_field(source, F_GROUP),
        status=get_field(source, F_STATUS),
        duplicate_of=get_field(source, F_DUPLICATE_OF),
    )


def _link_candidates(
    client: Elasticsearch,
    pit: PointInTime,
    chunk: list[tuple[str, list[str]]],
    tag: str,
    min_shared: int,
    size: int,
    uf: UnionFind[str],
    report: GroupReport,
) -> None:
    """Run one msearch of candidate queries and union every pair; widen queries that hit ``size``."""
    wide: list[tuple[str, list[str]]] = []
    for (doc_id, tokens), hits in zip(chunk, _msearch(client, pit, chunk, tag, min_shared, size), strict=True):
        report.queries += 1
        for other in hits:
            if other != doc_id:
                uf.union(doc_id, other)
                report.pairs += 1
        if len(hits) >= size:
            wide.append((doc_id, tokens))
    if wide and size < _WIDE:
        for (doc_id, _), hits in zip(wide, _msearch(client, pit, wide, tag, min_shared, _WIDE), strict=True):
            for other in hits:
                if other != doc_id:
                    uf.union(doc_id, other)
            if len(hits) >= _WIDE:
                report.truncated += 1
                logger.warning("%s has more than %d near-duplicates; extra pairs ignored", doc_id, _WIDE)
    elif wide:
        report.truncated += len(wide)


def _msearch(
    client: Elasticsearch, pit: PointInTime, chunk: list[tuple[str, list[str]]], tag: str, min_shared: int,
    size: int,
) -> Iterator[list[str]]:
    """The ids of each query's hits, in order (raises on a failed query).

    The bodies are :func:`~es_integration.candidates.candidate_query` in filter context, encoded by string
    joins (tokens are ``[0-9a-f_]``, JSON-safe): building and encoding 128 clause dicts per query would cost
    the client more CPU than Elasticsearch spends answering it.
    """
    from elasticsearch import ApiError

    head = json.dumps(
        {"size": size, "_source": False, "track_total_hits": False, "pit": pit.body()}, separators=(",", ":")
    )[:-1]
    tag_filter = json.dumps({"term": {F_TAG: tag}}, separators=(",", ":"))
    term = '{"term":{"' + F_POSITIONS + '":"'
    lines: list[str] = []
    for _, tokens in chunk:
        should = term + ('"}},' + term).join(tokens) + '"}}'
        lines.append("{}")
        lines.append(
            f'{head},"query":{{"bool":{{"filter":[{tag_filter},{{"bool":{{"should":[{should}],'
            f'"minimum_should_match":{int(min_shared)}}}}}]}}}}}}'
        )
    response = client.msearch(searches=cast(Any, lines))
    for item in response["responses"]:
        if "error" in item:
            error = item["error"]
            raise ApiError(
                message=str(error.get("reason", error)) if isinstance(error, dict) else str(error),
                meta=response.meta,
                body={"error": error},
            )
        yield [hit["_id"] for hit in item["hits"]["hits"]]


def _make_groups(uf: UnionFind[str], docs: dict[str, DocInfo]) -> list[Group]:
    groups = []
    for members in uf.groups():
        if len(members) < 2:
            continue
        ordered = sorted(members, key=lambda m: (docs[m].seq, m))
        representative = min(ordered, key=lambda m: (docs[m].rank, docs[m].seq, m))
        rest = [m for m in ordered if m != representative]
        groups.append(Group(id=representative, representative=representative, members=[representative, *rest]))
    groups.sort(key=lambda g: (docs[g.representative].seq, g.representative))
    return groups


def assign_groups(
    client: Elasticsearch,
    index: str,
    report: GroupReport,
    *,
    refresh: bool = True,
    progress: Progress | None = None,
) -> int:
    """Write each swept document's group fields where they change; return the number of documents updated.

    Members of a group get ``group = representative``, ``status = "duplicate"`` and
    ``duplicate_of = representative``; representatives and documents in no group get their own ``_id`` as
    group and ``status = "kept"``.

    Raises:
        EsError: via the caller's :func:`~es_integration.client.translate_errors`; a refused update is raised
            as ``elasticsearch.helpers.BulkIndexError``.
    """
    from elasticsearch import helpers

    validate_index_name(index)
    written = 0
    for ok, _ in helpers.streaming_bulk(
        client, _assign_actions(index, report), chunk_size=1000, max_retries=3, initial_backoff=0.5
    ):
        written += ok
        if progress is not None:
            progress(1)
    if refresh:
        client.indices.refresh(index=index)
    logger.info("updated group fields of %d documents in %s", written, index)
    return written


def _assign_actions(index: str, report: GroupReport) -> Iterable[dict[str, Any]]:
    wanted: dict[str, tuple[str, str, str | None]] = {}
    for group in report.groups:
        for member in group.members:
            is_rep = member == group.representative
            wanted[member] = (group.id, KEPT if is_rep else DUPLICATE, None if is_rep else group.representative)
    for doc_id, info in report.docs.items():
        target = wanted.get(doc_id, (doc_id, KEPT, None))
        if (info.group, info.status, info.duplicate_of) == target:
            continue
        group_id, status, duplicate_of = target
        yield {
            "_op_type": "update",
            "_index": index,
            "_id": doc_id,
            "doc": {ROOT: {"group": group_id, "status": status, "duplicate_of": duplicate_of}},
            "retry_on_conflict": 3,
        }

