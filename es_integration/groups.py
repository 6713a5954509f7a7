"""Near-duplicate groups across an index, from the sketches stored in it.

Two pages are linked when their stored signatures share ``>= t`` of the ``k`` positions (at resemblance ``r``,
with probability ``P[Binomial(k, r) >= t]``). A group is what serve-time collapse shows as one hit, its
representative (the page that stays visible) and the members it hides. Two linkages:

* **representative** (the default): every member is linked to its representative, as every drop of the crawl
  pipeline names a kept page it near-duplicates, and no two representatives are linked. Pages are taken in the
  keep rule's order; one linked to representatives chosen before it joins the one it shares most positions with
  (ties: the better-ranked), otherwise it becomes one (leader clustering,
  :func:`scrapy_neardup.core.clustering.leader_labels`). Two members of a group share at least ``2t - k``
  positions (86 of 128 at ``t`` = 107).
* **transitive** (``--transitive``): Broder's connected components. A group may hold two pages that share
  fewer than ``t`` positions, linked through a third; on templated sites chains of small edits join distinct
  pages into groups of hundreds, and collapse then hides pages that near-duplicate nothing shown. Its
  representative is the group's best page by the keep rule, which may share fewer than ``t`` positions with
  some members.

Each representative group lies within one transitive group, which chains may cut into several.

1. Sweep the sketched documents (all but those a crawler of the Elasticsearch backend is deciding right now, status
   ``pending``: their content and status are about to be written, and ``--assign`` must not overwrite them; the
   next run covers them) in parallel slices of one point in time (threads), reading only their compact
   signatures (``neardup.sig``, doc values, ``_source`` off; :func:`es_integration.sweep.sliced_sweep`) and the
   few doc-value fields the representative and ``--assign`` need (``seq``, ``group``, ``status``,
   ``duplicate_of``). Signatures are spilled to a temporary file as they arrive; what stays in memory per
   document is its ``_id`` (in one byte string), its ``seq`` and one byte of state.
2. Find every pair sharing ``>= t`` of the ``k`` positions band by band
   (:func:`scrapy_neardup.core.clustering.cluster_labels`: pigeonhole bands, verified counts, a vectorized
   union-find), on the same 16-bit values that a ``minimum_should_match`` query on the position tokens counts,
   so its components equal :func:`scrapy_neardup.core.clustering.broder_clusters` of the stored signatures.
   Identical stored signatures are joined first and only one of each takes part in the bands.
3. Transitive: components of two or more documents are the groups, and each one's representative is picked by
   a keep-best rule (:class:`KeepRule`): first indexed (smallest ``neardup.seq``, the default), shortest URL,
   or highest value of a numeric field; ties go to the earlier indexed page, then the smaller ``_id``.
   Representative: within each component of three or more, the rule above decides representatives and members
   in that same order (:func:`~scrapy_neardup.core.clustering.leader_labels`: rounds of band-wise checks in
   which each page stops at its first hit, then the pairs left verified once each), so the groups equal
   :func:`scrapy_neardup.core.clustering.leader_clusters` of the stored signatures in the keep rule's order.
   The group id is the representative's ``_id``.
4. Optionally (:func:`assign_groups`) write ``neardup.group``, ``neardup.status`` (``kept`` for representatives
   and pages in no group, ``duplicate`` otherwise) and ``neardup.duplicate_of`` (the representative) with bulk
   partial updates, only on the documents whose values change, and record in the index's mapping ``_meta`` the
   highest ``seq`` the groups now cover and the linkage (the watermark of :func:`find_new_groups`).

**Incremental runs** (:func:`find_new_groups`, ``neardup es groups --new``): only the documents above the
watermark (or without ``seq``) are swept; the documents they near-duplicate among the older ones come from one
band query per batch of new documents (``terms`` on ``neardup.bands``, verified on the returned signatures),
and the members of the older groups that gain a new document from a ``terms`` query on ``neardup.group``. The band
queries are sent as soon as a batch of new documents is swept, in parallel threads, each answered in one
request while its hits fit ``index.max_result_window``. What they cost the server is one term-dictionary
seek per distinct band token and segment (``b`` tokens per new document, ~0.1-0.2 microseconds each on this
machine kind): scoring, fetching and parsing the few hits are small beside it, and grouping the tokens by band
instead of by document did not change it (measured at 1M documents, 31 segments); with the band filter an
assigned run left (:mod:`es_integration.band_filter`), only the tokens some older document may hold are sent
(about a fifth, when a fifth of the new documents near-duplicate older ones); a filter never drops a token an
older document holds, so the same older documents are found. With representative linkage the older pages
whose status is ``kept`` are representatives already chosen: they stay so, and rank before every new page; new
pages join them, or each other, by the rule; older duplicates are compared with, never joined. With the default
keep rule a full run takes the older pages first too (their ``seq`` is at most the watermark, the new ones'
above it), so an incremental run gives the groups of a full run for every group that holds a new document, and
the others do not change; with another rule an existing representative stays even where a new member would now
rank better. With transitive linkage older groups are closed under the rule already (the watermark is only
written after an assigned run), so joining them through the new documents' pairs gives the same. Either needs
the older fields to come from an assigned run of the same linkage (recorded with the watermark; checked).

Indices written before ``neardup.sig`` existed are refused with an error naming ``neardup es backfill``, which
writes the compact fields from the stored positions (no text needed).

Memory (client): per document its ``_id`` bytes and about 25 bytes while sweeping (offsets, ``seq``, one state
byte), then for pair finding an 8-byte parent and one band's keys and sort order (12 bytes) at a time; the
signatures (256 bytes each) are on disk. Representative linkage adds, after the pair finding and for the pages of
components of three or more only, ~50 bytes each (their band keys go to a temporary file) and 9 bytes per linked
pair it holds, a batch of whole components at a time: groups of near-identical pages cost their pages, not their
pairs; drifting sequences decided page by page hold ~20 pairs a page (``benchmarks/bench_linkage.py``). Measured
end to end, fixed overheads included: about 200 bytes a document at 1M documents (``benchmarks/bench_es.py``).
"""

