"""MinHash signatures from shingle hashes.

Two constructions, one meaning: position ``i`` of two signatures agrees with probability equal to the
resemblance (Jaccard similarity) ``r = |A ∩ B| / |A ∪ B|`` of the two shingle sets.

* :func:`classic_signature` — Broder's original: ``k`` independent hash functions ``h_i`` (standing in for
  random permutations), ``sig[i] = min_{x in A} h_i(x)``. Costs O(|A| k). It accepts explicit hash
  functions so the textbook examples (``h(x) = x mod 5``) can be reproduced exactly.
* :func:`one_permutation_signatures` — one-permutation hashing (Li, Owen & Zhang 2012) with optimal
  densification (Shrivastava 2017): one hash per shingle splits the hash space into ``k`` bins,
  ``sig[i] = min`` of the values that fall in bin ``i``; an empty bin borrows the value of the first
  non-empty bin on its own pseudo-random probe sequence. Costs O(|A| + k) and keeps
  ``P[sig_A[i] == sig_B[i]] = r`` for every position. This is what :class:`~scrapy_neardup.Sketcher` uses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from .hashing import derive_constant, fmix64, fmix64_inplace
from .params import check_num_perm

#: Marks an empty bin before densification; real values are capped one below it.
EMPTY = np.uint32(0xFFFFFFFF)
_MAX_VALUE = np.uint32(0xFFFFFFFE)
_S32 = np.uint64(32)
# Shingle hashes are turned into signature entries in blocks of this many (temporaries stay in cache).
_BLOCK = 1 << 15
# Probe attempts for densification: a bin is filled within 4096 probes unless nearly every bin is empty,
# and even then a deterministic fallback (nearest non-empty bin) fills it.
_PROBE_ATTEMPTS = 4096
_QUICK_ATTEMPTS = 8
_NEVER = np.int16(_PROBE_ATTEMPTS)


def classic_signature(elements: Iterable[int], hash_functions: Sequence[Callable[[int], int]]) -> np.ndarray:
    """Broder's MinHash with explicit hash functions: ``sig[i] = min(h_i(x) for x in elements)``.

    Args:
        elements: the set (shingle hashes, row numbers, ...); must not be empty.
        hash_functions: ``k`` functions from an element to a non-negative int, each standing in for one
            random permutation of the universe.

    Returns:
        An int64 array of length ``k``.
    """
    items = list(elements)
    if not items:
        raise ValueError("the MinHash of an empty set is undefined")
    return np.array([min(h(x) for x in items) for h in hash_functions], dtype=np.int64)


class OnePermutationHasher:
    """Vectorized one-permutation MinHash with optimal densification, for a fixed ``(num_perm, seed)``.

    The bin of a shingle hash ``x`` is ``floor(hi32(g(x)) * k / 2**32)`` and its value ``lo32(g(x))``, where
    ``g`` is MurmurHash3's finalizer applied to ``x`` xor a seed constant. Empty bin ``i`` takes the value of
    bin ``probe[a, i]`` for the first attempt ``a`` whose probed bin is non-empty; ``probe`` is a fixed
    pseudo-random table derived from the seed, the same for every document, so densified positions of two
    documents still agree with probability ``r``.
    """

    def __init__(self, num_perm: int, seed: int) -> None:
        num_perm = check_num_perm(num_perm)
        self.num_perm = num_perm
        self.seed = seed
        self._salt = np.uint64(derive_constant(seed, 10))
        attempts = np.arange(_PROBE_ATTEMPTS, dtype=np.uint64)[:, None]
        bins = np.arange(num_perm, dtype=np.uint64)[None, :]
        mixed = fmix64((attempts << _S32) ^ bins ^ np.uint64(derive_constant(seed, 11)))
        self._probe = ((mixed >> _S32) * np.uint64(num_perm) >> _S32).astype(np.int64)
        # For k a power of two, floor(hi32(g) * k / 2**32) is simply the top log2(k) bits of g.
        power_of_two = num_perm > 1 and num_perm & (num_perm - 1) == 0
        self._shift = np.uint64(65 - num_perm.bit_length()) if power_of_two else None
        # first_hit[i, j]: the first attempt at which bin i's probe sequence lands on bin j (or _NEVER).
        self._first_hit = np.full((num_perm, num_perm), _NEVER, dtype=np.int16)
        attempt_of = np.broadcast_to(np.arange(_PROBE_ATTEMPTS, dtype=np.int16)[:, None], self._probe.shape)
        bin_of = np.broadcast_to(np.arange(num_perm)[None, :], self._probe.shape)
        np.minimum.at(self._first_hit, (bin_of.ravel(), self._probe.ravel()), attempt_of.ravel())

    def signatures(self, hashes: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Signatures of many documents at once.

        Args:
            hashes: shingle hashes of all documents, concatenated (uint64).
            counts: how many of ``hashes`` belong to each document.

        Returns:
            ``(len(counts), num_perm)`` uint32; a document without shingles gets a row of :data:`EMPTY`.
        """
        k = self.num_perm
        counts = np.asarray(counts, dtype=np.int64)
        hashes = np.asarray(hashes, dtype=np.uint64)
        docs = counts.size
        table = np.full(docs * k, EMPTY, dtype=np.uint32)
        ends = np.cumsum(counts)
        if ends.size and ends[-1] != hashes.size:
            raise ValueError(f"counts add up to {int(ends[-1])} but {hashes.size} hashes were given")
        # Blocks of hashes small enough for every temporary to stay in the CPU cache.
        for lo in range(0, hashes.size, _BLOCK):
            hi = min(lo + _BLOCK, hashes.size)
            first = int(np.searchsorted(ends, lo, side="right"))
            last = int(np.searchsorted(ends, hi, side="left")) + 1
            in_block = np.minimum(ends[first:last], hi) - np.maximum(ends[first:last] - counts[first:last], lo)
            g = hashes[lo:hi] ^ self._salt
            fmix64_inplace(g)
            values = g.astype(np.uint32)
            np.minimum(values, _MAX_VALUE, out=values)
            if self._shift is not None:
                g >>= self._shift
            else:
                g >>= _S32
                g *= np.uint64(k)
                g >>= _S32
            slots = g.astype(np.intp)
            slots += np.repeat(np.arange(first * k, last * k, k, dtype=np.intp), in_block)
            np.minimum.at(table, slots, values)
        sigs = table.reshape(docs, k)
        self._densify(sigs, counts)
        return sigs

    def _densify(self, sigs: np.ndarray, counts: np.ndarray) -> None:
        """Fill empty bins in place: bin ``i`` takes bin ``probe[a, i]``'s value for the first attempt ``a``
        that lands on a non-empty bin."""
        empty = sigs == EMPTY
        empty[counts == 0] = False  # nothing to borrow from
        doc, bin_ = np.nonzero(empty)
        if doc.size == 0:
            return
        original = sigs.copy()
        # A few attempts one at a time fill almost every bin of a typical page (more shingles than bins).
        for attempt in range(_QUICK_ATTEMPTS):
            values = original[doc, self._probe[attempt, bin_]]
            hit = values != EMPTY
            sigs[doc[hit], bin_[hit]] = values[hit]
            doc, bin_ = doc[~hit], bin_[~hit]
            if doc.size == 0:
                return
        # Sparse pages: the first attempt hitting a non-empty bin is the smallest first-hit attempt over the
        # page's non-empty bins, read from a k-by-k table instead of walking thousands of attempts.
        nonempty = original != EMPTY
        chunk = max(1, (1 << 22) // self.num_perm)
        for lo in range(0, doc.size, chunk):
            d, b = doc[lo : lo + chunk], bin_[lo : lo + chunk]
            first = np.where(nonempty[d], self._first_hit[b], _NEVER)
            source = first.argmin(axis=1)
            found = first[np.arange(d.size), source] < _NEVER
            sigs[d[found], b[found]] = original[d[found], source[found]]
            for dd, bb in zip(d[~found].tolist(), b[~found].tolist(), strict=True):  # astronomically rare
                filled = np.flatnonzero(nonempty[dd])
                sigs[dd, bb] = original[dd, filled[np.argmin((filled - bb) % self.num_perm)]]
