"""An incremental groups run (``neardup es groups --new``): only the documents indexed since the last assigned
run, the older documents they near-duplicate (band queries, sent while the sweep goes on) and the older groups
they join (see :mod:`es_integration.groups`). Each step is one function below, in the order
:func:`find_new_groups` takes them."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from scrapy_neardup.core.clustering import (
    FIXED_MEMBER,
    FIXED_REPRESENTATIVE,
    ClusterStats,
    UnionFind,
    cluster_labels,
    leader_labels,
)
from scrapy_neardup.core.params import SketchParams, require_params
from scrapy_neardup.core.stored_signature import distinct_band_pairs, pair_tokens

from ..band_filter import BandFilter, BandFilterStore
from ..mapping import F_BANDS, F_GROUP, F_SEQ, F_SIG, F_STATUS, F_TAG, KEPT, UNCHECKED
from ..names import validate_index_name
from ..sweep import point_in_time
from .model import KeepRule, SweptDocs, rank_keys
from .queries import (
    DEFAULT_SLICES,
    Progress,
    below_pending,
    fetch_hits,
    lowest_pending_seq,
    refuse_old_documents,
    result_window,
    sketched,
    sweep_into,
)
from .results import GroupReport, Linkage, log_report, make_groups
from .watermark import index_uuid, recorded_watermark

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch


#: New documents per band query of :func:`find_new_groups` (22 band tokens each: 22,000 terms, under the
#: default ``index.max_terms_count`` of 65,536). The server's cost is one term-dictionary seek per distinct
#: token and segment whatever the batching (measured: mixing bands or grouping them by band costs the same), so
#: batches only need to be many enough to keep both query threads busy.
_NEW_BATCH = 1000
#: A fetch of every hit of a query in the run's point in time (:func:`~es_integration.groups.queries.fetch_hits`
#: with the client, point in time, keep rule and page size bound).
Fetch = Callable[..., list[dict[str, Any]]]


def find_new_groups(
    client: Elasticsearch,
    index: str,
    params: SketchParams,
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
        EsError: no assigned run is recorded for ``params.tag``, it used another ``t`` or another linkage, ``t`` is
            below the stored band layout's, or documents lack ``neardup.sig``.
    """
    params = require_params(params, "find_new_groups")
    validate_index_name(index)
    keep = keep or KeepRule()
    tag, num_perm, min_shared = params.tag, params.num_perm, params.min_shared
    started = time.perf_counter()
    mark = recorded_watermark(client, index, params, linkage)
    refuse_old_documents(client, index, tag)
    new_query = _new_documents(tag, mark)
    if total is not None:
        total(int(client.count(index=index, query=new_query)["count"]))
    docs = SweptDocs(num_perm, keep, spill_dir)
    report = GroupReport(swept=docs, tag=tag, min_shared=min_shared, new=True, linkage=linkage)
    leaders = linkage == "representative"
    if band_filter is not None:
        report.band_filter = band_filter.load(index_uuid(client, index), tag, mark)
        report.band_filter_seq = mark
    window = result_window(client, index)
    older = {"range": {F_SEQ: {"lte": mark}}}
    with point_in_time(client, index) as pit, ThreadPoolExecutor(max_workers=max(1, slices)) as pool:
        fetch: Fetch = partial(fetch_hits, client, pit, docs.keep, window)
        # 1. The new documents; the band query of each batch of them is sent as soon as the sweep has it.
        bands = _BandQueries(pool, fetch, docs, report.band_filter, tag, older)
        sweep_into(client, pit, docs, new_query, slices=slices, page_size=page_size, progress=progress,
                   after_page=bands.send_full_batches)
        bands.send_full_batches(final=True)
        pending = lowest_pending_seq(client, pit, tag, index)
        new_count = docs.size
        report.sweep_seconds = time.perf_counter() - started
        seen: set[str] = set(docs.ids(range(new_count)))
        # 2. The older documents sharing a band with a new one (a superset of those sharing >= t positions),
        # added once the new documents are all in (rows of new documents come first).
        answers = [future.result() for future in bands.futures]
        _add_hits(docs, (answer.hits for answer in answers), seen, with_values=True)
        report.band_tokens_total = sum(answer.distinct for answer in answers)
        report.band_tokens = sum(answer.queried for answer in answers)
        report.queries = docs.size - new_count
        # 3. Pairs among new and matched older documents, and the older groups they touch.
        labels, stats, touched = _link(docs, new_count, min_shared, leaders, spill_dir)
        # 4. Those groups, whole (their members do not take part with representative linkage, but belong to the
        # groups reported and assigned). Their signatures too, for the evidence each member is reported with:
        # these rows come last, after the linkage read the rows before them.
        group_hits = [pool.submit(fetch, sketched(tag, older, {"terms": {F_GROUP: touched[lo : lo + _NEW_BATCH]}}),
                                  with_values=True) for lo in range(0, len(touched), _NEW_BATCH)]
        _add_hits(docs, (future.result() for future in group_hits), seen, with_values=True)
    # 5. Labels over every row, and the groups holding a new document.
    labels = _with_older_members(labels, docs, new_count) if leaders else _join_by_group(labels, docs, new_count)
    report.documents, report.malformed = new_count, docs.malformed
    report.pairs = stats.links + stats.twins
    with_new = np.unique(labels[:new_count])
    rows = np.flatnonzero(np.isin(labels, with_new))
    report.groups, report.grouped_rows = make_groups(labels, docs, rows, leaders=leaders,
                                                     min_shared=min_shared)
    report.watermark = below_pending(docs.max_seq, pending) if new_count else None
    report.seconds = time.perf_counter() - started
    log_report(report, index)
    return report


