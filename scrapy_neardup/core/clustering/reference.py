"""The clustering rules stated literally, quadratic and small: the references the scalable forms are tested
against. :func:`broder_clusters` follows Broder's steps (group ``(position_value, doc)`` pairs by token, count
each pair's shared positions, union-find over the pairs sharing ``>= t``); :func:`leader_clusters` takes rows in
rank order and joins each to the representative chosen before it that it shares most positions with."""

from __future__ import annotations

import numpy as np

from ..stored_signature import shared_counts
from .leaders import FIXED_MEMBER, FIXED_REPRESENTATIVE
from .union_find import UnionFind


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
            shared = int(shared_counts(sigs[rep], sigs[row]))
            if shared > best_shared:
                best, best_shared = rep, shared
        if best < 0:
            representatives.append(row)
            members[row] = []
        else:
            members[best].append(row)
    return [[rep, *members[rep]] for rep in representatives if members[rep]]
