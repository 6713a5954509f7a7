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

The code, one step a module: :mod:`~es_integration.groups.model` (what a sweep keeps of each document, and the
keep rule), :mod:`~es_integration.groups.queries` (sweeps and queries), :mod:`~es_integration.groups.full` (a full
run), :mod:`~es_integration.groups.incremental` (``--new``), :mod:`~es_integration.groups.report` (groups from
labels, and the report), :mod:`~es_integration.groups.assign` (``--assign``) and
:mod:`~es_integration.groups.watermark`.
"""

from __future__ import annotations

from .assign import assign_groups
from .full import find_groups
from .incremental import find_new_groups
from .model import KeepRule, SweptDocs
from .model import RowStates as RowStates
from .report import Group, GroupReport, Linkage
from .watermark import groups_watermark
from .watermark import index_uuid as index_uuid

__all__ = [
    "Group", "GroupReport", "KeepRule", "Linkage", "SweptDocs", "assign_groups", "find_groups", "find_new_groups",
    "groups_watermark",
]
