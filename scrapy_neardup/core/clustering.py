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
import tempfile
from collections.abc import Hashable
from typing import Generic, TypeVar

import numpy as np

from .index import SketchIndex
from .sketch import Sketch
from .stored import StoredSignature, StoredSketch, band_bounds, band_sums

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
        matches = self.index.query_and_add(key, StoredSketch(stored, fingerprint))
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


class ClusterStats:
    """Counts of :func:`cluster_labels`: ``distinct`` stored signatures, ``twins`` joined to an identical one,
    ``candidates`` pairs compared (band key shared, not yet in one cluster), ``links`` pairs sharing >= t."""

    def __init__(self) -> None:
        self.distinct = self.twins = self.candidates = self.links = 0


def cluster_labels(
    values: np.ndarray, min_shared: int, *, chunk: int = 1 << 13, spill_dir: str | None = None
) -> tuple[np.ndarray, ClusterStats]:
    """Broder's clusters of ``n`` stored signatures, band by band, in bounded memory.

    Labels equal for two rows exactly when :func:`broder_clusters` puts them in one cluster (rows in no
    cluster get their own label): the pairs sharing ``>= t`` of the ``k`` positions are all found because,
    cut into ``b = k - t + 1`` bands, two such signatures agree on a whole band (pigeonhole).

    1. Identical rows (a 64-bit multiply-shift hash of the row, then verified) are joined; only the first of
       each is kept for the bands.
    2. The band keys of the distinct rows (32 bits each, :func:`scrapy_neardup.core.stored.band_keys`) are
       computed in one pass, in chunks of ``chunk`` rows, and spilled to a temporary file, band-major.
    3. Per band: sort its keys, take every pair of rows sharing the key whose clusters differ so far, count
       their shared positions (rows gathered from ``values``, which may be a ``numpy.memmap``) and join the
       ones sharing ``>= t`` (a vectorized union-find: roots point to smaller row numbers).

    Memory: ``values`` is only read (a memmap stays on disk); resident per row are the parent array (8 bytes)
    and, for one band at a time, its keys and their sort order (12 bytes): about 20 bytes a row plus the
    pairs of the largest shared-key bucket. Pairs in a bucket of ``m`` rows cost ``m (m - 1) / 2`` comparisons
    (the quadratic worst case of templated pages that differ slightly; identical ones are joined in step 1).

    Args:
        values: ``uint16[n, k]`` stored signatures (:func:`scrapy_neardup.core.stored.stored_values`).
        min_shared: ``t``.
        chunk: rows per numpy pass.
        spill_dir: directory of the temporary band-key file (default: the system's).

    Returns:
        ``(labels, stats)``: ``labels[i]`` is the smallest row of row ``i``'s cluster.
    """
    n, k = values.shape
    stats = ClusterStats()
    parent = np.arange(n, dtype=np.int64)
    if n < 2:
        stats.distinct = n
        return parent, stats
    # 1. identical rows
    row_hash = np.empty(n, dtype=np.uint64)
    whole = np.zeros(1, dtype=np.int64)
    for lo in range(0, n, chunk):
        row_hash[lo : lo + chunk] = band_sums(np.asarray(values[lo : lo + chunk]), whole)[:, 0]
    order = np.argsort(row_hash, kind="stable")
    same = np.flatnonzero(row_hash[order[1:]] == row_hash[order[:-1]])
    del row_hash
    stats.twins = _join_verified(values, parent, order[same], order[same + 1], k, chunk, stats, count=False)
    first = np.ones(n, dtype=bool)
    first[order[same + 1]] = False
    del order, same
    distinct = np.flatnonzero(first)
    del first
    stats.distinct = int(distinct.size)
    # 2. band keys of the distinct rows, spilled band-major
    starts = band_bounds(k, min_shared)
    bands = int(starts.size)
    with tempfile.TemporaryFile(dir=spill_dir) as spill:
        keys = np.memmap(spill, dtype=np.uint32, mode="w+", shape=(bands, max(1, distinct.size)))
        for lo in range(0, distinct.size, chunk):
            rows = distinct[lo : lo + chunk]
            keys[:, lo : lo + rows.size] = (band_sums(np.asarray(values[rows]), starts) >> np.uint64(32)).T
        # 3. pairs, band by band
        for band in range(bands):
            column = np.asarray(keys[band, : distinct.size])
            by_key = np.argsort(column, kind="stable")
            sorted_keys = column[by_key]
            del column
            _join_band(values, parent, distinct[by_key], sorted_keys, min_shared, chunk, stats)
            del by_key, sorted_keys
        del keys
    return _compress(parent), stats


