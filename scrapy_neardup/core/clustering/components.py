"""Broder's clusters of many stored signatures, band by band, in bounded memory (:func:`cluster_labels`): identical
rows joined first, then per band the rows sharing a band key compared and joined with a vectorized union-find."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from ..stored_signature import band_bounds, band_sums, shared_counts
from .union_find import compress, find_roots, union_pairs


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
    2. The band keys of the distinct rows (32 bits each, :func:`scrapy_neardup.core.stored_signature.band_keys`) are
       computed in one pass, in chunks of ``chunk`` rows, and spilled to a temporary file, band-major.
    3. Per band: sort its keys, take every pair of rows sharing the key whose clusters differ so far, count
       their shared positions (rows gathered from ``values``, which may be a ``numpy.memmap``) and join the
       ones sharing ``>= t`` (a vectorized union-find: roots point to smaller row numbers).

    Memory: ``values`` is only read (a memmap stays on disk); resident per row are the parent array (8 bytes)
    and, for one band at a time, its keys and their sort order (12 bytes): about 20 bytes a row plus the
    pairs of the largest shared-key bucket. Pairs in a bucket of ``m`` rows cost ``m (m - 1) / 2`` comparisons
    (the quadratic worst case of templated pages that differ slightly; identical ones are joined in step 1).

    Args:
        values: ``uint16[n, k]`` stored signatures (:func:`scrapy_neardup.core.stored_signature.stored_values`).
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
    with spilled_band_keys(values, distinct, min_shared, chunk, spill_dir) as keys:
        # 3. pairs, band by band
        for band in range(keys.shape[0]):
            column = np.asarray(keys[band, : distinct.size])
            by_key = np.argsort(column, kind="stable")
            sorted_keys = column[by_key]
            del column
            _join_band(values, parent, distinct[by_key], sorted_keys, min_shared, chunk, stats)
            del by_key, sorted_keys
    return compress(parent), stats


@contextmanager
def spilled_band_keys(
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
    positions = run_positions(run_start[multi], sizes[multi])
    ends = np.repeat(run_end[multi], sizes[multi])
    roots = compress(parent)
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
    roots = find_roots(parent, rows[run_positions(starts, sizes)])
    cuts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    joined = np.minimum.reduceat(roots, cuts) == np.maximum.reduceat(roots, cuts)
    if not joined.any():
        return positions, ends
    keep = ~joined[np.searchsorted(open_ends, ends)]
    return positions[keep], ends[keep]


def run_positions(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
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
        union_pairs(parent, left[hit], right[hit])
    if count:
        stats.links += joined
    return joined


def _shared(values: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Positions shared by rows ``a[i]`` and ``b[i]`` (gathered in row order: sequential reads of a memmap)."""
    return shared_counts(_rows(values, a), _rows(values, b))


def _rows(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    order = np.argsort(rows, kind="stable")
    out = np.empty((rows.size, values.shape[1]), dtype=values.dtype)
    out[order] = values[rows[order]]
    return out

