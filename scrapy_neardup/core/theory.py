"""The S-curve of the t-of-k rule, and choosing t (and k) for a target resemblance.

Two pages are flagged as near-duplicates when their signatures agree in at least ``t`` of ``k`` positions.
Each position agrees independently with probability ``r``, the pages' resemblance, so (Broder; CS124
lecture 12)::

    p(r) = P[Binomial(k, r) >= t] = sum_{i=t}^{k} C(k, i) r^i (1 - r)^(k - i)

``p`` rises from 0 to 1 in an S around ``r ~ t / k``; it sharpens as ``k`` grows. With ``k = 100, t = 90``:
``p(0.8) < 0.006``, ``p(0.95) > 0.988``, ``p(0.96) > 0.997``.

Defaults: ``k = 128``, and ``t`` chosen so that pairs of resemblance 0.9 are caught with probability at least
0.99 (``t = 107``); then pairs of resemblance 0.5 are flagged with probability ``2.2e-15``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Resemblance that the defaults must catch, and with which probability.
DEFAULT_THRESHOLD = 0.9
DEFAULT_RECALL = 0.99
#: Resemblance that must (almost) never be flagged, and the largest acceptable probability of doing so.
DEFAULT_LOW = 0.5
DEFAULT_MAX_FALSE_POSITIVE = 1e-6


def flag_probability(r: float | np.ndarray, num_perm: int, min_shared: int) -> np.ndarray:
    """``p(r) = P[Binomial(k, r) >= t]``: probability that pages of resemblance ``r`` are flagged.

    Args:
        r: resemblance(s) in [0, 1].
        num_perm: ``k``, signature positions.
        min_shared: ``t``, positions that must agree (0 <= t <= k).

    Computed as a sum of binomial terms in log space (exact to double precision, no SciPy needed).
    """
    _check_k_t(num_perm, min_shared)
    return _binomial_pmf(r, num_perm)[:, min_shared:].sum(axis=1).clip(0.0, 1.0)


def min_shared_for(threshold: float, num_perm: int, recall: float = DEFAULT_RECALL) -> int:
    """The largest ``t`` such that pairs of resemblance ``threshold`` are flagged with probability >= recall.

    Taking the largest such ``t`` keeps false positives as rare as the recall target allows. Since ``p`` rises
    with ``r``, every pair of resemblance >= ``threshold`` is caught at least as often.
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must lie in (0, 1], got {threshold}")
    if not 0 < recall < 1:
        raise ValueError(f"recall must lie in (0, 1), got {recall}")
    _check_k_t(num_perm, 0)
    # tail[t] = P[Binomial(k, r) >= t] for every t at once: a reversed cumulative sum of the pmf.
    tail = np.cumsum(_binomial_pmf(threshold, num_perm)[0, ::-1])[::-1]
    return int(np.flatnonzero(tail >= recall).max())


