"""Union-find, twice: :class:`UnionFind` over any hashable items (pages fed one at a time), and the same on an
array of row numbers, vectorized (:func:`find_roots`, :func:`union_pairs`, :func:`compress`), for the band pass
of :func:`~scrapy_neardup.core.clustering.cluster_labels` over millions of rows."""

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


def find_roots(parent: np.ndarray, items: np.ndarray) -> np.ndarray:
    """The roots of ``items``, re-pointing each item to its grandparent as it goes (pointer doubling): joining a
    band's run of ``m`` near-identical rows hooks them into one path of ``m``, which a walk one level a pass took
    ``m`` passes to climb; with the items on that path doubling their jumps, ``log m``."""
    while True:
        up = parent[items]
        grand = parent[up]
        if np.array_equal(up, grand):
            return up
        parent[items] = grand


def union_pairs(parent: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """Join the sets of each pair: the larger root is hooked onto the smaller (so no cycles), repeated for
    the pairs whose roots a competing hook moved."""
    while a.size:
        root_a, root_b = find_roots(parent, a), find_roots(parent, b)
        apart = root_a != root_b
        if not apart.any():
            return
        a, b, root_a, root_b = a[apart], b[apart], root_a[apart], root_b[apart]
        np.minimum.at(parent, np.maximum(root_a, root_b), np.minimum(root_a, root_b))


def compress(parent: np.ndarray) -> np.ndarray:
    """Every item's root (full path compression)."""
    while True:
        up = parent[parent]
        if np.array_equal(up, parent):
            return parent
        parent = up