from __future__ import annotations

import logging
import math
import tempfile
import time
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from scrapy_neardup.core.clustering import (
    FIXED_MEMBER,
    FIXED_REPRESENTATIVE,
    cluster_labels,
    leader_labels,
)
from scrapy_neardup.core.params import parse_tag
from scrapy_neardup.core.stored import band_layout, decode_many, distinct_band_pairs, pair_tokens, stored_bands

from .band_filter import BandFilter, BandFilterStore
from .client import EsError
from .indexing import get_field
from .mapping import (
    DUPLICATE,
    F_BANDS,
    F_DUPLICATE_OF,
    F_GROUP,
    F_POSITIONS,
    F_SEQ,
    F_SIG,
    F_STATUS,
    F_TAG,
    KEPT,
    PENDING,
    ROOT,
    UNCHECKED,
)
from .names import validate_field_name, validate_index_name
from .sweep import SWEEP_FILTER, PointInTime, point_in_time, sliced_sweep, sweep

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch

__all__ = [
    "Group", "GroupReport", "KeepRule", "Linkage", "SweptDocs", "assign_groups", "find_groups", "find_new_groups",
    "groups_watermark",
]

logger = logging.getLogger(__name__)

Progress = Callable[[int], Any]
#: Default sweep threads (slices of the point in time).
DEFAULT_SLICES = 2
#: New documents per band query of :func:`find_new_groups` (22 band tokens each: 22,000 terms, under the
#: default ``index.max_terms_count`` of 65,536). The server's cost is one term-dictionary seek per distinct
#: token and segment whatever the batching (measured: mixing bands or grouping them by band costs the same), so
#: batches only need to be many enough to keep both query threads busy.
_NEW_BATCH = 1000
#: Hits per request of those queries when the index does not say (Elasticsearch's default
#: ``index.max_result_window``): a query is answered in one request unless it matches more, since every further
#: page of a point-in-time search runs the whole terms query (its seeks) again.
_DEFAULT_WINDOW = 10_000
_META_KEY = "neardup_groups"
_STATE_FIELDS = [F_SEQ, F_GROUP, F_STATUS, F_DUPLICATE_OF]
#: The seq of documents without one (unchecked pages): they sort last.
_NO_SEQ = np.iinfo(np.int64).max
#: What joins pages into one group: ``"representative"`` (every member shares >= t positions with the group's
#: representative; leader clustering in the keep rule's order) or ``"transitive"`` (Broder's components).
Linkage = Literal["representative", "transitive"]
_LINKAGES = ("representative", "transitive")


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


State = tuple[str | None, str | None, str | None]


class RowStates:
    """``(group, status, duplicate_of)`` of some rows, added in increasing row order, compactly: after an
    ``--assign`` run every duplicate (a sixth of a typical index) has one, and as a dict of tuples of strings
    each cost ~300 B, a third of the client's memory at 1M documents. Here: the row (8 B), a status code (2 B),
    the two strings' ends (16 B) and their UTF-8 bytes in one buffer; ~45 B a row."""

    def __init__(self) -> None:
        self._rows = array("q")
        self._status = array("h")
        self._ends = array("q")  # two per row: end of its group string, end of its duplicate_of string
        self._none = array("b")  # bit 1: group is None, bit 2: duplicate_of is None
        self._text = bytearray()
        self._codes: dict[str | None, int] = {}
        self._names: list[str | None] = []

    def add(self, row: int, state: State) -> None:
        if self._rows and row <= self._rows[-1]:
            raise ValueError("rows must be added in increasing order")
        group, status, duplicate_of = state
        code = self._codes.get(status)
        if code is None:
            code = self._codes[status] = len(self._names)
            self._names.append(status)
        self._rows.append(row)
        self._status.append(code)
        self._none.append((group is None) | (duplicate_of is None) << 1)
        for text in (group, duplicate_of):
            self._text += (text or "").encode("utf-8", "surrogatepass")
            self._ends.append(len(self._text))

    def get(self, row: int, default: State) -> State:
        i = bisect_left(self._rows, row)
        if i == len(self._rows) or self._rows[i] != row:
            return default
        start = self._ends[2 * i - 1] if i else 0
        middle, end = self._ends[2 * i], self._ends[2 * i + 1]
        none = self._none[i]
        group = None if none & 1 else self._text[start:middle].decode("utf-8", "surrogatepass")
        duplicate_of = None if none & 2 else self._text[middle:end].decode("utf-8", "surrogatepass")
        return group, self._names[self._status[i]], duplicate_of

    def rows(self) -> Iterator[int]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def memory_bytes(self) -> int:
        return sum(a.itemsize * len(a) for a in (self._rows, self._status, self._ends, self._none)) + len(self._text)


