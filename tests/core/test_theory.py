"""The S-curve, choosing t, and the defaults checked both from theory and on many synthetic pairs."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_neardup import Sketcher
from scrapy_neardup.core.minhash import OnePermutationHasher
from scrapy_neardup.core.sketch import DEFAULT_NUM_PERM
from scrapy_neardup.core.theory import (
    DEFAULT_THRESHOLD,
    choose_parameters,
    curve,
    flag_probability,
    midpoint,
    min_shared_for,
)

K = DEFAULT_NUM_PERM
T = min_shared_for(DEFAULT_THRESHOLD, K)


def test_flag_probability_matches_direct_binomial_sum() -> None:
    from math import comb

    for k, t, r in [(10, 7, 0.6), (100, 90, 0.93), (128, 107, 0.8), (5, 0, 0.3), (5, 5, 0.99)]:
        direct = sum(comb(k, i) * r**i * (1 - r) ** (k - i) for i in range(t, k + 1))
        assert flag_probability(r, k, t)[0] == pytest.approx(direct, rel=1e-9, abs=1e-300)


def test_curve_endpoints_monotone_and_midpoint() -> None:
    points = curve(K, T)
    assert len(points) == 101
    assert points[0] == (0.0, 0.0) and points[-1] == (1.0, 1.0)
    probabilities = [p for _, p in points]
    assert all(a <= b for a, b in zip(probabilities, probabilities[1:], strict=False))
    assert 0.8 < midpoint(K, T) < 0.86


def test_defaults_from_theory() -> None:
    """k = 128, t = 107: resemblance 0.9 caught >= 99%, resemblance 0.5 flagged <= 1e-6 (in fact ~2e-15)."""
    assert (K, T) == (128, 107)
    assert flag_probability(0.9, K, T)[0] >= 0.99
    assert flag_probability(0.5, K, T)[0] <= 1e-6
    # And since p rises with r, everything above 0.9 is caught at least as often, below 0.5 flagged less.
    assert flag_probability(np.linspace(0.9, 1, 11), K, T).min() >= 0.99
    assert flag_probability(np.linspace(0, 0.5, 11), K, T).max() <= 1e-6


def test_choose_parameters() -> None:
    choice = choose_parameters(threshold=0.9, recall=0.99, low=0.5, max_false_positive=1e-6)
    assert choice.recall >= 0.99 and choice.false_positive <= 1e-6
    smaller = [k for k in (16, 32, 48) if k < choice.num_perm]
    for k in smaller:  # no smaller candidate meets both targets
        t = min_shared_for(0.9, k)
        assert flag_probability(0.5, k, t)[0] > 1e-6
    with pytest.raises(ValueError, match="threshold"):
        min_shared_for(1.5, 128)
    with pytest.raises(ValueError, match="min_shared"):
        flag_probability(0.5, 10, 11)


def _pair_texts(resemblance: float, union: int, pairs: int) -> tuple[list[bytes], float]:
    """Pairs of word sets with exactly the given resemblance (1-word shingles: words are the set)."""
    shared = round(resemblance * union)
    only_a = (union - shared) // 2
    texts: list[bytes] = []
    for p in range(pairs):
        words = np.arange(p * union, (p + 1) * union).astype(str)
        a = words[: shared + only_a]
        b = np.concatenate([words[:shared], words[shared + only_a :]])
        texts += [" ".join(a).encode(), " ".join(b).encode()]
    return texts, shared / union


def test_defaults_empirically_catch_resemblance_09() -> None:
    """20,000 synthetic pairs at resemblance exactly 0.9, through the whole text path: >= 99% caught."""
    sketcher = Sketcher(num_perm=K, shingle_size=1)
    texts, r = _pair_texts(0.9, 300, 20_000)
    assert r == pytest.approx(0.9)
    sigs, _ = sketcher.signatures(texts)
    shared = np.count_nonzero(sigs[0::2] == sigs[1::2], axis=1)
    caught = float(np.mean(shared >= T))
    assert caught >= 0.99, caught
    assert abs(shared.mean() / K - r) < 0.002  # unbiased


def test_defaults_empirically_never_flag_resemblance_05() -> None:
    """200,000 synthetic pairs at resemblance 0.5 (random 64-bit shingle hashes, 150 per page): none flagged.

    None in 2 * 10**5 bounds the rate below 1.5e-5 at 95% confidence on its own; the observed spread of shared
    positions is no wider than Binomial(k, 0.5), which makes the theoretical tail (2.2e-15) a fair bound for
    the true rate.
    """
    hasher = OnePermutationHasher(K, 1)
    rng = np.random.default_rng(12345)
    pairs_per_round, rounds = 20_000, 10
    flagged, variances, max_shared = 0, [], 0
    for _ in range(rounds):
        elements = rng.integers(0, 2**63, size=(pairs_per_round, 200), dtype=np.uint64)
        a = elements[:, :150]  # 100 shared + 50 own
        b = np.concatenate([elements[:, :100], elements[:, 150:]], axis=1)  # 100 shared + 50 own
        hashes = np.concatenate([a, b], axis=1).ravel()
        sigs = hasher.signatures(hashes, np.full(2 * pairs_per_round, 150))
        shared = np.count_nonzero(sigs[0::2] == sigs[1::2], axis=1)
        flagged += int(np.count_nonzero(shared >= T))
        variances.append(shared.var())
        max_shared = max(max_shared, int(shared.max()))
    assert flagged == 0
    assert max_shared < 95
    assert np.mean(variances) <= K * 0.5 * 0.5 * 1.05


def test_describe_rule_names_the_99_50_1_percent_points() -> None:
    """The start-up line: each resemblance it names is flagged with the probability it claims."""
    from scrapy_neardup.core.theory import describe_rule, resemblance_at

    line = describe_rule(128, 107)
    assert line.startswith("t = 107 of k = 128: flags r >= 0.90 in 99% of cases, r = 0.83 in 50%, r <= 0.7")
    for p in (0.99, 0.5, 0.01):
        r = resemblance_at(128, 107, p)
        assert abs(float(flag_probability(r, 128, 107)[0]) - p) < 1e-9
    with pytest.raises(ValueError):
        resemblance_at(128, 107, 1.0)