def _join_band(
    values: np.ndarray, parent: np.ndarray, rows: np.ndarray, sorted_keys: np.ndarray, min_shared: int,
    chunk: int, stats: ClusterStats,
) -> None:
    """Join the pairs of ``rows`` (ordered by their band key) that share a key and ``>= t`` positions."""
    equal = sorted_keys[1:] == sorted_keys[:-1]
    if not equal.any():
        return
    # Positions in runs of equal keys, with each run's end: pairs (p, p + d) for d = 1, 2, ... within a run.
    run_start = np.flatnonzero(np.concatenate(([True], ~equal)))
    run_end = np.append(run_start[1:], rows.size)
    sizes = run_end - run_start
    multi = sizes > 1
    positions = _run_positions(run_start[multi], sizes[multi])
    ends = np.repeat(run_end[multi], sizes[multi])
    roots = _compress(parent)
    parent[:] = roots
    distance = 1
    while positions.size:
        inside = positions + distance < ends
        positions, ends = positions[inside], ends[inside]
        if not positions.size:
            break
        a, b = rows[positions], rows[positions + distance]
        apart = roots[a] != roots[b]  # already joined (as of this band's start): nothing to learn
        _join_verified(values, parent, a[apart], b[apart], min_shared, chunk, stats)
        distance += 1


def _run_positions(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + m) for s, m in zip(starts, sizes)])`` without a Python loop."""
    offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(sizes)[:-1])), sizes)
    return np.arange(int(sizes.sum())) + offsets


def _join_verified(
    values: np.ndarray, parent: np.ndarray, a: np.ndarray, b: np.ndarray, min_shared: int, chunk: int,
    stats: ClusterStats, *, count: bool = True,
) -> int:
    """Join the pairs ``(a[i], b[i])`` sharing ``>= min_shared`` positions; return how many did."""
    joined = 0
    for lo in range(0, a.size, chunk):
        left, right = a[lo : lo + chunk], b[lo : lo + chunk]
        if count:
            stats.candidates += int(left.size)
        # Gather in row order: sequential reads of a memmap.
        shared = np.count_nonzero(_rows(values, left) == _rows(values, right), axis=1)
        hit = shared >= min_shared
        joined += int(np.count_nonzero(hit))
        _union(parent, left[hit], right[hit])
    if count:
        stats.links += joined
    return joined


def _rows(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    order = np.argsort(rows, kind="stable")
    out = np.empty((rows.size, values.shape[1]), dtype=values.dtype)
    out[order] = values[rows[order]]
    return out


def _find(parent: np.ndarray, items: np.ndarray) -> np.ndarray:
    roots = parent[items]
    while True:
        up = parent[roots]
        if np.array_equal(up, roots):
            return roots
        roots = up


def _union(parent: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """Join the sets of each pair: the larger root is hooked onto the smaller (so no cycles), repeated for
    the pairs whose roots a competing hook moved."""
    while a.size:
        root_a, root_b = _find(parent, a), _find(parent, b)
        apart = root_a != root_b
        if not apart.any():
            return
        a, b, root_a, root_b = a[apart], b[apart], root_a[apart], root_b[apart]
        np.minimum.at(parent, np.maximum(root_a, root_b), np.minimum(root_a, root_b))


def _compress(parent: np.ndarray) -> np.ndarray:
    """Every item's root (full path compression)."""
    while True:
        up = parent[parent]
        if np.array_equal(up, parent):
            return parent
        parent = up
