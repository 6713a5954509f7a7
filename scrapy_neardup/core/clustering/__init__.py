"""Clustering near-duplicates: Broder's transitive clusters, and groups around representatives.

Design notes: docs/architecture.md#scrapy_neardupcoreclustering
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
