"""Clustering near-duplicates: Broder's transitive clusters, and groups around representatives.

Two pages are linked when their signatures share ``>= t`` of the ``k`` positions (at resemblance ``r``, with
probability ``P[Binomial(k, r) >= t]``).

**Transitive (Broder's clusters).**

1. From each signature produce ``(position_value, doc)`` pairs (position ``i`` with value ``v`` is the token
   ``"i_v"``: values only match at the same position).
2. Group the pairs by token; every two documents in a group share that position.
3. Count the shared positions of each document pair.
4. Join pairs sharing >= t positions with union-find; the connected components are the clusters.

Near-duplication is not transitive, so a cluster may hold two members that share fewer than t positions
with each other, linked through a third; that is Broder's definition. On templated sites such chains join
distinct pages into large clusters (pages that share little but a template, one small edit apart in turn).

:func:`broder_clusters` follows these steps literally (the reference, quadratic in bucket sizes).
:class:`GroupBuilder` with ``linkage="transitive"`` finds the same pairs at scale: each page asks a
:class:`~scrapy_neardup.core.index.SketchIndex` (exact t-of-k retrieval by pigeonhole bands) for the earlier
pages it shares >= t positions with, then joins the index itself, so every pair is found once, from its later
member. :func:`cluster_labels` finds them band by band over an array or memmap of stored signatures.

**Representative (leader) groups.** Pages are taken in a preference order (which page should stay visible);
one sharing ``>= t`` positions with representatives chosen before it joins the one it shares most with (ties:
the better-ranked), otherwise it becomes a representative. Every member is linked to its representative, as
every drop of the crawl pipeline names a kept page it near-duplicates, and no two representatives are linked;
two members of one group share at least ``2t - k`` positions (each differs from the representative in at most
``k - t``). Each group lies within one of Broder's clusters, which a chain may cut into several groups.
:func:`leader_clusters` states the rule literally (the reference); :func:`leader_labels` computes it at scale
from :func:`cluster_labels`' clusters, verifying no more pairs than it needs; :class:`GroupBuilder` (its default
linkage) page by page in order of addition, with an index of the representatives alone.

The code: :mod:`~scrapy_neardup.core.clustering.reference` (both rules stated literally),
:mod:`~scrapy_neardup.core.clustering.builder` (page by page), :mod:`~scrapy_neardup.core.clustering.components`
(Broder's clusters band by band), :mod:`~scrapy_neardup.core.clustering.leaders` (representative groups at scale)
with :mod:`~scrapy_neardup.core.clustering.band_pairs` (its pair searches within clusters), and
:mod:`~scrapy_neardup.core.clustering.union_find`.
"""

from __future__ import annotations

from .builder import DEFAULT_MAX_LINKS, GroupBuilder
from .components import ClusterStats, cluster_labels
from .leaders import FIXED_MEMBER, FIXED_REPRESENTATIVE, FREE, leader_labels
from .reference import broder_clusters, leader_clusters, shared_position_counts
from .union_find import UnionFind

__all__ = [
    "DEFAULT_MAX_LINKS",
    "FIXED_MEMBER",
    "FIXED_REPRESENTATIVE",
    "FREE",
    "ClusterStats",
    "GroupBuilder",
    "UnionFind",
    "broder_clusters",
    "cluster_labels",
    "leader_clusters",
    "leader_labels",
    "shared_position_counts",
]