class SweptDocs:
    """What a sweep keeps of each document, compactly (see the module doc): row ``i`` is the ``i``-th document
    read. Signatures go to a temporary file (:meth:`values` maps it back); the ``_id`` values to one byte string.
    """

    def __init__(self, num_perm: int, keep: KeepRule, spill_dir: str | None = None) -> None:
        self.num_perm = num_perm
        self.keep = keep
        self._spill = tempfile.TemporaryFile(dir=spill_dir)  # noqa: SIM115 - lives as long as this object
        self._ids = bytearray()
        self._ends: list[np.ndarray] = []
        self._seq: list[np.ndarray] = []
        self._rank: list[np.ndarray] = []
        self._plain: list[np.ndarray] = []
        #: current (group, status, duplicate_of) of the rows whose fields are not "kept, own group"
        self.state = RowStates()
        self.size = 0
        #: rows with a signature in the spill file (the first ones; rows added without come after them)
        self.with_values = 0
        self.malformed = 0
        self.max_seq: int | None = None
        self._frozen: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    def close(self) -> None:
        self._spill.close()

    def add_page(self, hits: list[dict[str, Any]], with_values: bool = True) -> None:
        """Record one sweep page (hits with ``fields`` holding the doc values, and ``_source`` for keep fields);
        documents whose ``neardup.sig`` cannot be read are counted in ``malformed`` and left out."""
        fields = [hit.get("fields") or {} for hit in hits]
        if with_values:
            values, valid = decode_many([(f.get(F_SIG) or [None])[0] for f in fields], self.num_perm)
            if not valid.all():
                self.malformed += int(np.count_nonzero(~valid))
                keep = np.flatnonzero(valid)
                rows = keep.tolist()
                hits, fields, values = [hits[i] for i in rows], [fields[i] for i in rows], values[keep]
            if self.with_values != self.size:
                raise ValueError("rows with signatures must come before rows without")
            self._spill.write(values.tobytes())
            self.with_values += len(hits)
        ids = [hit["_id"].encode("utf-8", "surrogatepass") for hit in hits]
        lengths = np.fromiter((len(i) for i in ids), dtype=np.int64, count=len(ids))
        self._ends.append(len(self._ids) + np.cumsum(lengths))
        self._ids += b"".join(ids)
        # int64: seq values are nanosecond clocks (~1.8e18), beyond float64's exact integers.
        seq = np.fromiter((int((f.get(F_SEQ) or [_NO_SEQ])[0]) for f in fields), dtype=np.int64, count=len(hits))
        self._seq.append(seq)
        known = seq[seq != _NO_SEQ]
        if known.size:
            top = int(known.max())
            self.max_seq = top if self.max_seq is None else max(self.max_seq, top)
        if self.keep.kind != "first":
            self._rank.append(np.array(
                [self.keep.value_of(hit["_id"], hit.get("_source") or {}) for hit in hits], dtype=np.float64))
        plain = np.ones(len(hits), dtype=bool)
        for i, (hit, f) in enumerate(zip(hits, fields, strict=True)):
            state = ((f.get(F_GROUP) or [None])[0], (f.get(F_STATUS) or [None])[0],
                     (f.get(F_DUPLICATE_OF) or [None])[0])
            if state != (hit["_id"], KEPT, None):
                plain[i] = False
                self.state.add(self.size + i, state)
        self._plain.append(plain)
        self.size += len(hits)
        self._frozen = None

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        if self._frozen is None:
            def join(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
                return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

            self._ends, self._seq = [join(self._ends, np.int64)], [join(self._seq, np.int64)]
            self._rank, self._plain = [join(self._rank, np.float64)], [join(self._plain, bool)]
            self._frozen = (self._ends[0], self._seq[0], self._rank[0], self._plain[0])
        return self._frozen

    def id(self, row: int) -> str:
        ends = self._arrays()[0]
        start = int(ends[row - 1]) if row else 0
        return self._ids[start : int(ends[row])].decode("utf-8", "surrogatepass")

    def ids(self, rows: Iterable[int]) -> list[str]:
        return [self.id(r) for r in rows]

    @property
    def seq(self) -> np.ndarray:
        return self._arrays()[1]

    def seq_of(self, rows: np.ndarray) -> np.ndarray:
        """``seq[rows]`` (``rows`` ascending) without joining the per-page arrays first: the representative
        linkage ranks its rows while the pair finding's arrays are still held, and a join then (17 bytes a
        document, the per-page arrays freed in between) raised the client's peak by as much at 1M documents."""
        if self._frozen is not None:
            return self._frozen[1][rows]
        sizes = np.fromiter((part.size for part in self._seq), dtype=np.int64, count=len(self._seq))
        starts = np.concatenate(([0], np.cumsum(sizes)))
        out = np.empty(rows.size, dtype=np.int64)
        cuts = np.searchsorted(rows, starts)
        for page, part in enumerate(self._seq):
            lo, hi = cuts[page], cuts[page + 1]
            if hi > lo:
                out[lo:hi] = part[rows[lo:hi] - starts[page]]
        return out

    @property
    def rank(self) -> np.ndarray:
        rank = self._arrays()[2]
        return rank if rank.size == self.size else np.zeros(self.size)

    @property
    def plain(self) -> np.ndarray:
        """Rows whose current fields are ``group = _id``, ``status = kept`` and no ``duplicate_of``."""
        return self._arrays()[3]

    def values(self) -> np.ndarray:
        """The swept signatures (of the first :attr:`with_values` rows), ``uint16[n, k]``, mapped from the spill
        file."""
        self._spill.flush()
        if self.with_values == 0:
            return np.zeros((0, self.num_perm), dtype=np.uint16)
        return np.memmap(self._spill, dtype=np.uint16, mode="r", shape=(self.with_values, self.num_perm))

    def memory_bytes(self) -> int:
        """Client memory held per the structures above (ids, offsets, seq, rank, state flags and dict)."""
        ends, seq, rank, plain = self._arrays()
        return len(self._ids) + ends.nbytes + seq.nbytes + rank.nbytes + plain.nbytes + self.state.memory_bytes()


@dataclass(frozen=True, slots=True)
class Group:
    """A near-duplicate group: ``members[0]`` is the representative; the others in indexing order."""

    id: str
    representative: str
    members: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"group": self.id, "representative": self.representative, "members": list(self.members)}