def _new_documents(tag: str, mark: int) -> dict[str, Any]:
    """The documents sketched with ``tag`` above the watermark ``mark``, or unchecked (pages the crawler backend
    passed through have no seq): both clauses are cheap (a points range and one term), unlike "seq missing",
    which visits every document."""
    return {"bool": {"filter": [{"term": {F_TAG: tag}}, {"exists": {"field": F_SIG}}],
                     "should": [{"range": {F_SEQ: {"gt": mark}}}, {"term": {F_STATUS: UNCHECKED}}],
                     "minimum_should_match": 1}}


@dataclass(frozen=True)
class _BandHits:
    """The answer to one batch's band query: the older documents it found, and its band tokens: ``distinct``
    ones, of which ``queried`` were sent (the band filter says no older document holds the others)."""

    hits: list[dict[str, Any]]
    distinct: int
    queried: int


class _BandQueries:
    """The band queries of the new documents (``terms`` on ``neardup.bands`` among the ``older`` documents
    sketched with ``tag``): one per batch of :data:`_NEW_BATCH` new rows, sent to ``pool`` as soon as the sweep
    has the batch; :attr:`futures` in row order."""

    def __init__(
        self, pool: ThreadPoolExecutor, fetch: Fetch, docs: SweptDocs, band_filter: BandFilter | None, tag: str,
        older: dict[str, Any],
    ) -> None:
        self.pool, self.fetch, self.docs, self.band_filter = pool, fetch, docs, band_filter
        self.tag, self.older = tag, older
        self.futures: list[Future[_BandHits]] = []

    def send_full_batches(self, final: bool = False) -> None:
        """Send the batches the sweep has completed (with ``final``, the last one too, however short)."""
        sent = len(self.futures) * _NEW_BATCH
        while self.docs.with_values - sent >= (1 if final else _NEW_BATCH):
            block = np.array(self.docs.values()[sent : sent + _NEW_BATCH])
            self.futures.append(self.pool.submit(_band_query, block, self.fetch, self.band_filter, self.tag,
                                                 self.older))
            sent += len(block)


def _band_query(
    block: np.ndarray, fetch: Fetch, band_filter: BandFilter | None, tag: str, older: dict[str, Any]
) -> _BandHits:
    """The older documents sharing a band with a row of ``block`` (run in a query thread: its tokens are built
    there too)."""
    pairs = distinct_band_pairs(block)
    distinct = pairs.size
    if band_filter is not None:
        pairs = pairs[band_filter.may_hold(pairs)]
    if pairs.size == 0:
        return _BandHits([], distinct, 0)
    terms = {"terms": {F_BANDS: pair_tokens(pairs, block.shape[1])}}
    return _BandHits(fetch(sketched(tag, older, terms), with_values=True), distinct, pairs.size)


def _add_hits(docs: SweptDocs, answers: Iterable[list[dict[str, Any]]], seen: set[str], *, with_values: bool) -> None:
    """Add the hits of ``answers`` (queries of older documents) not seen yet, in query order."""
    for hits in answers:
        fresh = [hit for hit in hits if hit["_id"] not in seen]
        seen.update(hit["_id"] for hit in fresh)
        if fresh:
            docs.add_page(fresh, with_values=with_values)


def _link(
    docs: SweptDocs, new_count: int, min_shared: int, leaders: bool, spill_dir: str | None
) -> tuple[np.ndarray, ClusterStats, list[str]]:
    """Labels of the rows with signatures (representative linkage: older representatives fixed, older members
    left out; transitive: Broder's components), their stats, and the ids of the older groups they touch."""
    if leaders:
        labels, stats = leader_labels(docs.values(), min_shared, partial(rank_keys, docs),
                                      fixed=_older_fixed(docs, new_count), spill_dir=spill_dir)
        return labels, stats, _joined_groups(docs, labels, new_count)
    labels, stats = cluster_labels(docs.values(), min_shared, spill_dir=spill_dir)
    return labels, stats, _touched_groups(docs, labels, new_count)


def _touched_groups(docs: SweptDocs, labels: np.ndarray, new_count: int) -> list[str]:
    """Group ids of the older documents in a cluster with a new document."""
    with_new = set(labels[:new_count].tolist())
    groups = set()
    for row in range(new_count, labels.size):
        if int(labels[row]) in with_new:
            groups.add(_group_of(docs, row))
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
    uf: UnionFind[int] = UnionFind()
    for row in range(labels.size):
        uf.union(row, int(labels[row]))
    first_of: dict[str, int] = {}
    for row in range(new_count, docs.size):
        uf.union(first_of.setdefault(_group_of(docs, row), row), row)
    return np.array([uf.find(row) for row in range(docs.size)], dtype=np.int64)

