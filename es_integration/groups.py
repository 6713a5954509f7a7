"""Near-duplicate groups across an index: Broder's clustering of the sketches stored in it.

1. Sweep the sketched documents with a point in time (``search_after``), reading their position tokens,
   which hold each signature's 16-bit stored values (:func:`es_integration.mapping.signatures_from_token_lists`).
2. Find every pair sharing ``>= t`` of the ``k`` positions with :class:`scrapy_neardup.core.clustering.GroupBuilder`:
   each document looks up the earlier ones in an in-memory :class:`~scrapy_neardup.core.index.SketchIndex` (exact
   t-of-k retrieval by pigeonhole bands, on the same 16-bit values that a ``minimum_should_match`` query on
   the tokens counts), then joins it. The pairs are exactly those the t-of-k query
   (:func:`es_integration.candidates.candidate_query`) would return for each document, so the groups equal
   :func:`scrapy_neardup.core.clustering.broder_clusters` on the stored signatures. Documents with an identical
   stored signature are joined directly and only the first is looked up.
3. Union-find over the pairs; components of two or more documents are the groups. Near-duplication is not
   transitive: a group may hold two pages that share fewer than t positions, linked through a third
   (Broder's definition, and what a search engine collapses).
4. A representative per group by a keep-best rule (:class:`KeepRule`): first indexed (smallest
   ``neardup.seq``, the default), shortest URL, or highest value of a numeric field; ties go to the earlier
   indexed page, then the smaller ``_id``. The group id is the representative's ``_id``.
5. Optionally (:func:`assign_groups`) write ``neardup.group``, ``neardup.status`` (``kept`` for representatives
   and pages in no group, ``duplicate`` otherwise) and ``neardup.duplicate_of`` with bulk partial updates, only
   on the documents whose values change.

Why pairs are found client-side rather than with one candidate query per document: the sweep reads every
signature anyway, and the in-memory index answers in tens of microseconds where a query costs milliseconds of
the cluster's time. Measured (benchmarks/bench_es.py): 100k documents in 27 s instead of 187-270 s with one
query per document, with the same 13,808 groups; 1M documents in 325 s. The sweep is now the cost (Elasticsearch
reading each document's source).
Memory: about 600 bytes per sketched document for the index, plus the swept fields kept per document.
A document with more than ``max_neighbours`` near-duplicates links to the ones sharing most positions only
(reported as ``truncated``); that can split a group only if no other member reaches the rest.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from scrapy_neardup.core.clustering import DEFAULT_MAX_LINKS, GroupBuilder
from scrapy_neardup.core.sketch import Sketch

from .indexing import get_field
from .mapping import (
    DUPLICATE,
    F_DUPLICATE_OF,
    F_FINGERPRINT,
    F_GROUP,
    F_POSITIONS,
    F_SEQ,
    F_STATUS,
    F_TAG,
    KEPT,
    ROOT,
    signatures_from_token_lists,
)
from .names import validate_field_name, validate_index_name
from .sweep import point_in_time, sweep

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch

__all__ = ["DocInfo", "Group", "GroupReport", "KeepRule", "assign_groups", "find_groups"]

logger = logging.getLogger(__name__)

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
        queries: documents looked up in the in-memory index (one per distinct stored signature).
        pairs: links found: each pair sharing ``>= t`` positions once (from its later document), plus joins
            of identical signatures.
        truncated: documents with more than ``max_neighbours`` earlier near-duplicates.
        malformed: documents whose position tokens cannot be read (left out of the groups, logged).
        seconds: wall time.
    """

    groups: list[Group] = field(default_factory=list)
    docs: dict[str, DocInfo] = field(default_factory=dict)
    documents: int = 0
    queries: int = 0
    pairs: int = 0
    truncated: int = 0
    malformed: int = 0
    seconds: float = 0.0

    @property
    def duplicates(self) -> int:
        """Documents that are in a group and not its representative."""
        return sum(len(g.members) - 1 for g in self.groups)

    def summary(self) -> str:
        rate = self.documents / self.seconds if self.seconds > 0 else 0.0
        text = (
            f"{self.documents} documents, {len(self.groups)} groups, {self.duplicates} duplicates, "
            f"{self.pairs} pairs, {self.seconds:.1f}s ({rate:.0f} docs/s)"
        )
        text += f", {self.truncated} truncated" if self.truncated else ""
        return text + (f", {self.malformed} malformed" if self.malformed else "")