@dataclass
class GroupReport:
    """Outcome of :func:`find_groups` or :func:`find_new_groups`.

    Attributes:
        groups: groups of two or more documents, in indexing order of their representatives (with ``--new``:
            the groups holding a new document).
        swept: the documents read, for :func:`assign_groups` (with ``--new``: the new documents and the members
            of the older groups they join).
        documents: sketched documents swept (with ``--new``: new documents).
        queries: distinct stored signatures (identical ones take part in pair finding once).
        pairs: links found: pairs sharing ``>= t`` positions joining two clusters, plus joins of identical
            signatures.
        malformed: documents whose compact signature cannot be read (left out of the groups, logged).
        seconds: wall time; ``sweep_seconds``: of which reading the index.
        watermark: the ``neardup.seq`` up to which the groups cover the index (written by
            :func:`assign_groups`): the highest one swept, kept below the ``_seq_no`` of any page crawlers were
            deciding (:func:`_lowest_pending_seq`), which will settle with that seq.
        new: ``True`` for an incremental run.
        linkage: ``"representative"`` or ``"transitive"`` (see :func:`find_groups`).
        band_filter: with ``--new``, the band filter its queries used (None: every token was queried);
            :func:`assign_groups` extends it with the new documents.
        band_tokens: with ``--new``, the band tokens queried, of ``band_tokens_total`` distinct ones.
    """

    groups: list[Group] = field(default_factory=list)
    swept: SweptDocs | None = None
    documents: int = 0
    queries: int = 0
    pairs: int = 0
    malformed: int = 0
    seconds: float = 0.0
    sweep_seconds: float = 0.0
    watermark: int | None = None
    new: bool = False
    tag: str = ""
    min_shared: int = 0
    linkage: Linkage = "representative"
    #: rows of ``swept`` that are in a group
    grouped_rows: np.ndarray | None = None
    band_filter: BandFilter | None = None
    #: the watermark ``band_filter`` was written for
    band_filter_seq: int | None = None
    band_tokens: int = 0
    band_tokens_total: int = 0

    @property
    def duplicates(self) -> int:
        """Documents that are in a group and not its representative."""
        return sum(len(g.members) - 1 for g in self.groups)

    def summary(self) -> str:
        rate = self.documents / self.seconds if self.seconds > 0 else 0.0
        text = (
            f"{self.documents} {'new ' if self.new else ''}documents, {len(self.groups)} groups, "
            f"{self.duplicates} duplicates, {self.pairs} pairs, {self.seconds:.1f}s ({rate:.0f} docs/s)"
        )
        return text + (f", {self.malformed} malformed" if self.malformed else "")


def _sketched(tag: str, *extra: dict[str, Any], settled: bool = False) -> dict[str, Any]:
    """The documents sketched with ``tag`` that match ``extra``; with ``settled``, not those a crawler is deciding
    right now (status ``pending``)."""
    query: dict[str, Any] = {"bool": {"filter": [{"term": {F_TAG: tag}}, {"exists": {"field": F_SIG}}, *extra]}}
    if settled:
        query["bool"]["must_not"] = [{"term": {F_STATUS: PENDING}}]
    return query


def _refuse_old_documents(client: Elasticsearch, index: str, tag: str) -> None:
    """Raise unless every document sketched with ``tag`` has the compact signature field."""
    query = {"bool": {"filter": [{"term": {F_TAG: tag}}, {"exists": {"field": F_POSITIONS}}],
                      "must_not": [{"exists": {"field": F_SIG}}]}}
    old = int(client.count(index=index, query=query)["count"])
    if old:
        raise EsError(
            f"{old} documents of {index} have position tokens but no compact signature (neardup.sig; indexed by an "
            f"older version): run `neardup es backfill --index {index} --text-field ...` first, which writes it "
            "from their positions"
        )


def _sweep_into(
    client: Elasticsearch, pit: PointInTime, docs: SweptDocs, query: dict[str, Any], *, slices: int,
    page_size: int, progress: Progress | None, after_page: Callable[[], Any] | None = None,
) -> None:
    keep = docs.keep
    source: bool | list[str] = [keep.field] if keep.field else False
    for hits in sliced_sweep(client, pit, query=query, slices=slices, page_size=page_size, source=source,
                             docvalue_fields=[F_SIG, *_STATE_FIELDS]):
        docs.add_page(hits)
        if progress is not None:
            progress(len(hits))
        if after_page is not None:
            after_page()


def find_groups(
    client: Elasticsearch,
    index: str,
    tag: str,
    min_shared: int,
    *,
    keep: KeepRule | None = None,
    page_size: int = 1000,
    slices: int = DEFAULT_SLICES,
    progress: Progress | None = None,
    total: Callable[[int], Any] | None = None,
    spill_dir: str | None = None,
    linkage: Linkage = "representative",
) -> GroupReport:
    """The near-duplicate groups of the documents of ``index`` sketched with ``tag`` (see the module doc).

    Args:
        tag: the sketch parameter tag (``Sketcher.tag``); it names ``k`` (``"mh3-k128-..."``). Documents
            with other tags are ignored (``neardup es groups`` refuses such an index instead, naming both tags).
        min_shared: ``t``: documents sharing ``>= t`` of their ``k`` positions are linked; a pair of pages at
            resemblance ``r`` is linked with probability ``P[Binomial(k, r) >= t]``.
        keep: the representative rule (default: first indexed); with ``linkage="representative"`` also the
            order in which pages are taken.
        linkage: ``"representative"`` (default): every member shares ``>= t`` positions with its group's
            representative, the page that stays visible: pages are taken in the keep rule's order, and one that
            shares ``>= t`` with representatives chosen before it joins the one it shares most with (ties: the
            better-ranked), otherwise it becomes one (:func:`scrapy_neardup.core.clustering.leader_labels`). Two
            members may share fewer positions (at least ``2t - k``), never only through a chain.
            ``"transitive"``: Broder's connected components of the pairs sharing ``>= t`` (a group may hold
            pages linked only through others, so chains of templated pages can join distinct pages into one
            group; the representative is then the group's best page by the keep rule, which may share fewer
            than ``t`` positions with some members).
        page_size: documents per sweep request.
        slices: sweep threads (parallel slices of one point in time).
        progress: called with the number of documents done since the last call.
        total: called once with the number of documents to sweep.
        spill_dir: directory of the temporary signature files (default: the system's).

    Raises:
        EsError: documents sketched with ``tag`` lack ``neardup.sig`` (run ``neardup es backfill``).
    """
    validate_index_name(index)
    keep = keep or KeepRule()
    num_perm = parse_tag(tag).num_perm
    started = time.perf_counter()
    _refuse_old_documents(client, index, tag)
    query = _sketched(tag, settled=True)  # pending pages left out: see the module doc, step 1
    if total is not None:
        total(int(client.count(index=index, query=query)["count"]))
    _check_linkage(linkage)
    docs = SweptDocs(num_perm, keep, spill_dir)
    report = GroupReport(swept=docs, tag=tag, min_shared=min_shared, linkage=linkage)
    with point_in_time(client, index) as pit:
        _sweep_into(client, pit, docs, query, slices=slices, page_size=page_size, progress=progress)
        pending = _lowest_pending_seq(client, pit, tag, index)
    report.sweep_seconds = time.perf_counter() - started
    leaders = linkage == "representative"
    if leaders:
        labels, stats = leader_labels(docs.values(), min_shared, partial(_rank_keys, docs), spill_dir=spill_dir)
    else:
        labels, stats = cluster_labels(docs.values(), min_shared, spill_dir=spill_dir)
    report.documents, report.malformed = docs.size, docs.malformed
    report.queries, report.pairs = stats.distinct, stats.links + stats.twins
    report.groups, report.grouped_rows = _make_groups(labels, docs, np.arange(docs.size), leaders=leaders)
    report.watermark = _below_pending(docs.max_seq, pending)
    report.seconds = time.perf_counter() - started
    _log(report, index)
    return report


