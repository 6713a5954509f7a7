"""Representative ("leader") clustering against its literal statement and Broder's transitive clustering: planted
chains, cliques, drifting sequences and exact copies, in random rank orders, with fixed representatives and
members (incremental runs), on both of its paths (rounds and the in-order pass)."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_neardup.core.clustering import (
    FIXED_MEMBER,
    FIXED_REPRESENTATIVE,
    FREE,
    band_pairs,
    broder_clusters,
    cluster_labels,
    leader_clusters,
    leader_labels,
    leaders,
)

K, T = 32, 24  # 9 bands; a pair sharing >= 24 of 32 agrees on one of them


def _changed(rng: np.random.Generator, row: np.ndarray, count: int, avoid: np.ndarray | None = None) -> np.ndarray:
    """``row`` with ``count`` positions given fresh values (none of the positions in ``avoid``)."""
    free = np.setdiff1d(np.arange(K), avoid if avoid is not None else [])
    spots = rng.choice(free, size=count, replace=False)
    out = row.copy()
    out[spots] = rng.integers(0, 1 << 16, size=count) ^ 0x5A5A  # a value the row did not hold there (almost surely)
    return out


def chain(rng: np.random.Generator) -> np.ndarray:
    """A ~ B, B ~ C, A !~ C: each link changes 6 positions (26 of 32 shared), A and C differ in 12 (20 shared)."""
    a = rng.integers(0, 1 << 16, size=K, dtype=np.uint16)
    b = _changed(rng, a, 6)
    c = _changed(rng, b, 6, avoid=np.flatnonzero(a != b))
    return np.stack([a, b, c])


def planted(seed: int) -> np.ndarray:
    """Chains, cliques of near-identical rows, drifting sequences (each row one position off the last: a row
    near-duplicates its neighbours up to 8 steps away), exact copies and unrelated rows, shuffled."""
    rng = np.random.default_rng(seed)
    parts = [chain(rng) for _ in range(int(rng.integers(3, 8)))]
    for _ in range(int(rng.integers(1, 4))):
        base = rng.integers(0, 1 << 16, size=K, dtype=np.uint16)
        parts.append(np.stack([_changed(rng, base, int(rng.integers(0, 5))) for _ in range(int(rng.integers(3, 40)))]))
    for _ in range(int(rng.integers(1, 3))):
        rows = [rng.integers(0, 1 << 16, size=K, dtype=np.uint16)]
        for _ in range(int(rng.integers(5, 60))):
            rows.append(_changed(rng, rows[-1], 1))
        parts.append(np.stack(rows))
    parts.append(rng.integers(0, 1 << 16, size=(int(rng.integers(10, 60)), K), dtype=np.uint16))
    values = np.concatenate(parts)
    copies = rng.integers(0, len(values), size=int(rng.integers(2, 12)))
    values = np.concatenate([values, values[copies]])
    return values[rng.permutation(len(values))]


def noisy(seed: int) -> np.ndarray:
    """Rows over a 5-value alphabet: many pairs share a band by chance, many groups overlap."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(60, 300))
    bases = rng.integers(0, 5, size=(n // 6 + 1, K))
    values = bases[rng.integers(0, bases.shape[0], n)]
    noise = rng.random((n, K)) < rng.uniform(0.02, 0.2)
    values[noise] = rng.integers(0, 5, size=int(noise.sum()))
    return values.astype(np.uint16)


def groups_of(labels: np.ndarray, rank: np.ndarray, fixed: np.ndarray | None = None) -> list[list[int]]:
    """``leader_labels``' labels in ``leader_clusters``' form: [representative, *members in rank order]."""
    codes = np.zeros(labels.size, dtype=np.int8) if fixed is None else fixed
    position = np.empty(labels.size, dtype=np.int64)
    position[np.lexsort((rank, codes != FIXED_REPRESENTATIVE))] = np.arange(labels.size)
    members: dict[int, list[int]] = {}
    for row, label in enumerate(labels.tolist()):
        if row != label:
            members.setdefault(label, []).append(row)
    return [[rep, *sorted(rows, key=position.__getitem__)] for rep, rows in
            sorted(members.items(), key=lambda item: position[item[0]])]


def shared(values: np.ndarray, a: int, b: int) -> int:
    return int(np.count_nonzero(values[a] == values[b]))


def check_invariants(values: np.ndarray, groups: list[list[int]], rank: np.ndarray) -> None:
    """Every member shares >= t with its representative, which ranks before it; no two representatives share
    >= t; every group lies in one of Broder's clusters."""
    representatives = [g[0] for g in groups] + sorted(
        set(range(len(values))) - {row for g in groups for row in g})
    for group in groups:
        assert all(shared(values, group[0], m) >= T and rank[group[0]] < rank[m] for m in group[1:]), group
    reps = np.array(representatives)
    counts = np.count_nonzero(values[reps][:, None, :] == values[reps][None, :, :], axis=2)
    np.fill_diagonal(counts, 0)
    assert counts.max(initial=0) < T
    broder = {row: i for i, cluster in enumerate(broder_clusters(values, T)) for row in cluster}
    for group in groups:
        assert len({broder[row] for row in group}) == 1


def test_a_chain_is_one_transitive_group_but_not_one_representative_group() -> None:
    """A ~ B, B ~ C, A !~ C. Broder's components put all three together; the representative rule keeps A and B
    together and C alone (it shares too few positions with A, and B is no representative); taken from the
    other end, C leads B and A is alone."""
    values = chain(np.random.default_rng(1))
    assert (shared(values, 0, 1), shared(values, 1, 2), shared(values, 0, 2)) == (26, 26, 20)
    assert broder_clusters(values, T) == [[0, 1, 2]]
    labels, _ = cluster_labels(values, T)
    assert len(set(labels.tolist())) == 1
    forward = np.array([0, 1, 2])
    assert leader_clusters(values, T, forward) == [[0, 1]]
    assert groups_of(leader_labels(values, T, forward)[0], forward) == [[0, 1]]
    backward = np.array([2, 1, 0])
    assert leader_clusters(values, T, backward) == [[2, 1]]
    assert groups_of(leader_labels(values, T, backward)[0], backward) == [[2, 1]]
    # B first: both ends join it, one star of three.
    middle = np.array([1, 0, 2])
    assert groups_of(leader_labels(values, T, middle)[0], middle) == [[1, 0, 2]]


def test_a_member_joins_the_representative_it_shares_most_with_ties_to_the_better_ranked() -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(0, 1 << 16, size=K, dtype=np.uint16)
    b = _changed(rng, a, 12)  # 20 shared with a: both stay representatives
    page = a.copy()
    page[np.flatnonzero(a != b)[:6]] = b[np.flatnonzero(a != b)[:6]]  # 26 with a, 26 with b
    closer = page.copy()
    closer[np.flatnonzero(a != b)[6:8]] = b[np.flatnonzero(a != b)[6:8]]  # 24 with a, 28 with b
    values = np.stack([a, b, page, closer])
    assert [shared(values, 2, 0), shared(values, 2, 1), shared(values, 3, 0), shared(values, 3, 1)] == [
        26, 26, 24, 28]
    for rank in (np.array([0, 1, 2, 3]), np.array([1, 0, 2, 3])):
        groups = groups_of(leader_labels(values, T, rank)[0], rank)
        assert groups == leader_clusters(values, T, rank)
        # The tie goes to whichever of a and b ranks first; closer shares more with b either way.
        expected = {0: [2], 1: [3]} if rank[0] < rank[1] else {1: [2, 3]}
        assert {g[0]: g[1:] for g in groups} == expected


@pytest.mark.parametrize("path", ["rounds", "in-order"])
@pytest.mark.parametrize("seed", range(8))
def test_leader_labels_equal_the_literal_rule(seed: int, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On planted and noisy signatures, in random rank orders, through either path of step 2 (with the clusters
    taken a few at a time)."""
    for threshold in ("_SEQUENTIAL_PAIRS_PER_ROW", "_FEW_PAIRS_PER_ROW"):
        monkeypatch.setattr(leaders, threshold, -1 if path == "rounds" else 10**9)
    monkeypatch.setattr(band_pairs, "BATCH_ROWS", 7)  # several batches of clusters, and clusters above it
    rng = np.random.default_rng(100 + seed)
    for values in (planted(seed), noisy(seed)):
        rank = rng.permutation(len(values))
        labels, stats = leader_labels(values, T, rank, chunk=17)
        groups = groups_of(labels, rank)
        assert groups == leader_clusters(values, T, rank)
        check_invariants(values, groups, rank)
        assert (stats.rounds > 0) == (path == "rounds" and any(len(g) > 2 for g in broder_clusters(values, T)))
    # The planted chains are split; Broder's components join them.
    values = planted(seed)
    rank = np.arange(len(values))
    broder = broder_clusters(values, T)
    leader = leader_clusters(values, T, rank)
    assert sum(len(c) for c in broder) > sum(len(g) for g in leader)


@pytest.mark.parametrize("seed", range(6))
def test_fixed_representatives_stay_and_fixed_members_are_left_out(seed: int) -> None:
    """An incremental run: earlier representatives are fixed (they rank first, even after a free row by the rule,
    and stay representatives even when two of them share >= t), earlier members take no part."""
    rng = np.random.default_rng(200 + seed)
    for values in (planted(seed), noisy(seed)):
        n = len(values)
        rank = rng.permutation(n)
        fixed = rng.choice([FREE, FIXED_REPRESENTATIVE, FIXED_MEMBER], size=n, p=[0.6, 0.25, 0.15]).astype(np.int8)
        labels, _ = leader_labels(values, T, rank, fixed=fixed, chunk=23)
        assert groups_of(labels, rank, fixed) == leader_clusters(values, T, rank, fixed)
        out = np.flatnonzero(fixed == FIXED_MEMBER)
        assert np.array_equal(labels[out], out)
        assert not np.isin(labels[fixed != FIXED_MEMBER], out).any()  # nobody joins a left-out row
        assert np.all(labels[fixed == FIXED_REPRESENTATIVE] == np.flatnonzero(fixed == FIXED_REPRESENTATIVE))


def test_the_incremental_rule_gives_the_full_result_when_older_rows_rank_first() -> None:
    """Decide the first rows, then fix them (representatives stay, members are left out) and decide the rest:
    with the older rows ranking first, the groups are those of deciding everything at once."""
    values = planted(11)
    n = len(values)
    rank = np.arange(n)
    full = leader_labels(values, T, rank)[0]
    older = n * 2 // 3
    first = leader_labels(values[:older], T, rank[:older])[0]
    fixed = np.zeros(n, dtype=np.int8)
    fixed[:older] = np.where(first == np.arange(older), FIXED_REPRESENTATIVE, FIXED_MEMBER)
    later = leader_labels(values, T, rank, fixed=fixed)[0]
    assert np.array_equal(later[older:], full[older:])
    assert np.array_equal(first, full[:older])


def test_a_large_group_of_near_identical_rows_costs_its_rows_not_its_pairs() -> None:
    """3,000 distinct rows each a few positions off one template: all 4.5 million pairs share >= t. Two rounds
    decide them (the first row leads, the others find it), verifying O(rows) pairs per band."""
    rng = np.random.default_rng(5)
    k, t = 128, 107
    values = np.tile(rng.integers(0, 1 << 16, size=k, dtype=np.uint16), (3000, 1))
    for row in values:
        row[rng.choice(k, size=4, replace=False)] = rng.integers(0, 1 << 16, size=4)
    labels, stats = leader_labels(values, t, np.arange(len(values)))
    assert set(labels.tolist()) == {0} and stats.rounds <= 2 and stats.sequential == 0
    assert stats.candidates < 40 * len(values)


@pytest.mark.parametrize("along", [True, False], ids=["rank-along-the-chain", "shuffled-rank"])
def test_a_drifting_sequence_is_cut_every_link_s_worth(along: bool) -> None:
    """300 rows, each one position off the last (rows near-duplicate their neighbours up to 8 steps away at
    t = 24 of 32): one transitive group; in rank order along it, rounds stall (each decides about one link's
    worth) and the rest is decided in order; in a shuffled order rounds decide nearly all. Both give the literal
    rule."""
    rng = np.random.default_rng(8)
    rows = [rng.integers(0, 1 << 16, size=K, dtype=np.uint16)]
    for _ in range(299):
        rows.append(_changed(rng, rows[-1], 1))
    values = np.stack(rows)
    assert len(broder_clusters(values, T)) == 1
    rank = np.arange(300) if along else rng.permutation(300)
    labels, stats = leader_labels(values, T, rank)
    groups = groups_of(labels, rank)
    assert groups == leader_clusters(values, T, rank)
    check_invariants(values, groups, rank)
    assert len(groups) > 10
    assert stats.rounds > 0
    assert (stats.sequential > 100) == along  # shuffled: the rounds leave a handful, decided in order
