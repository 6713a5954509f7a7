"""Pairs within clusters, band by band, for :func:`~scrapy_neardup.core.clustering.leader_labels`: rows are
bucketed by (cluster, band key) in rank order, so the earlier rows a row may share ``>= t`` positions with are
the ones before it in its buckets (pigeonhole); :func:`earlier_hits` stops each row at its first verified hit,
:func:`earlier_pairs` verifies each pair once, in the first band it shares."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..stored_signature import shared_counts
from .components import ClusterStats, run_positions

#: Candidate pairs expanded at once by :func:`earlier_pairs` (memory: a few int64 arrays of this length).
EXPAND = 1 << 16
#: Rows of whole clusters whose pairs the in-order pass and the final attachment hold at once.
BATCH_ROWS = 1 << 15


def cluster_batches(entries: np.ndarray, comp: np.ndarray) -> Iterator[np.ndarray]:
    """``entries`` in batches of whole clusters of about :data:`BATCH_ROWS` rows (a larger cluster alone), each
    ascending."""
    limit = BATCH_ROWS
    grouped = entries[np.argsort(comp[entries], kind="stable")]
    clusters = comp[grouped]
    starts = np.flatnonzero(np.concatenate(([True], clusters[1:] != clusters[:-1])))
    lo = 0
    while lo < grouped.size:
        at = int(np.searchsorted(starts, lo + limit))  # the first cluster starting at or past the limit
        hi = int(starts[at]) if at < starts.size else grouped.size
        yield np.sort(grouped[lo:hi])
        lo = hi


def ordered_buckets(band_keys: np.ndarray, entries: np.ndarray, comp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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
    order, start = ordered_buckets(band_keys, entries[taking], comp)
    taking = taking[order]
    target_at, source_at = np.flatnonzero(targets[taking]), np.flatnonzero(sources[taking])
    hi = np.searchsorted(target_at, source_at) - 1
    lo = np.searchsorted(target_at, start[source_at])
    return taking, target_at, source_at, lo, hi


def earlier_hits(
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


def earlier_pairs(
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
        for part in _spans(counts[has], EXPAND):
            picked = has[part]
            j = run_positions(lo[picked], counts[picked])
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
    """Positions shared by rows ``a[i]`` and ``b[i]`` in chunks, gathering rows in the given order: the pairs are
    within clusters, and the signatures were just written, so they are in the page cache, where a gather in row
    order (as :func:`~scrapy_neardup.core.clustering.components.cluster_labels` does) measured 3-4 times slower
    (its scatter back costs more than the order saves)."""
    array_view = np.asarray(values)  # numpy's gather, not memmap's __getitem__
    out = np.empty(a.size, dtype=np.int64)
    for lo in range(0, a.size, chunk):
        out[lo : lo + chunk] = shared_counts(array_view[a[lo : lo + chunk]], array_view[b[lo : lo + chunk]])
    return out