def _log(report: GroupReport, index: str) -> None:
    if report.malformed:
        logger.warning("%d documents of %s have an unreadable compact signature and were left out of the groups",
                       report.malformed, index)
    logger.info("groups in %s: %s", index, report.summary())


def _check_linkage(linkage: str) -> None:
    if linkage not in _LINKAGES:
        raise ValueError(f"linkage must be representative or transitive, got {linkage!r}")


def _rank_keys(docs: SweptDocs, rows: np.ndarray) -> np.ndarray:
    """The keep rule's order of ``rows`` (ascending) as distinct int64 keys: its value, then the earlier indexed
    (``seq``), then the smaller ``_id`` (read only for the rows tied on both, rarely any)."""
    # The default rule ranks by seq alone: no value array over the whole index for it (docs.rank would be one).
    value = np.zeros(rows.size) if docs.keep.kind == "first" else docs.rank[rows]
    seq = docs.seq_of(rows)
    order = np.lexsort((seq, value))
    tie = (value[order][1:] == value[order][:-1]) & (seq[order][1:] == seq[order][:-1])
    if tie.any():
        tied = np.unique(np.concatenate((order[1:][tie], order[:-1][tie])))
        ids = np.array(docs.ids(rows[tied].tolist()), dtype=object)
        id_rank = np.zeros(rows.size, dtype=np.int64)
        id_rank[tied[np.argsort(ids, kind="stable")]] = np.arange(tied.size)
        order = np.lexsort((id_rank, seq, value))
    keys = np.empty(rows.size, dtype=np.int64)
    keys[order] = np.arange(rows.size)
    return keys


def _make_groups(
    labels: np.ndarray, docs: SweptDocs, rows: np.ndarray, *, leaders: bool = False
) -> tuple[list[Group], np.ndarray]:
    """Groups of two or more of ``rows`` with equal labels (representative first, then members in indexing
    order; groups in indexing order of their representatives), and the rows in them. The representative is
    the label itself with ``leaders`` (:func:`~scrapy_neardup.core.clustering.leader_labels`' labels are rows),
    else the group's best page by the keep rule."""
    labels = labels[rows]
    inverse = np.unique(labels, return_inverse=True)[1]
    sizes = np.bincount(inverse)
    grouped = rows[sizes[inverse] > 1]
    if grouped.size == 0:
        return [], grouped
    ids = np.array(docs.ids(grouped.tolist()), dtype=object)
    # Ties are broken by _id: by its rank among the ids (an argsort of the str objects), not by a fixed-width
    # unicode copy of them (4 bytes a character, the peak of this step at 1M documents).
    id_rank = np.empty(ids.size, dtype=np.int64)
    id_rank[np.argsort(ids, kind="stable")] = np.arange(ids.size)
    seq, rank = docs.seq[grouped], docs.rank[grouped]
    label = labels[sizes[inverse] > 1]
    order = np.lexsort((id_rank, seq, label))
    cuts = np.flatnonzero(np.diff(label[order])) + 1
    groups = []
    for part in np.split(order, cuts):
        if leaders:
            best = part[grouped[part] == label[part]][0]
        else:
            best = part[np.lexsort((id_rank[part], seq[part], rank[part]))[0]]
        representative = str(ids[best])
        members = [representative, *(str(ids[i]) for i in part.tolist() if i != best)]
        groups.append((int(seq[best]), representative, Group(representative, representative, members)))
    groups.sort(key=lambda g: (g[0], g[1]))
    return [g for _, _, g in groups], grouped


# -- incremental -----------------------------------------------------------------------------------------------


def groups_watermark(client: Elasticsearch, index: str, tag: str) -> dict[str, Any] | None:
    """The record of the last assigned groups run for ``tag`` (``{"seq": ..., "min_shared": ..., "linkage":
    ...}``; records written before linkages existed have none: they were transitive), or None."""
    mappings = client.indices.get_mapping(index=index)
    for body in mappings.values():
        meta = body.get("mappings", {}).get("_meta", {}) or {}
        record = (meta.get(_META_KEY) or {}).get(tag)
        if isinstance(record, dict):
            return record
    return None


def _write_watermark(client: Elasticsearch, index: str, report: GroupReport) -> int:
    mappings = client.indices.get_mapping(index=index)
    meta = dict(next(iter(mappings.values())).get("mappings", {}).get("_meta", {}) or {})
    records = dict(meta.get(_META_KEY) or {})
    seq = report.watermark
    previous = records.get(report.tag, {}).get("seq") if report.new else None
    if seq is None:
        seq = previous if previous is not None else -1
    elif previous is not None:
        seq = max(seq, int(previous))
    records[report.tag] = {"seq": seq, "min_shared": report.min_shared, "linkage": report.linkage}
    meta[_META_KEY] = records
    client.indices.put_mapping(index=index, meta=meta)
    return int(seq)