def find_groups(
    client: Elasticsearch,
    index: str,
    tag: str,
    min_shared: int,
    *,
    keep: KeepRule | None = None,
    page_size: int = 1000,
    max_neighbours: int = DEFAULT_MAX_LINKS,
    progress: Progress | None = None,
    total: Callable[[int], Any] | None = None,
) -> GroupReport:
    """Broder's clustering of the documents of ``index`` sketched with ``tag`` (see the module doc).

    Args:
        tag: the sketch parameter tag (``Sketcher.tag``); it names ``k`` (``"mh3-k128-..."``). Documents
            with other tags are ignored (``neardup es groups`` refuses such an index instead, naming both tags).
        min_shared: ``t``: documents sharing ``>= t`` of their ``k`` positions are linked; a pair of pages at
            resemblance ``r`` is linked with probability ``P[Binomial(k, r) >= t]``.
        keep: the representative rule (default: first indexed).
        page_size: documents per sweep request.
        max_neighbours: links per document at most (the ones sharing most positions).
        progress: called with the number of documents done since the last call.
        total: called once with the number of documents to sweep.
    """
    validate_index_name(index)
    keep = keep or KeepRule()
    num_perm = num_perm_of(tag)
    started = time.perf_counter()
    report = GroupReport()
    builder = GroupBuilder(num_perm, min_shared, tag, max_links=max_neighbours)
    query = {"bool": {"filter": [{"term": {F_TAG: tag}}, {"exists": {"field": F_POSITIONS}}]}}
    if total is not None:
        total(int(client.count(index=index, query=query)["count"]))
    fields = [F_POSITIONS, F_FINGERPRINT, F_SEQ, F_GROUP, F_STATUS, F_DUPLICATE_OF]
    if keep.field:
        fields.append(keep.field)
    with point_in_time(client, index) as pit:
        for hits in sweep(client, pit, query=query, source=fields, page_size=page_size):
            _add_page(hits, builder, report, keep, tag)
            report.documents += len(hits)
            if progress is not None:
                progress(len(hits))
    report.queries, report.pairs, report.truncated = builder.queried, builder.links, builder.truncated
    report.groups = _make_groups(builder.groups(), report.docs)
    report.seconds = time.perf_counter() - started
    if report.malformed:
        logger.warning("%d documents of %s have malformed position tokens and were left out of the groups",
                       report.malformed, index)
    logger.info("groups in %s: %s", index, report.summary())
    return report


def num_perm_of(tag: str) -> int:
    """``k`` from a sketch parameter tag such as ``"mh3-k128-word5-s1"``."""
    for part in tag.split("-"):
        if part[:1] == "k" and part[1:].isdigit():
            return int(part[1:])
    raise ValueError(f"not a sketch parameter tag (no k<number> part): {tag!r}")


def _add_page(hits: list[dict[str, Any]], builder: GroupBuilder, report: GroupReport, keep: KeepRule, tag: str) -> None:
    """Record one sweep page's documents and feed their stored signatures to ``builder``."""
    sources = [hit.get("_source") or {} for hit in hits]
    token_lists = [get_field(source, F_POSITIONS) or [] for source in sources]
    signatures, valid = signatures_from_token_lists(token_lists, builder.index.num_perm)
    for i, (hit, source) in enumerate(zip(hits, sources, strict=True)):
        doc_id = hit["_id"]
        report.docs[doc_id] = _doc_info(doc_id, source, keep)
        if not valid[i]:
            report.malformed += 1
            continue
        sketch = Sketch(signature=signatures[i], fingerprint=_fingerprint(source), tag=tag,
                        num_shingles=_STORED)
        builder.add(doc_id, sketch)


# A stored sketch keeps no shingle count; any positive count marks it as not empty (it has positions).
_STORED = 1


def _fingerprint(source: dict[str, Any]) -> int:
    value = get_field(source, F_FINGERPRINT)
    try:
        return int(value, 16) if isinstance(value, str) else 0
    except ValueError:
        return 0


def _doc_info(doc_id: str, source: dict[str, Any], keep: KeepRule) -> DocInfo:
    seq = get_field(source, F_SEQ)
    return DocInfo(
        seq=float(seq) if isinstance(seq, int | float) else math.inf,
        rank=keep.value_of(doc_id, source),
        group=get_field(source, F_GROUP),
        status=get_field(source, F_STATUS),
        duplicate_of=get_field(source, F_DUPLICATE_OF),
    )


def _make_groups(clusters: list[list[str]], docs: dict[str, DocInfo]) -> list[Group]:
    groups = []
    for members in clusters:
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
    from .engine import bulk_helpers

    helpers = bulk_helpers(client)

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

