"""Broder's clustering of near-duplicates: shared sketch positions per pair, then union-find.

1. From each signature produce ``(position_value, doc)`` pairs (position ``i`` with value ``v`` is the token
   ``"i_v"``: values only match at the same position).
2. Group the pairs by token; every two documents in a group share that position.
3. Count the shared positions of each document pair.
4. Join pairs sharing >= t positions with union-find; the connected components are the clusters.

Near-duplication is not transitive, so a cluster may hold two members that share fewer than t positions
with each other, linked through a third; that is Broder's definition, and what search engines collapse.

:func:`broder_clusters` follows these steps literally (the reference, quadratic in bucket sizes).
:class:`GroupBuilder` finds the same pairs at scale: each page asks a :class:`~scrapy_neardup.core.index.SketchIndex`
(exact t-of-k retrieval by pigeonhole bands) for the earlier pages it shares >= t positions with, then joins
the index itself, so every pair is found once, from its later member.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable
from typing import Generic, TypeVar

import numpy as np

from .index import SketchIndex
from .sketch import Sketch
from .stored import StoredSignature

T = TypeVar("T", bound=Hashable)

#: Links a page makes to earlier pages at most (the ones sharing most positions) in :class:`GroupBuilder`.
DEFAULT_MAX_LINKS = 10_000


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




class GroupBuilder:
    """Broder clusters of pages fed one at a time, with the 16-bit stored values the indexes compare.

    ``add(key, sketch)`` links the page to every earlier page sharing ``>= t`` of the ``k`` positions (the
    t-of-k rule: flagged with probability ``P[Binomial(k, r) >= t]`` at resemblance ``r``), so
    :meth:`groups` equals :func:`broder_clusters` over the same signatures. A page whose stored signature
    equals an earlier page's (an exact duplicate, or a copy differing only outside the sketch) is joined to
    that page directly: it would find the same pages, so it is neither queried nor indexed, which keeps
    templates repeated thousands of times linear instead of quadratic.

    Args:
        num_perm: ``k``.
        min_shared: ``t``.
        tag: the sketches' parameter tag (others are refused).
        max_links: a page links to at most this many earlier pages (the ones sharing most positions); more
            is counted in :attr:`truncated`. It bounds the cost of huge groups of near-identical pages and
            can only split a group if none of the pages beyond the limit links to it another way.

    Attributes:
        pages: pages added. queried: pages looked up in the index (the others had a twin).
        links: pairs joined (lookups' hits plus twins). truncated: pages that hit ``max_links``.
    """

    def __init__(self, num_perm: int, min_shared: int, tag: str, *, max_links: int = DEFAULT_MAX_LINKS) -> None:
        if max_links < 1:
            raise ValueError(f"max_links must be positive, got {max_links}")
        self.index = SketchIndex(num_perm, min_shared, tag)
        self.max_links = max_links
        self._uf: UnionFind[str] = UnionFind()
        self._first_with: dict[bytes, str] = {}
        self.pages = self.queried = self.links = self.truncated = 0

    def add(self, key: str, sketch: Sketch) -> None:
        """Link a non-empty page to the earlier pages it near-duplicates (keys must be unique)."""
        self.add_stored(key, StoredSignature.from_sketch(sketch), sketch.fingerprint)

    def add_stored(self, key: str, stored: StoredSignature, fingerprint: int = 0) -> None:
        """:meth:`add` for a stored signature (as swept from an index) and its fingerprint."""
        self.pages += 1
        digest = hashlib.blake2b(stored.digest(), digest_size=16).digest()
        twin = self._first_with.setdefault(digest, key)
        if twin != key:
            self._uf.union(twin, key)
            self.links += 1
            return
        self.queried += 1
        matches = self.index.query_and_add_stored(key, stored, fingerprint)
        if len(matches) > self.max_links:
            self.truncated += 1
            matches = matches[: self.max_links]
        self._uf.find(key)
        for match in matches:
            self._uf.union(match.key, key)
        self.links += len(matches)

    def groups(self) -> list[list[str]]:
        """Groups of two or more pages, each in order of addition, in order of their first page."""
        return [members for members in self._uf.groups() if len(members) > 1]