def index_uuid(client: Elasticsearch, index: str) -> str:
    """The UUID of ``index`` (of each index behind an alias, joined): names a band filter."""
    settings = client.indices.get_settings(index=index, name="index.uuid")
    return "+".join(sorted(body["settings"]["index"]["uuid"] for body in settings.values()))


def find_new_groups(
    client: Elasticsearch,
    index: str,
    tag: str,
    min_shared: int,
    *,
    keep: KeepRule | None = None,
    page_size: int = 1000,
    slices: int = DEFAULT_SLICES,
    progress: Progress | None = None,
    total: Callable[[int], Any] | None = None,
    spill_dir: str | None = None,
    band_filter: BandFilterStore | None = None,
    linkage: Linkage = "representative",
) -> GroupReport:
    """The groups of the documents indexed since the last assigned run (``neardup es groups --new``; module doc).

    With ``linkage="representative"`` (the default) new documents join existing groups only through their
    representatives: the older pages whose status is ``kept`` (representatives, and pages in no group: the
    representatives of groups of one) stay representatives and rank before every new page; older duplicates
    neither join nor are joined. A new page sharing ``>= t`` positions with one or more representatives ranked
    before it (existing ones, or new ones chosen before it in the keep rule's order) joins the one it shares most
    with (ties: the better-ranked); otherwise it becomes a representative. With the default keep rule (first
    indexed) older pages rank before new ones in a full run too, so this gives the groups of :func:`find_groups`
    over the whole index, for every group holding a new document. With another rule an existing representative
    stays, even if a new member would rank better by the rule (a full run would make that page the
    representative instead, and may regroup around it).

    With ``linkage="transitive"``, the new documents' pairs join the older groups whole (Broder's components):
    as the older groups were closed under the rule, this also gives a full run's groups.

    Either holds as long as the older documents' group fields are those of the last assigned run, made with the
    same linkage (no document deleted or re-sketched since; a full run repairs that). Pages without ``seq``
    (passed through unchecked by a crawler) rank last in a full run but before the pages indexed after them
    once an incremental run has covered them.

    Args:
        band_filter: where band filters are kept (:mod:`es_integration.band_filter`): with the one the last
            assigned run wrote, only the band tokens an older document may hold are queried (the same groups,
            for a fraction of the server's term seeks); without one, or with another run's, every token.

    The other arguments are those of :func:`find_groups`.

    Raises:
        EsError: no assigned run is recorded for ``tag``, it used another ``t`` or another linkage, ``t`` is
            below the stored band layout's, or documents lack ``neardup.sig``.
    """
    validate_index_name(index)
    keep = keep or KeepRule()
    num_perm = parse_tag(tag).num_perm
    started = time.perf_counter()
    record = groups_watermark(client, index, tag)
    if record is None:
        raise EsError(f"no assigned groups run of {index} is recorded for {tag}: run `neardup es groups --assign` "
                      "once before --new")
    if record.get("min_shared") != min_shared:
        raise EsError(f"the last assigned groups run of {index} used t={record.get('min_shared')}, this one t="
                      f"{min_shared}: run a full `neardup es groups --assign` to change t")
    _check_linkage(linkage)
    recorded = record.get("linkage", "transitive")  # records from before linkages: Broder's components
    if recorded != linkage:
        raise EsError(f"the last assigned groups run of {index} made {recorded} groups, this one {linkage}: run a "
                      f"full `neardup es groups --assign{' --transitive' if linkage == 'transitive' else ''}` to "
                      f"change the linkage{' (or pass --transitive)' if recorded == 'transitive' else ''}")
    if min_shared < band_layout(num_perm):
        raise EsError(f"--new needs t >= {band_layout(num_perm)} (the stored band layout's); got {min_shared}")
    _refuse_old_documents(client, index, tag)
    mark = record["seq"]
    # Above the watermark, or unchecked (pages the crawler backend passed through have no seq): both clauses
    # are cheap (a points range and one term), unlike "seq missing", which visits every document.
    new_query = {"bool": {"filter": [{"term": {F_TAG: tag}}, {"exists": {"field": F_SIG}}],
                          "should": [{"range": {F_SEQ: {"gt": mark}}}, {"term": {F_STATUS: UNCHECKED}}],
                          "minimum_should_match": 1}}
    if total is not None:
        total(int(client.count(index=index, query=new_query)["count"]))
    docs = SweptDocs(num_perm, keep, spill_dir)
    report = GroupReport(swept=docs, tag=tag, min_shared=min_shared, new=True, linkage=linkage)
    leaders = linkage == "representative"
    if band_filter is not None:
        report.band_filter = band_filter.load(index_uuid(client, index), tag, mark)
        report.band_filter_seq = mark
    window = _result_window(client, index)
    older = {"range": {F_SEQ: {"lte": mark}}}
    with point_in_time(client, index) as pit, ThreadPoolExecutor(max_workers=max(1, slices)) as pool:
        fetch = partial(_fetch_hits, client, pit, docs.keep, window)
        # Older documents sharing a band with a new one (a superset of those sharing >= t positions): one terms
        # query per batch of new documents, sent while the sweep goes on (its tokens built in the query's
        # thread); their hits are added once the new documents are all in (rows of new documents come first).
        band_hits: list[Future[list[dict[str, Any]]]] = []

        token_counts: list[tuple[int, int]] = []  # (distinct, queried) per batch; list.append is thread-safe

        def band_query(block: np.ndarray) -> list[dict[str, Any]]:
            pairs = distinct_band_pairs(block)
            distinct = pairs.size
            if report.band_filter is not None:
                pairs = pairs[report.band_filter.may_hold(pairs)]
            token_counts.append((distinct, pairs.size))
            if pairs.size == 0:
                return []
            terms = {"terms": {F_BANDS: pair_tokens(pairs, num_perm)}}
            return fetch(_sketched(tag, older, terms), with_values=True)

        def send_full_batches(final: bool = False) -> None:
            sent = len(band_hits) * _NEW_BATCH
            while docs.with_values - sent >= (1 if final else _NEW_BATCH):
                block = np.array(docs.values()[sent : sent + _NEW_BATCH])
                band_hits.append(pool.submit(band_query, block))
                sent += len(block)

        _sweep_into(client, pit, docs, new_query, slices=slices, page_size=page_size, progress=progress,
                    after_page=send_full_batches)
        send_full_batches(final=True)
        pending = _lowest_pending_seq(client, pit, tag, index)
        new_count = docs.size
        report.sweep_seconds = time.perf_counter() - started
        seen: set[str] = set(docs.ids(range(new_count)))
        _add_hits(docs, band_hits, seen, with_values=True)
        report.band_tokens_total = sum(distinct for distinct, _ in token_counts)
        report.band_tokens = sum(queried for _, queried in token_counts)
        report.queries = docs.size - new_count
        # Pairs among new and matched older documents, then the older groups they touch, whole (their members
        # do not take part with representative linkage, but belong to the groups reported and assigned).
        if leaders:
            labels, stats = leader_labels(docs.values(), min_shared, partial(_rank_keys, docs),
                                          fixed=_older_fixed(docs, new_count), spill_dir=spill_dir)
            touched = _joined_groups(docs, labels, new_count)
        else:
            labels, stats = cluster_labels(docs.values(), min_shared, spill_dir=spill_dir)
            touched = _touched_groups(docs, labels, new_count)
        group_hits = [pool.submit(fetch, _sketched(tag, older, {"terms": {F_GROUP: touched[lo : lo + _NEW_BATCH]}}),
                                  with_values=False) for lo in range(0, len(touched), _NEW_BATCH)]
        _add_hits(docs, group_hits, seen, with_values=False)
    labels = _with_older_members(labels, docs, new_count) if leaders else _join_by_group(labels, docs, new_count)
    report.documents, report.malformed = new_count, docs.malformed
    report.pairs = stats.links + stats.twins
    with_new = np.unique(labels[:new_count])
    rows = np.flatnonzero(np.isin(labels, with_new))
    report.groups, report.grouped_rows = _make_groups(labels, docs, rows, leaders=leaders)
    report.watermark = _below_pending(docs.max_seq, pending) if new_count else None
    report.seconds = time.perf_counter() - started
    _log(report, index)
    return report


