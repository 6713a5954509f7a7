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

from .hashing import derive_constant, fmix64

#: Marks an empty bin before densification; real values are capped one below it.
EMPTY = np.uint32(0xFFFFFFFF)
_MAX_VALUE = np.uint64(0xFFFFFFFE)
_LOW32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
# Probe blocks for densification: a bin is filled within 64 * 64 probes unless nearly every bin is empty,
# and even then a deterministic fallback (nearest non-empty bin) fills it.
_PROBE_BLOCK = 64
_PROBE_BLOCKS = 64


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
        if num_perm < 1 or num_perm > 1 << 16:
            raise ValueError(f"num_perm must be between 1 and 65536, got {num_perm}")
        self.num_perm = num_perm
        self.seed = seed
        self._salt = np.uint64(derive_constant(seed, 10))
        attempts = np.arange(_PROBE_BLOCK * _PROBE_BLOCKS, dtype=np.uint64)[:, None]
        bins = np.arange(num_perm, dtype=np.uint64)[None, :]
        mixed = fmix64((attempts << _S32) ^ bins ^ np.uint64(derive_constant(seed, 11)))
        self._probe = ((mixed >> _S32) * np.uint64(num_perm) >> _S32).astype(np.int64)

    def signatures(self, hashes: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Signatures of many documents at once.

        Args:
            hashes: shingle hashes of all documents, concatenated (uint64).
            counts: how many of ``hashes`` belong to each document.

        Returns:
            ``(len(counts), num_perm)`` uint32; a document without shingles gets a row of :data:`EMPTY`.
        """
        k = self.num_perm
        docs = counts.size
        g = fmix64(hashes ^ self._salt)
        bins = (g >> _S32) * np.uint64(k) >> _S32
        values = np.minimum(g & _LOW32, _MAX_VALUE)
        slots = np.repeat(np.arange(docs, dtype=np.uint64) * np.uint64(k), counts) + bins
        table = np.full(docs * k, np.uint64(EMPTY), dtype=np.uint64)
        np.minimum.at(table, slots.astype(np.intp), values)
        sigs = table.reshape(docs, k).astype(np.uint32)
        self._densify(sigs, counts)
        return sigs

    def _densify(self, sigs: np.ndarray, counts: np.ndarray) -> None:
        """Fill empty bins in place from the first non-empty bin along each bin's probe sequence."""
        empty = sigs == EMPTY
        empty[counts == 0] = False  # nothing to borrow from
        doc, bin_ = np.nonzero(empty)
        original = sigs.copy()
        for block in range(_PROBE_BLOCKS):
            if doc.size == 0:
                return
            rows = self._probe[block * _PROBE_BLOCK : (block + 1) * _PROBE_BLOCK]
            targets = rows[:, bin_]  # (attempts, pending)
            found = original[doc[None, :], targets] != EMPTY
            hit = found.any(axis=0)
            first = found.argmax(axis=0)
            pending = np.arange(doc.size)
            chosen = targets[first[hit], pending[hit]]
            sigs[doc[hit], bin_[hit]] = original[doc[hit], chosen]
            doc, bin_ = doc[~hit], bin_[~hit]
        for d, b in zip(doc.tolist(), bin_.tolist(), strict=True):  # astronomically rare
            filled = np.flatnonzero(original[d] != EMPTY)
            sigs[d, b] = original[d, filled[np.argmin((filled - b) % sigs.shape[1])]]
