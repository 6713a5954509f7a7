"""A full groups run (``neardup es groups``): sweep every settled document sketched with the tag, link the
pairs sharing ``>= t`` positions, and report the groups (see :mod:`es_integration.groups`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from scrapy_neardup.core.clustering import cluster_labels, leader_labels
from scrapy_neardup.core.params import SketchParams, require_params

from ..names import validate_index_name
from ..sweep import point_in_time
from .model import KeepRule, SweptDocs, rank_keys
from .queries import (
    DEFAULT_SLICES,
    Progress,
    below_pending,
    lowest_pending_seq,
    refuse_old_documents,
    sketched,
    sweep_into,
)
from .results import GroupReport, Linkage, check_linkage, log_report, make_groups

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch


def find_groups(
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
    linkage: Linkage = "representative",
) -> GroupReport:
    """The near-duplicate groups of the documents of ``index`` sketched with ``params`` (see the module doc).

    Args:
        params: the sketch parameters (``Sketcher.params``): their tag (``params.tag``) selects the documents
            (others are ignored; ``neardup es groups`` refuses such an index instead, naming both tags), and
            ``t = params.min_shared``: documents sharing ``>= t`` of their ``k`` positions are linked; a pair of
            pages at resemblance ``r`` is linked with probability ``P[Binomial(k, r) >= t]``.
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
        EsError: documents sketched with these parameters lack ``neardup.sig`` (run ``neardup es backfill``).
    """
    params = require_params(params, "find_groups")
    validate_index_name(index)
    keep = keep or KeepRule()
    tag, num_perm, min_shared = params.tag, params.num_perm, params.min_shared
    started = time.perf_counter()
    refuse_old_documents(client, index, tag)
    query = sketched(tag, settled=True)  # pending pages left out: see the module doc, step 1
    if total is not None:
        total(int(client.count(index=index, query=query)["count"]))
    check_linkage(linkage)
    docs = SweptDocs(num_perm, keep, spill_dir)
    report = GroupReport(swept=docs, tag=tag, min_shared=min_shared, linkage=linkage)
    with point_in_time(client, index) as pit:
        sweep_into(client, pit, docs, query, slices=slices, page_size=page_size, progress=progress)
        pending = lowest_pending_seq(client, pit, tag, index)
    report.sweep_seconds = time.perf_counter() - started
    leaders = linkage == "representative"
    if leaders:
        labels, stats = leader_labels(docs.values(), min_shared, partial(rank_keys, docs), spill_dir=spill_dir)
    else:
        labels, stats = cluster_labels(docs.values(), min_shared, spill_dir=spill_dir)
    report.documents, report.malformed = docs.size, docs.malformed
    report.queries, report.pairs = stats.distinct, stats.links + stats.twins
    report.groups, report.grouped_rows = make_groups(labels, docs, np.arange(docs.size), leaders=leaders,
                                                     min_shared=min_shared)
    report.watermark = below_pending(docs.max_seq, pending)
    report.seconds = time.perf_counter() - started
    log_report(report, index)
    return report

