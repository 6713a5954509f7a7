"""Broder's clustering of near-duplicates: shared sketch positions per pair, then union-find.

1. From each signature produce ``(position_value, doc)`` pairs (position ``i`` with value ``v`` is the token
   ``"i_v"``: values only match at the same position).
2. Group the pairs by token; every two documents in a group share that position.
3. Count the shared positions of each document pair.
4. Join pairs sharing >= t positions with union-find; the connected components are the clusters.

Near-duplication is not transitive, so a cluster may hold two members that share fewer than t positions
with each other, linked through a third; that is Broder's definition, and what search engines collapse.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

import numpy as np

T = TypeVar("T", bound=Hashable)


class UnionFind(Generic[T]):
    """Disjoint sets with path halving and union by size; items are added on first sight."""

    def __init__(self) -> None:
        self._parent: dict[T, T] = {}
        self._size: dict[T, int] = {}

    def find(self, item: T) -> T:
        """The representative of ``item``'s set (adding ``item`` as a singleton if new)."""
        parent = self._parent
        if item not in parent:
            parent[item] = item
            self._size[item] = 1
            return item
        while parent[item] != item:
            parent[item] = parent[parent[item]]
            item = parent[item]
        return item

    def union(self, a: T, b: T) -> T:
        """Merge the sets of ``a`` and ``b``; returns the new representative."""
        root_a, root_b = self.find(a), self.find(b)
        if root_a == root_b:
            return root_a
        if self._size[root_a] < self._size[root_b]:
            root_a, root_b = root_b, root_a
        self._parent[root_b] = root_a
        self._size[root_a] += self._size.pop(root_b)
        return root_a

    def groups(self) -> list[list[T]]:
        """All sets, each in first-seen order, in order of their first-seen member."""
        members: dict[T, list[T]] = {}
        for item in self._parent:
            members.setdefault(self.find(item), []).append(item)
        return list(members.values())


def shared_position_counts(signatures: np.ndarray) -> dict[tuple[int, int], int]:
    """Steps 1-3: ``{(i, j): shared positions}`` for every pair ``i < j`` sharing at least one position.

    Args:
        signatures: ``(n, k)`` array, one signature per row.
    """
    sigs = np.asarray(signatures)
    n, k = sigs.shape
    counts: dict[tuple[int, int], int] = {}
    for position in range(k):
        column = sigs[:, position]
        order = np.argsort(column, kind="stable")
        values = column[order]
        cuts = np.flatnonzero(np.diff(values)) + 1
        for group in np.split(order, cuts):
            if group.size < 2:
                continue
            members = sorted(group.tolist())
            for a_pos, a in enumerate(members):
                for b in members[a_pos + 1 :]:
                    counts[(a, b)] = counts.get((a, b), 0) + 1
    return counts


def broder_clusters(signatures: np.ndarray, min_shared: int) -> list[list[int]]:
    """Clusters (row indices, ascending) of two or more documents linked by pairs sharing >= t positions."""
    uf: UnionFind[int] = UnionFind()
    for (a, b), shared in shared_position_counts(signatures).items():
        if shared >= min_shared:
            uf.union(a, b)
    return sorted(sorted(group) for group in uf.groups() if len(group) > 1)