def _lowest_pending_seq(client: Elasticsearch, pit: PointInTime, tag: str, index: str) -> int | None:
    """The lowest ``_seq_no`` of the pages crawlers were deciding in ``pit`` (status ``pending``), or None.

    The Elasticsearch backend writes a page ``pending`` and then its decision with ``seq`` = that first write's
    ``_seq_no``, so a page settled after a run may get a ``seq`` below the run's watermark, and ``--new`` would
    never take it. The backend decides a page only once every earlier write is visible (the checkpoint wait and
    refresh of its step c), so a page that can still settle below the highest ``seq`` a run saw is pending in that
    run's point in time: the watermark is kept below the lowest of them (:func:`_below_pending`).
    """
    response = client.search(
        pit=pit.body(), query=_sketched(tag, {"term": {F_STATUS: PENDING}}), source=False, size=1,
        sort=[{"_seq_no": "asc"}], track_total_hits=True, filter_path="pit_id,hits.total,hits.hits.sort",
    )
    pit.id = response.get("pit_id", pit.id)
    hits = response.get("hits", {}).get("hits", [])
    if not hits:
        return None
    lowest = int(hits[0]["sort"][0])
    logger.info("%d pages of %s were being decided by crawlers (pending): the watermark stays below seq %d, so "
                "the next --new takes them once settled", response["hits"]["total"]["value"], index, lowest)
    return lowest


def _below_pending(max_seq: int | None, pending: int | None) -> int | None:
    """The watermark of a run that saw ``max_seq`` at most, kept below the lowest pending ``_seq_no``."""
    if max_seq is None or pending is None:
        return max_seq
    return min(max_seq, pending - 1)


def _result_window(client: Elasticsearch, index: str) -> int:
    """The index's ``index.max_result_window`` (the most hits one search may return)."""
    settings = client.indices.get_settings(index=index, name="index.max_result_window", include_defaults=True)
    for body in settings.values():
        for part in ("settings", "defaults"):
            value = body.get(part, {}).get("index", {}).get("max_result_window")
            if value is not None:
                return int(value)
    return _DEFAULT_WINDOW


def _fetch_hits(
    client: Elasticsearch, pit: PointInTime, keep: KeepRule, page_size: int, query: dict[str, Any], *,
    with_values: bool,
) -> list[dict[str, Any]]:
    """Every hit of ``query`` in ``pit`` with the fields :class:`SweptDocs` reads (only those: ``filter_path``),
    in pages of ``page_size``."""
    fields = [F_SIG, *_STATE_FIELDS] if with_values else _STATE_FIELDS
    source: bool | list[str] = [keep.field] if keep.field else False
    own = PointInTime(pit.id, pit.keep_alive)
    return [hit for hits in sweep(client, own, query=query, source=source, page_size=page_size,
                                  docvalue_fields=[{"field": f} for f in fields], filter_path=SWEEP_FILTER)
            for hit in hits]


def _add_hits(
    docs: SweptDocs, results: Sequence[Future[list[dict[str, Any]]]], seen: set[str], *, with_values: bool,
) -> None:
    """Add the hits of ``results`` (queries of older documents, for an incremental run) not seen yet, in query
    order."""
    for result in results:
        hits = result.result()
        fresh = [hit for hit in hits if hit["_id"] not in seen]
        seen.update(hit["_id"] for hit in fresh)
        if fresh:
            docs.add_page(fresh, with_values=with_values)


def _touched_groups(docs: SweptDocs, labels: np.ndarray, new_count: int) -> list[str]:
    """Group ids of the older documents in a cluster with a new document."""
    with_new = set(labels[:new_count].tolist())
    groups = set()
    for row in range(new_count, labels.size):
        if int(labels[row]) in with_new:
            groups.add(docs.state.get(row, (docs.id(row), KEPT, None))[0] or docs.id(row))
    return sorted(groups)


