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
"""
from __future__ import annotations

import hashlib
import tempfile
from array import array
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
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
    """Groups of pages fed one at a time, with the 16-bit stored values the indexes compare.

    ``linkage="representative"`` (the default, as ``neardup es groups``): pages are taken in order of addition;
    a page sharing ``>= t`` of the ``k`` positions with one or more representatives added before it joins the one
    it shares most with (ties: the earlier), otherwise it becomes a representative. Every member is linked to its
    representative (the t-of-k rule: flagged with probability ``P[Binomial(k, r) >= t]`` at resemblance ``r``),
    as every page the crawl pipeline drops names a kept page it near-duplicates; the index holds the
    representatives only. :meth:`groups` equals :func:`leader_clusters` over the same signatures in the same
    order.

    ``linkage="transitive"``: Broder's clusters. ``add`` links the page to every earlier page sharing ``>= t``
    positions, so :meth:`groups` equals :func:`broder_clusters` over the same signatures: chains of pages one
    small edit apart join distinct pages into one group.

    A page whose stored signature equals an earlier page's (an exact duplicate, or a copy differing only outside
    the sketch) joins that page's group directly: it would find the same pages, so it is neither queried nor
    indexed, which keeps templates repeated thousands of times linear instead of quadratic.

    Args:
        num_perm: ``k``.
        min_shared: ``t``.
        tag: the sketches' parameter tag (others are refused).
        max_links: transitive linkage: a page links to at most this many earlier pages (the ones sharing most
            positions); more is counted in :attr:`truncated`. It bounds the cost of huge groups of near-identical
            pages and can only split a group if none of the pages beyond the limit links to it another way.
        linkage: ``"representative"`` or ``"transitive"``.

    Attributes:
        pages: pages added. queried: pages looked up in the index (the others had a twin).
        links: pairs joined (a member to its representative, or the lookups' hits, plus twins).
        truncated: pages that hit ``max_links``.
    """

    def __init__(
        self, num_perm: int, min_shared: int, tag: str, *, max_links: int = DEFAULT_MAX_LINKS,
        linkage: str = "representative",
    ) -> None:
        if max_links < 1:
            raise ValueError(f"max_links must be positive, got {max_links}")
        if linkage not in ("representative", "transitive"):
            raise ValueError(f"linkage must be 'representative' or 'transitive', got {linkage!r}")
        self.index = SketchIndex(num_perm, min_shared, tag)
        self.max_links = max_links
        self.linkage = linkage
        self._uf: UnionFind[str] = UnionFind()
        self._first_with: dict[bytes, str] = {}
        # representative linkage: each representative's members (insertion order: representatives in order of
        # addition), and each member's representative
        self._members: dict[str, list[str]] = {}
        self._leader: dict[str, str] = {}
        self.pages = self.queried = self.links = self.truncated = 0

    def add(self, key: str, sketch: Sketch) -> None:
        """Group a non-empty page with the earlier pages it near-duplicates (keys must be unique)."""
        self.add_stored(key, StoredSignature.from_sketch(sketch), sketch.fingerprint)

    def add_stored(self, key: str, stored: StoredSignature, fingerprint: int = 0) -> None:
        """:meth:`add` for a stored signature (as swept from an index) and its fingerprint."""
        self.pages += 1
        digest = hashlib.blake2b(stored.digest(), digest_size=16).digest()
        twin = self._first_with.setdefault(digest, key)
        representative = self.linkage == "representative"
        if twin != key:
            self.links += 1
            if representative:  # the twin's representative is the one this page shares most with too
                self._join(key, self._leader.get(twin, twin))
            else:
                self._uf.union(twin, key)
            return
        self.queried += 1
        page = StoredSketch(stored, fingerprint)
        if representative:
            match = self.index.check_and_add(key, page)
            if match is None:
                self._members[key] = []
            else:
                self.links += 1
                self._join(key, match.key)
            return
        matches = self.index.query_and_add(key, page)
        if len(matches) > self.max_links:
            self.truncated += 1
            matches = matches[: self.max_links]
        self._uf.find(key)
        for match in matches:
            self._uf.union(match.key, key)
        self.links += len(matches)

    def _join(self, key: str, representative: str) -> None:
        self._members[representative].append(key)
        self._leader[key] = representative

    def representative(self, key: str) -> str:
        """Representative linkage: the representative of an added page's group (the page itself if it is one)."""
        if self.linkage != "representative":
            raise ValueError("representative() needs linkage='representative'")
        return self._leader.get(key, key)

    def groups(self) -> list[list[str]]:
        """Groups of two or more pages, each in order of addition (a representative group starts with its
        representative), in order of their first page."""
        if self.linkage == "representative":
            return [[rep, *members] for rep, members in self._members.items() if members]
        return [members for members in self._uf.groups() if len(members) > 1]


class ClusterStats:
    """Counts of :func:`cluster_labels`: ``distinct`` stored signatures, ``twins`` joined to an identical one,
    ``candidates`` pairs compared (band key shared, not yet in one cluster; :func:`leader_labels` adds its own),
    ``links`` pairs sharing >= t that joined two clusters. :func:`leader_labels` also counts its ``rounds``, the
    rows it decided ``sequential``-ly and the most linked pairs it ``held`` at once (9 bytes each)."""

    def __init__(self) -> None:
        self.distinct = self.twins = self.candidates = self.links = 0
        self.rounds = self.sequential = self.held = 0


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
    with _spilled_band_keys(values, distinct, min_shared, chunk, spill_dir) as keys:
        # 3. pairs, band by band
        for band in range(keys.shape[0]):
            column = np.asarray(keys[band, : distinct.size])
            by_key = np.argsort(column, kind="stable")
            sorted_keys = column[by_key]
            del column
            _join_band(values, parent, distinct[by_key], sorted_keys, min_shared, chunk, stats)
            del by_key, sorted_keys
    return _compress(parent), stats


@contextmanager
def _spilled_band_keys(
    values: np.ndarray, rows: np.ndarray, min_shared: int, chunk: int, spill_dir: str | None
) -> Iterator[np.ndarray]:
    """The 32-bit band keys of ``rows`` (``uint32[b, len(rows)]``, band-major: one band is one contiguous
    read), computed in chunks of ``chunk`` rows into a temporary file that is removed on exit."""
    starts = band_bounds(values.shape[1], min_shared)
    with tempfile.TemporaryFile(dir=spill_dir) as spill:
        keys = np.memmap(spill, dtype=np.uint32, mode="w+", shape=(int(starts.size), max(1, rows.size)))
        for lo in range(0, rows.size, chunk):
            part = rows[lo : lo + chunk]
            keys[:, lo : lo + part.size] = (band_sums(_rows(values, part), starts) >> np.uint64(32)).T
        try:
            yield keys
        finally:
            del keys


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
        if distance > 1 and distance & (distance - 1) == 0 and positions.size:  # 2, 4, 8, ...: a few checks
            positions, ends = _drop_joined_runs(parent, rows, run_start, run_end, positions, ends)
        if not positions.size:
            break
        a, b = rows[positions], rows[positions + distance]
        apart = roots[a] != roots[b]  # already joined (as of this band's start): nothing to learn
        _join_verified(values, parent, a[apart], b[apart], min_shared, chunk, stats)
        distance += 1


def _drop_joined_runs(
    parent: np.ndarray, rows: np.ndarray, run_start: np.ndarray, run_end: np.ndarray, positions: np.ndarray,
    ends: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Drop the positions of runs (rows sharing a band key) whose rows are all in one cluster by now: their
    remaining pairs have nothing to join. Without this, a run of ``m`` near-identical rows, joined at distance 1,
    still walked its ``m (m - 1) / 2`` position pairs (minutes for ``m`` = 10,000)."""
    open_ends = ends[np.concatenate(([True], ends[1:] != ends[:-1]))]  # positions ascend, so do their ends
    at = np.searchsorted(run_end, open_ends)
    starts, sizes = run_start[at], open_ends - run_start[at]
    roots = _find(parent, rows[_run_positions(starts, sizes)])
    cuts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    joined = np.minimum.reduceat(roots, cuts) == np.maximum.reduceat(roots, cuts)
    if not joined.any():
        return positions, ends
    keep = ~joined[np.searchsorted(open_ends, ends)]
    return positions[keep], ends[keep]


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
        hit = _shared(values, left, right) >= min_shared
        joined += int(np.count_nonzero(hit))
        _union(parent, left[hit], right[hit])
    if count:
        stats.links += joined
    return joined


def _shared(values: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Positions shared by rows ``a[i]`` and ``b[i]`` (gathered in row order: sequential reads of a memmap)."""
    return np.count_nonzero(_rows(values, a) == _rows(values, b), axis=1)


def _rows(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    order = np.argsort(rows, kind="stable")
    out = np.empty((rows.size, values.shape[1]), dtype=values.dtype)
    out[order] = values[rows[order]]
    return out


def _find(parent: np.ndarray, items: np.ndarray) -> np.ndarray:
    """The roots of ``items``, re-pointing each item to its grandparent as it goes (pointer doubling): joining a
    band's run of ``m`` near-identical rows hooks them into one path of ``m``, which a walk one level a pass took
    ``m`` passes to climb; with the items on that path doubling their jumps, ``log m``."""
    while True:
        up = parent[items]
        grand = parent[up]
        if np.array_equal(up, grand):
            return up
        parent[items] = grand


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


# -- representative linkage (leader clustering) -----------------------------------------------------------------

#: ``fixed`` codes of :func:`leader_labels`: a row to decide, a representative chosen before (it stays one and
#: ranks before every row to decide), a row that stays out (a member of an earlier group).
FREE, FIXED_REPRESENTATIVE, FIXED_MEMBER = 0, 1, 2
_UNDECIDED, _REPRESENTATIVE, _MEMBER = 0, 1, 2
#: The rounds of :func:`_decide` hand over to the in-order pass once the pairs it must verify (estimated on one
#: band) number at most this many per row still in play and rounds stall (two decide under half of the rows
#: left: rank order running along chains), or at once below :data:`_FEW_PAIRS_PER_ROW` (small clusters).
_SEQUENTIAL_PAIRS_PER_ROW = 32
_FEW_PAIRS_PER_ROW = 2
#: Candidate pairs expanded at once by :func:`_earlier_pairs` (memory: a few int64 arrays of this length).
_EXPAND = 1 << 16
#: Rows of whole clusters whose pairs the in-order pass and the final attachment hold at once.
_BATCH_ROWS = 1 << 15


def leader_clusters(
    signatures: np.ndarray, min_shared: int, rank: np.ndarray | None = None, fixed: np.ndarray | None = None
) -> list[list[int]]:
    """The representative rule, literally (the reference of :func:`leader_labels`, quadratic in representatives).

    Rows are taken in ``rank`` order (ascending; default: row order, ties by row). A row sharing ``>= t``
    positions with one or more representatives chosen before it joins the one it shares most positions with
    (ties: the one that ranks first); otherwise it becomes a representative. ``fixed`` as in
    :func:`leader_labels`: fixed representatives come first and stay representatives, fixed members are left out.

    Returns:
        Groups of two or more rows, each ``[representative, *members in rank order]``, in rank order of their
        representatives.
    """
    sigs = np.asarray(signatures)
    keys = np.arange(len(sigs)) if rank is None else np.asarray(rank)
    codes = np.zeros(len(sigs), dtype=np.int8) if fixed is None else np.asarray(fixed)
    order = np.lexsort((keys, codes != FIXED_REPRESENTATIVE))
    representatives: list[int] = []
    members: dict[int, list[int]] = {}
    for row in order.tolist():
        if codes[row] == FIXED_MEMBER:
            continue
        if codes[row] == FIXED_REPRESENTATIVE:
            representatives.append(row)
            members[row] = []
            continue
        best, best_shared = -1, min_shared - 1
        for rep in representatives:  # in rank order: a later one must share strictly more to win
            shared = int(np.count_nonzero(sigs[row] == sigs[rep]))
            if shared > best_shared:
                best, best_shared = rep, shared
        if best < 0:
            representatives.append(row)
            members[row] = []
        else:
            members[best].append(row)
    return [[rep, *members[rep]] for rep in representatives if members[rep]]


def leader_labels(
    values: np.ndarray,
    min_shared: int,
    rank: np.ndarray | Callable[[np.ndarray], np.ndarray],
    *,
    fixed: np.ndarray | None = None,
    chunk: int = 1 << 13,
    spill_dir: str | None = None,
) -> tuple[np.ndarray, ClusterStats]:
    """Leader ("star") clustering of ``n`` stored signatures in rank order: every member of a group shares
    ``>= t`` positions with its representative, and no two representatives do.

    The rule (:func:`leader_clusters` states it literally): rows are taken in ``rank`` order; a row sharing
    ``>= t`` of the ``k`` positions with one or more representatives chosen before it joins the one it shares
    most positions with (ties: the better-ranked one); otherwise it becomes a representative. So a member and
    its representative are linked with probability ``P[Binomial(k, r) >= t]`` at resemblance ``r``, as each
    drop of the crawl pipeline is linked to the kept page it names; two members of one group may share fewer
    (down to ``2t - k`` positions), but never through a chain. Groups are subsets of Broder's clusters
    (:func:`cluster_labels`), which this starts from:

    1. Broder's clusters (:func:`cluster_labels`); rows outside any cluster are representatives alone. In a
       cluster of two rows, the better-ranked one leads the other (they share ``>= t``).
    2. Larger clusters are decided in rounds, band by band on their rows only (pairs are looked for within one
       cluster and one band key, verified on the stored values): an undecided row with an earlier
       representative sharing ``>= t`` becomes a member; one with no earlier undecided row sharing ``>= t``
       becomes a representative (the best-ranked undecided row of each cluster always does, so every round
       decides some). Each row stops looking at its first hit, so a group of ``m`` near-identical rows costs
       ``O(m)`` verifications per band, not the ``m (m - 1) / 2`` of its pairs, and in a rank order unrelated to
       the links few rounds decide everything. Along a chain in rank order (``A ~ B ~ C``, ranked so) a round
       decides about one link; when rounds stall, the pairs left are verified once each and the rows decided
       one by one in rank order, a batch of whole clusters at a time.
    3. Each member joins the representative ranked before it that it shares most positions with (ties: the
       better-ranked one): the pairs of members and earlier representatives, each verified once.

    Memory: :func:`cluster_labels`' (~20 bytes a row), then for the rows of clusters of three or more only:
    ~50 bytes each (row, rank key, cluster, state, one band's sort; their band keys, 4 bytes a band, go to a
    temporary file), and the linked pairs steps 2 and 3 hold, those of one batch of whole clusters
    (:data:`_BATCH_ROWS` rows) at a time, 9 bytes each (17 while sorted). Groups of near-identical rows cost
    their rows, not their pairs; drifting sequences decided in order hold ~20 pairs a row
    (``benchmarks/bench_linkage.py``).

    Args:
        values: ``uint16[n, k]`` stored signatures (may be a ``numpy.memmap``).
        min_shared: ``t``.
        rank: the preference order: ``int64[n]`` keys (smaller ranks first, equal ones in row order), or a
            function giving such keys for an ascending array of rows (called once, with the rows of Broder's
            clusters of two or more: the keys may be costly to compute for every row).
        fixed: optional ``int8[n]``: :data:`FREE` (decide), :data:`FIXED_REPRESENTATIVE` (a representative
            already chosen: it stays one, ranks before every free row, and free rows may join it), or
            :data:`FIXED_MEMBER` (left out: neither joins nor is joined). An incremental run passes the existing
            representatives and members so: new rows join existing groups only through their representatives.
        chunk, spill_dir: as :func:`cluster_labels`.

    Returns:
        ``(labels, stats)``: ``labels[i]`` is the row of row ``i``'s representative (``i`` for representatives,
        rows in no group and :data:`FIXED_MEMBER` rows).
    """
    # The components' array becomes the labels (rows outside any cluster are their own root already): no
    # further 8 bytes a row, as nothing else here is per row of the whole index.
    labels, stats = cluster_labels(values, min_shared, chunk=chunk, spill_dir=spill_dir)
    rows = _clustered_rows(labels, chunk)
    cluster, sizes = np.unique(labels[rows], return_inverse=True, return_counts=True)[1:]
    pair = sizes[cluster] == 2
    del sizes
    fixed_rep = np.zeros(rows.size, dtype=bool)
    if fixed is not None:
        codes = np.asarray(fixed)[rows]
        labels[rows[codes == FIXED_MEMBER]] = rows[codes == FIXED_MEMBER]
        taking = codes != FIXED_MEMBER
        rows, cluster, pair = rows[taking], cluster[taking], pair[taking]
        fixed_rep = codes[taking] == FIXED_REPRESENTATIVE
    if rows.size == 0:
        return labels, stats
    keys = rank(rows) if callable(rank) else np.asarray(rank)[rows]
    # Local index = place in rank order, fixed representatives first: "earlier" is a smaller local index.
    order = np.lexsort((keys, ~fixed_rep))
    rows, cluster, pair, fixed_rep = rows[order], cluster[order], pair[order], fixed_rep[order]
    del keys, order
    state = np.where(fixed_rep, _REPRESENTATIVE, _UNDECIDED).astype(np.int8)
    leader = _leaders(values, rows, cluster.astype(np.int64), pair, state, min_shared, chunk, spill_dir, stats)
    labels[rows] = rows[leader]
    return labels, stats


def _clustered_rows(labels: np.ndarray, chunk: int) -> np.ndarray:
    """The rows in a cluster of two or more (``labels``: each row's root), a chunk of rows at a time."""
    clustered = np.zeros(labels.size, dtype=bool)
    step = chunk * 64
    for lo in range(0, labels.size, step):
        roots = labels[lo : lo + step]
        joined = roots != np.arange(lo, lo + roots.size)
        clustered[lo : lo + roots.size] |= joined
        clustered[roots[joined]] = True
    return np.flatnonzero(clustered)


def _leaders(
    values: np.ndarray, rows: np.ndarray, comp: np.ndarray, pair: np.ndarray, state: np.ndarray, min_shared: int,
    chunk: int, spill_dir: str | None, stats: ClusterStats,
) -> np.ndarray:
    """Steps 1-3 of :func:`leader_labels` on ``rows`` (in rank order, with their cluster ids ``comp``, whether
    their cluster has two rows, and their initial ``state``); returns each one's leader as a local index."""
    leader = np.arange(rows.size, dtype=np.int64)
    present = np.bincount(comp)
    # A row alone in what is left of its cluster (the others left out): nothing to join.
    state[(present[comp] == 1) & (state == _UNDECIDED)] = _REPRESENTATIVE
    # Clusters of two rows: linked directly, the first leads (unless both are fixed representatives).
    two = np.flatnonzero(pair & (present[comp] == 2))
    if two.size:
        two = two[np.argsort(comp[two], kind="stable")]
        first, second = two[0::2], two[1::2]
        state[first] = _REPRESENTATIVE
        joins = state[second] == _UNDECIDED
        state[second[joins]] = _MEMBER
        leader[second[joins]] = first[joins]
    rest = np.flatnonzero(state == _UNDECIDED)
    if rest.size == 0:
        return leader
    # Larger clusters: only their rows take part from here on.
    sub = np.flatnonzero(np.isin(comp, np.unique(comp[rest])))
    sub_state = state[sub]
    with _spilled_band_keys(values, rows[sub], min_shared, chunk, spill_dir) as keys:
        _decide(values, rows[sub], comp[sub], keys, sub_state, min_shared, chunk, stats)
        members = np.flatnonzero(sub_state == _MEMBER)
        if members.size:
            leader[sub[members]] = sub[_best_representatives(
                values, rows[sub], comp[sub], keys, sub_state, min_shared, chunk, stats)[members]]
    state[sub] = sub_state
    return leader


def _decide(
    values: np.ndarray, rows: np.ndarray, comp: np.ndarray, keys: np.ndarray, state: np.ndarray, min_shared: int,
    chunk: int, stats: ClusterStats,
) -> None:
    """Step 2 of :func:`leader_labels`: set every undecided row's ``state`` to representative or member.

    Rounds first: in a rank order unrelated to the links (pages indexed in no order along a chain) few rounds
    decide everything (greedy choices in a random order have logarithmic depth), each costing a band pass over
    the rows in play. Along a chain in rank order each round decides about one link's worth; then the pairs
    left are verified once each and decided in order, when they are few enough (a drifting sequence of pages
    has ~20 a row)."""
    undecided = np.flatnonzero(state == _UNDECIDED)
    left = [undecided.size]  # undecided rows before each round
    while undecided.size:
        in_play = np.zeros(int(comp.max()) + 1, dtype=bool)
        in_play[comp[undecided]] = True
        # Rows that can still matter: undecided ones and the representatives of their clusters.
        live = np.flatnonzero(in_play[comp] & (state != _MEMBER))
        live_state = state[live]
        pairs = _pairs_left(keys, live, comp, live_state == _UNDECIDED)
        stalled = len(left) > 2 and 2 * left[-1] > left[-3]
        if pairs <= _FEW_PAIRS_PER_ROW * live.size or (stalled and pairs <= _SEQUENTIAL_PAIRS_PER_ROW * live.size):
            _decide_in_order(values, rows, comp, keys, live, state, min_shared, chunk, stats)
            return
        stats.rounds += 1
        # An earlier representative sharing >= t: a member.
        if (live_state == _REPRESENTATIVE).any():
            hit = _earlier_hits(values, rows, comp, keys, live, live_state == _UNDECIDED,
                                live_state == _REPRESENTATIVE, min_shared, chunk, stats)
            state[live[hit]] = _MEMBER
        # No earlier undecided row sharing >= t: a representative (its earlier neighbours are all members).
        open_rows = live[state[live] == _UNDECIDED]
        everyone = np.ones(open_rows.size, dtype=bool)
        blocked = _earlier_hits(values, rows, comp, keys, open_rows, everyone, everyone, min_shared, chunk, stats)
        state[open_rows[~blocked]] = _REPRESENTATIVE
        undecided = open_rows[blocked]
        left.append(undecided.size)


def _pairs_left(keys: np.ndarray, live: np.ndarray, comp: np.ndarray, undecided: np.ndarray) -> int:
    """Pairs (undecided row, earlier row) sharing the first band's key and cluster: what deciding the rest in
    order would verify per band."""
    order, start = _buckets(keys[0], live, comp)
    return int((np.arange(live.size) - start)[undecided[order]].sum())


def _decide_in_order(
    values: np.ndarray, rows: np.ndarray, comp: np.ndarray, keys: np.ndarray, live: np.ndarray,
    state: np.ndarray, min_shared: int, chunk: int, stats: ClusterStats,
) -> None:
    """Decide the undecided rows of ``live`` one by one in rank order, from every pair (earlier row, undecided
    row) sharing ``>= t``: what is left once rounds decide few rows each (chains). Clusters are independent, so
    this goes a batch of whole clusters at a time: the pairs held are a batch's."""
    status = bytearray(state.tobytes())
    for batch in _cluster_batches(live, comp):
        undecided = state[batch] == _UNDECIDED
        earlier, later, _ = _earlier_pairs(values, rows, comp, keys, batch, undecided,
                                           np.ones(batch.size, dtype=bool), min_shared, chunk, stats)
        todo = batch[undecided]  # ascending: rank order
        ends = np.searchsorted(later, todo, side="right").tolist()
        starts = np.searchsorted(later, todo).tolist()
        del later
        neighbours = array("i", earlier.tobytes())  # 4 bytes a pair, not a Python int each
        del earlier
        for row, lo, hi in zip(todo.tolist(), starts, ends, strict=True):
            # Earlier rows are decided by now (rank order): a member if one of them is a representative.
            member = any(status[u] == _REPRESENTATIVE for u in neighbours[lo:hi])
            status[row] = _MEMBER if member else _REPRESENTATIVE
        stats.sequential += int(todo.size)
    state[:] = np.frombuffer(bytes(status), dtype=np.int8)


def _best_representatives(
    values: np.ndarray, rows: np.ndarray, comp: np.ndarray, keys: np.ndarray, state: np.ndarray, min_shared: int,
    chunk: int, stats: ClusterStats,
) -> np.ndarray:
    """Step 3 of :func:`leader_labels`: for each member (local index), the earlier representative it shares most
    positions with, ties to the earlier one."""
    best = np.full(rows.size, -1, dtype=np.int64)
    for batch in _cluster_batches(np.flatnonzero(state != _UNDECIDED), comp):
        batch_state = state[batch]
        rep, member, shared = _earlier_pairs(values, rows, comp, keys, batch, batch_state == _MEMBER,
                                             batch_state == _REPRESENTATIVE, min_shared, chunk, stats)
        order = np.lexsort((rep, -shared.astype(np.int16), member))
        member, rep = member[order], rep[order]
        first = np.concatenate(([True], member[1:] != member[:-1]))
        best[member[first]] = rep[first]
    return best


def _cluster_batches(entries: np.ndarray, comp: np.ndarray) -> Iterator[np.ndarray]:
    """``entries`` in batches of whole clusters of about :data:`_BATCH_ROWS` rows (a larger cluster alone), each
    ascending."""
    limit = _BATCH_ROWS
    grouped = entries[np.argsort(comp[entries], kind="stable")]
    clusters = comp[grouped]
    starts = np.flatnonzero(np.concatenate(([True], clusters[1:] != clusters[:-1])))
    lo = 0
    while lo < grouped.size:
        at = int(np.searchsorted(starts, lo + limit))  # the first cluster starting at or past the limit
        hi = int(starts[at]) if at < starts.size else grouped.size
        yield np.sort(grouped[lo:hi])
        lo = hi


def _buckets(band_keys: np.ndarray, entries: np.ndarray, comp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort ``entries`` (ascending local indices) by (cluster, band key), keeping rank order within a bucket;
    return that order and, per sorted position, where its bucket starts."""
    combined = (comp[entries].astype(np.uint64) << np.uint64(32)) | band_keys[entries].astype(np.uint64)
    order = np.argsort(combined, kind="stable")
    combined = combined[order]
    new = np.concatenate(([True], combined[1:] != combined[:-1]))
    start = np.maximum.accumulate(np.where(new, np.arange(combined.size), 0))
    return order, start


def _targets_before(
    band_keys: np.ndarray, entries: np.ndarray, comp: np.ndarray, sources: np.ndarray, targets: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One band's buckets (cluster, band key) of the ``entries`` marked as sources or targets, in rank order:
    ``(taking, target_at, source_at, lo, hi)``, where ``taking`` are the marked entries in bucket order, and the
    targets before the source at ``taking[source_at[i]]`` within its bucket are ``taking[target_at[lo[i] ..
    hi[i]]]`` (none when ``hi[i] < lo[i]``)."""
    taking = np.flatnonzero(sources | targets)
    order, start = _buckets(band_keys, entries[taking], comp)
    taking = taking[order]
    target_at, source_at = np.flatnonzero(targets[taking]), np.flatnonzero(sources[taking])
    hi = np.searchsorted(target_at, source_at) - 1
    lo = np.searchsorted(target_at, start[source_at])
    return taking, target_at, source_at, lo, hi


def _earlier_hits(
    values: np.ndarray, rows: np.ndarray, comp: np.ndarray, keys: np.ndarray, entries: np.ndarray,
    sources: np.ndarray, targets: np.ndarray, min_shared: int, chunk: int, stats: ClusterStats,
) -> np.ndarray:
    """For each of ``entries`` marked in ``sources``: is there an earlier one marked in ``targets``, in its
    cluster, sharing ``>= t``? Band by band (pigeonhole: such a pair shares a band key), nearest earlier
    target first, each source stopping at its first hit."""
    hit = np.zeros(entries.size, dtype=bool)
    open_ = sources.copy()
    for band in range(keys.shape[0]):
        if not open_.any():
            break
        taking, target_at, source_at, lo, hi = _targets_before(keys[band], entries, comp, open_, targets)
        live = np.flatnonzero(hi >= lo)
        found = np.zeros(source_at.size, dtype=bool)
        while live.size:
            a = rows[entries[taking[target_at[hi[live]]]]]
            b = rows[entries[taking[source_at[live]]]]
            stats.candidates += int(live.size)
            ok = _shared_chunked(values, a, b, chunk) >= min_shared
            found[live[ok]] = True
            live = live[~ok]
            hi[live] -= 1
            live = live[hi[live] >= lo[live]]
        done = taking[source_at[found]]
        hit[done] = True
        open_[done] = False
    return hit


def _earlier_pairs(
    values: np.ndarray, rows: np.ndarray, comp: np.ndarray, keys: np.ndarray, entries: np.ndarray,
    sources: np.ndarray, targets: np.ndarray, min_shared: int, chunk: int, stats: ClusterStats,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair (earlier target, source) of ``entries`` in one cluster sharing ``>= t``: ``(target, source,
    shared)``, local indices (int32) and counts, ordered by source then target.

    A pair sharing several band keys is met in each of those bands; it is verified only in the first (its
    earlier band keys are compared: 4 bytes a band, against 2k bytes of values), so each pair once, and
    only the pairs sharing ``>= t`` are kept (9 bytes each)."""
    found: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]] = ([], [], [])
    for band in range(keys.shape[0]):
        taking, target_at, source_at, lo, hi = _targets_before(keys[band], entries, comp, sources, targets)
        counts = np.maximum(hi - lo + 1, 0)
        has = np.flatnonzero(counts)
        for part in _spans(counts[has], _EXPAND):
            picked = has[part]
            j = _run_positions(lo[picked], counts[picked])
            src = entries[taking[np.repeat(source_at[picked], counts[picked])]]
            tgt = entries[taking[target_at[j]]]
            src, tgt = _first_met(keys, band, src, tgt)
            stats.candidates += int(src.size)
            shared = _shared_chunked(values, rows[tgt], rows[src], chunk)
            ok = shared >= min_shared
            for parts, kept in zip(found, (tgt[ok], src[ok], shared[ok]), strict=True):
                parts.append(kept.astype(np.int32 if parts is not found[2] else np.uint8))
    # One array at a time (each list emptied once joined): the peak is the pairs twice, not four times.
    target, source, counts = (_joined(parts, dtype) for parts, dtype in zip(found, (np.int32, np.int32, np.uint8),
                                                                            strict=True))
    stats.held = max(stats.held, int(source.size))
    order = np.lexsort((target, source))
    target = target[order]
    source = source[order]
    return target, source, counts[order]


def _joined(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    joined = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
    parts.clear()
    return joined


def _first_met(keys: np.ndarray, band: int, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pairs ``(a[i], b[i])`` whose keys differ in every band before ``band``: met there first. The nearest
    band first, each pair dropped at its first agreement (close pairs agree in most bands: one look)."""
    alive = np.arange(a.size)
    for earlier in range(band - 1, -1, -1):
        if not alive.size:
            break
        column = np.asarray(keys[earlier])  # an ndarray view: numpy's gather, not memmap's __getitem__
        alive = alive[column[a[alive]] != column[b[alive]]]
    return a[alive], b[alive]


def _spans(counts: np.ndarray, limit: int) -> Iterator[slice]:
    """Consecutive slices of ``counts`` summing to about ``limit`` at most (one item if it alone exceeds it)."""
    total = np.cumsum(counts)
    lo = 0
    while lo < counts.size:
        base = int(total[lo - 1]) if lo else 0
        hi = max(lo + 1, int(np.searchsorted(total, base + limit, side="right")))
        yield slice(lo, hi)
        lo = hi


def _shared_chunked(values: np.ndarray, a: np.ndarray, b: np.ndarray, chunk: int) -> np.ndarray:
    """:func:`_shared` in chunks, gathering rows in the given order: the pairs are within clusters, and the
    signatures were just written, so they are in the page cache, where a gather in row order (``_rows``) measured
    3-4 times slower (its scatter back costs more than the order saves)."""
    array_view = np.asarray(values)  # numpy's gather, not memmap's __getitem__
    out = np.empty(a.size, dtype=np.int64)
    for lo in range(0, a.size, chunk):
        out[lo : lo + chunk] = np.count_nonzero(
            array_view[a[lo : lo + chunk]] == array_view[b[lo : lo + chunk]], axis=1)
    return out
