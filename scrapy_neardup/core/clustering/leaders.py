"""Representative ("leader") groups of many stored signatures in rank order (:func:`leader_labels`): Broder's
clusters first, then within each cluster of three or more, rounds of band-wise checks deciding representatives
and members, an in-order pass when rounds stall along chains, and each member's best earlier representative."""

from __future__ import annotations

from array import array
from collections.abc import Callable

import numpy as np

from .band_pairs import cluster_batches, earlier_hits, earlier_pairs, ordered_buckets
from .components import ClusterStats, cluster_labels, spilled_band_keys

#: ``fixed`` codes of :func:`leader_labels`: a row to decide, a representative chosen before (it stays one and
#: ranks before every row to decide), a row that stays out (a member of an earlier group).
FREE, FIXED_REPRESENTATIVE, FIXED_MEMBER = 0, 1, 2
_UNDECIDED, _REPRESENTATIVE, _MEMBER = 0, 1, 2
#: The rounds of :func:`_decide` hand over to the in-order pass once the pairs it must verify (estimated on one
#: band) number at most this many per row still in play and rounds stall (two decide under half of the rows
#: left: rank order running along chains), or at once below :data:`_FEW_PAIRS_PER_ROW` (small clusters).
_SEQUENTIAL_PAIRS_PER_ROW = 32
_FEW_PAIRS_PER_ROW = 2


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
    (:data:`~scrapy_neardup.core.clustering.band_pairs.BATCH_ROWS` rows) at a time, 9 bytes each (17 while
    sorted). Groups of near-identical rows cost their rows, not their pairs; drifting sequences decided in order
    hold ~20 pairs a row (``benchmarks/bench_linkage.py``).

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
    with spilled_band_keys(values, rows[sub], min_shared, chunk, spill_dir) as keys:
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
            hit = earlier_hits(values, rows, comp, keys, live, live_state == _UNDECIDED,
                                live_state == _REPRESENTATIVE, min_shared, chunk, stats)
            state[live[hit]] = _MEMBER
        # No earlier undecided row sharing >= t: a representative (its earlier neighbours are all members).
        open_rows = live[state[live] == _UNDECIDED]
        everyone = np.ones(open_rows.size, dtype=bool)
        blocked = earlier_hits(values, rows, comp, keys, open_rows, everyone, everyone, min_shared, chunk, stats)
        state[open_rows[~blocked]] = _REPRESENTATIVE
        undecided = open_rows[blocked]
        left.append(undecided.size)


def _pairs_left(keys: np.ndarray, live: np.ndarray, comp: np.ndarray, undecided: np.ndarray) -> int:
    """Pairs (undecided row, earlier row) sharing the first band's key and cluster: what deciding the rest in
    order would verify per band."""
    order, start = ordered_buckets(keys[0], live, comp)
    return int((np.arange(live.size) - start)[undecided[order]].sum())


def _decide_in_order(
    values: np.ndarray, rows: np.ndarray, comp: np.ndarray, keys: np.ndarray, live: np.ndarray,
    state: np.ndarray, min_shared: int, chunk: int, stats: ClusterStats,
) -> None:
    """Decide the undecided rows of ``live`` one by one in rank order, from every pair (earlier row, undecided
    row) sharing ``>= t``: what is left once rounds decide few rows each (chains). Clusters are independent, so
    this goes a batch of whole clusters at a time: the pairs held are a batch's."""
    status = bytearray(state.tobytes())
    for batch in cluster_batches(live, comp):
        undecided = state[batch] == _UNDECIDED
        earlier, later, _ = earlier_pairs(values, rows, comp, keys, batch, undecided,
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
    for batch in cluster_batches(np.flatnonzero(state != _UNDECIDED), comp):
        batch_state = state[batch]
        rep, member, shared = earlier_pairs(values, rows, comp, keys, batch, batch_state == _MEMBER,
                                             batch_state == _REPRESENTATIVE, min_shared, chunk, stats)
        order = np.lexsort((rep, -shared.astype(np.int16), member))
        member, rep = member[order], rep[order]
        first = np.concatenate(([True], member[1:] != member[:-1]))
        best[member[first]] = rep[first]
    return best