def _older_fixed(docs: SweptDocs, new_count: int) -> np.ndarray:
    """The ``fixed`` codes of :func:`~scrapy_neardup.core.clustering.leader_labels` for the rows with signatures:
    new rows free, older ``kept`` pages representatives already chosen, other older pages left out."""
    fixed = np.zeros(docs.with_values, dtype=np.int8)
    for row in range(new_count, docs.with_values):
        kept = docs.state.get(row, (None, KEPT, None))[1] == KEPT
        fixed[row] = FIXED_REPRESENTATIVE if kept else FIXED_MEMBER
    return fixed


def _group_of(docs: SweptDocs, row: int) -> str:
    return docs.state.get(row, (docs.id(row), KEPT, None))[0] or docs.id(row)


def _joined_groups(docs: SweptDocs, labels: np.ndarray, new_count: int) -> list[str]:
    """Group ids of the older representatives a new document joined."""
    leaders = np.unique(labels[:new_count])
    return sorted({_group_of(docs, row) for row in leaders[leaders >= new_count].tolist()})


def _with_older_members(labels: np.ndarray, docs: SweptDocs, new_count: int) -> np.ndarray:
    """Representative labels over all rows of ``docs``: those of the rows with signatures, and each older
    member of a group a new document joined labelled with that group's representative."""
    full = np.arange(docs.size, dtype=np.int64)
    full[: labels.size] = labels
    leaders = np.unique(labels[:new_count])
    row_of = {_group_of(docs, row): row for row in leaders[leaders >= new_count].tolist()}
    for row in range(new_count, docs.size):
        group, status, _ = docs.state.get(row, (docs.id(row), KEPT, None))
        if status != KEPT and group in row_of:
            full[row] = row_of[group]
    return full


def _join_by_group(labels: np.ndarray, docs: SweptDocs, new_count: int) -> np.ndarray:
    """Labels over all rows of ``docs``: the pair clusters of the rows with signatures, joined with the
    older groups (older documents with one group id are one cluster already)."""
    from scrapy_neardup.core.clustering import UnionFind

    uf: UnionFind[int] = UnionFind()
    for row in range(labels.size):
        uf.union(row, int(labels[row]))
    first_of: dict[str, int] = {}
    for row in range(new_count, docs.size):
        group = docs.state.get(row, (docs.id(row), KEPT, None))[0] or docs.id(row)
        uf.union(first_of.setdefault(group, row), row)
    return np.array([uf.find(row) for row in range(docs.size)], dtype=np.int64)


def assign_groups(
    client: Elasticsearch,
    index: str,
    report: GroupReport,
    *,
    refresh: bool = True,
    progress: Progress | None = None,
    band_filter: BandFilterStore | None = None,
) -> int:
    """Write each swept document's group fields where they change; return the number of documents updated.

    Members of a group get ``group = representative``, ``status = "duplicate"`` and
    ``duplicate_of = representative``; representatives and documents in no group get their own ``_id`` as
    group and ``status = "kept"``. Then the watermark of :func:`find_new_groups` is recorded in the index's
    mapping ``_meta``.

    Args:
        band_filter: where band filters are kept: a full run writes the band filter of every swept document
            for the watermark it records; an incremental run that used one adds its new documents to it; one
            that did not removes this index's (it no longer covers the watermark). See
            :mod:`es_integration.band_filter`.

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
    if report.tag:
        seq = _write_watermark(client, index, report)
        if band_filter is not None:
            _keep_band_filter(band_filter, index_uuid(client, index), report, seq)
    logger.info("updated group fields of %d documents in %s", written, index)
    return written


def _keep_band_filter(store: BandFilterStore, uuid: str, report: GroupReport, seq: int) -> None:
    """Write, extend or drop the band filter of ``report``'s index and tag for the watermark ``seq`` just
    recorded (see :func:`assign_groups`)."""
    docs = report.swept
    if docs is None:
        return
    if not report.new:
        fresh = BandFilter.sized_for(docs.with_values * stored_bands(docs.num_perm))
        fresh.add(docs.values())
    elif report.band_filter is not None:
        fresh = report.band_filter
        fresh.add(docs.values()[: report.documents])  # the new rows come first
    else:
        store.discard(uuid, report.tag)
        return
    if not store.save(fresh, uuid, report.tag, seq, replaces=report.band_filter_seq if report.new else None):
        return
    logger.info("band filter for %s written (%d keys, false-positive rate %.3f)", report.tag, fresh.keys,
                fresh.false_positive_rate())



def _assign_actions(index: str, report: GroupReport) -> Iterator[dict[str, Any]]:
    docs = report.swept
    if docs is None:
        return
    wanted: dict[str, tuple[str, str, str | None]] = {}
    for group in report.groups:
        for member in group.members:
            is_rep = member == group.representative
            wanted[member] = (group.id, KEPT if is_rep else DUPLICATE, None if is_rep else group.representative)
    # Rows that may need a write: members of groups, and rows whose fields are not "kept, own group" now. An
    # incremental run covers its new rows and the groups it reports; the older pages it read for comparison
    # (band hits) keep their fields: their groups did not change (were one a duplicate in an untouched group,
    # "kept, own group" would wrongly be written over it).
    grouped = set() if report.grouped_rows is None else set(report.grouped_rows.tolist())
    if report.new:
        rows: Iterable[int] = sorted(set(range(report.documents)) | grouped)  # new rows come first
    else:
        rows = sorted(set(docs.state.rows()) | grouped)
    for row in rows:
        doc_id = docs.id(row)
        target = wanted.get(doc_id, (doc_id, KEPT, None))
        current = docs.state.get(row, (doc_id, KEPT, None))
        if current == target:
            continue
        group_id, status, duplicate_of = target
        yield {
            "_op_type": "update",
            "_index": index,
            "_id": doc_id,
            "doc": {ROOT: {"group": group_id, "status": status, "duplicate_of": duplicate_of}},
            "retry_on_conflict": 3,
        }