def _binomial_pmf(r: float | np.ndarray, num_perm: int) -> np.ndarray:
    """``P[Binomial(k, r) = i]`` for each ``r`` (rows) and ``i = 0..k`` (columns), computed in log space."""
    rs = np.atleast_1d(np.asarray(r, dtype=np.float64))
    if np.any((rs < 0) | (rs > 1)):
        raise ValueError("resemblance must lie in [0, 1]")
    i = np.arange(num_perm + 1, dtype=np.float64)
    log_factorial = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, num_perm + 1)))])
    log_comb = log_factorial[num_perm] - log_factorial - log_factorial[::-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        log_terms = log_comb + i * np.log(rs)[:, None] + (num_perm - i) * np.log1p(-rs)[:, None]
    pmf = np.nan_to_num(np.exp(log_terms), nan=0.0)
    # 0 * log(0) is 0 here: r = 0 puts all mass on i = 0, r = 1 on i = k.
    pmf[rs == 0.0] = np.eye(1, num_perm + 1, 0)
    pmf[rs == 1.0] = np.eye(1, num_perm + 1, num_perm)
    return pmf


@dataclass(frozen=True)
class Choice:
    """Parameters chosen by :func:`choose_parameters`, with the probabilities they give."""

    num_perm: int
    min_shared: int
    recall: float
    false_positive: float


def choose_parameters(
    threshold: float = DEFAULT_THRESHOLD,
    recall: float = DEFAULT_RECALL,
    low: float = DEFAULT_LOW,
    max_false_positive: float = DEFAULT_MAX_FALSE_POSITIVE,
    candidates: tuple[int, ...] = (16, 32, 48, 64, 96, 128, 192, 256, 384, 512),
) -> Choice:
    """The smallest ``k`` (from ``candidates``) and its ``t`` that catch ``threshold`` with probability
    ``>= recall`` while flagging resemblance ``low`` with probability ``<= max_false_positive``."""
    for k in candidates:
        t = min_shared_for(threshold, k, recall)
        fp = float(flag_probability(low, k, t)[0])
        if fp <= max_false_positive:
            return Choice(k, t, float(flag_probability(threshold, k, t)[0]), fp)
    raise ValueError(
        f"no k in {candidates} catches r={threshold} with p>={recall} and flags r={low} with p<={max_false_positive}"
    )


def curve(num_perm: int, min_shared: int, step: float = 0.01) -> list[tuple[float, float]]:
    """``[(r, p(r)), ...]`` for ``r`` from 0 to 1 in steps of ``step`` (both ends included)."""
    n = round(1 / step)
    rs = np.round(np.linspace(0.0, 1.0, n + 1), 10)
    return list(zip(rs.tolist(), flag_probability(rs, num_perm, min_shared).tolist(), strict=True))


def resemblance_at(num_perm: int, min_shared: int, probability: float) -> float:
    """The resemblance ``r`` at which ``p(r) = probability``, found by bisection.

    ``p(r) = P[Binomial(k, r) >= t]`` increases monotonically in ``r``, so the inverse is unique for
    ``0 < probability < 1``: pairs more alike than the returned ``r`` are flagged more often than
    ``probability``, pairs less alike less often.
    """
    if not 0.0 < probability < 1.0:
        raise ValueError(f"probability must lie in (0, 1), got {probability}")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if flag_probability(mid, num_perm, min_shared)[0] < probability:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def midpoint(num_perm: int, min_shared: int) -> float:
    """The resemblance where ``p(r) = 1/2`` (the S-curve's steepest region)."""
    return resemblance_at(num_perm, min_shared, 0.5)


def describe_rule(num_perm: int, min_shared: int) -> str:
    """What the t-of-k rule does, in one line: where it flags 99%, 50% and 1% of pairs.

    ``NEARDUP_THRESHOLD = 0.9`` is not a sharp cut at 0.9: with ``k = 128, t = 107`` a pair at ``r = 0.83`` is
    flagged half the time. This line says so, e.g.
    ``t = 107 of k = 128: flags r >= 0.90 in 99% of cases, r = 0.83 in 50%, r <= 0.75 in 1%``.
    """
    r99, r50, r01 = (resemblance_at(num_perm, min_shared, p) for p in (0.99, 0.5, 0.01))
    return (
        f"t = {min_shared} of k = {num_perm}: flags r >= {r99:.2f} in 99% of cases, "
        f"r = {r50:.2f} in 50%, r <= {r01:.2f} in 1%"
    )


#: Two-sided normal quantile of a 95% interval, ``z = Phi^-1(0.975)``.
_Z95 = 1.959963984540054


def resemblance_interval(shared: int, num_perm: int, z: float = _Z95) -> tuple[float, float]:
    """The 95% (Wilson score) interval of the resemblance ``r`` of two pages whose signatures agree in
    ``shared`` of ``k`` positions.

    Args:
        shared: ``s``, positions where the signatures agree (``0 <= s <= k``).
        num_perm: ``k``, signature positions.
        z: normal quantile of the interval (default ``1.96``: 95%, two-sided).

    Each position agrees independently with probability ``r``, so ``s ~ Binomial(k, r)`` and ``r^ = s / k`` is
    the estimate. The Wilson interval inverts the normal test of ``r``::

        centre    = (r^ + z^2 / 2k) / (1 + z^2 / k)
        halfwidth = z / (1 + z^2 / k) * sqrt(r^ (1 - r^) / k + z^2 / 4k^2)
        interval  = [centre - halfwidth, centre + halfwidth]

    Unlike ``r^ +- z sqrt(r^(1 - r^)/k)`` it does not collapse to a point at ``s = k`` (all positions
    agree): with ``k = 128``, ``s = 128`` gives ``[0.971, 1]``, ``s = 122`` gives ``[0.901, 0.978]``.
    """
    _check_k_t(num_perm, 0)
    if not 0 <= shared <= num_perm:
        raise ValueError(f"shared must lie in [0, num_perm={num_perm}], got {shared}")
    k, p, z2 = float(num_perm), shared / num_perm, z * z
    scale = 1.0 + z2 / k
    centre = (p + z2 / (2 * k)) / scale
    half = z / scale * float(np.sqrt(p * (1 - p) / k + z2 / (4 * k * k)))
    # Exact at the ends: s = 0 cannot rule out r = 0, s = k cannot rule out r = 1 (rounding aside).
    low = 0.0 if shared == 0 else max(0.0, centre - half)
    high = 1.0 if shared == num_perm else min(1.0, centre + half)
    return low, high


def _check_k_t(num_perm: int, min_shared: int) -> None:
    if num_perm < 1:
        raise ValueError(f"num_perm must be >= 1, got {num_perm}")
    if not 0 <= min_shared <= num_perm:
        raise ValueError(f"min_shared must lie in [0, num_perm={num_perm}], got {min_shared}")
