"""64-bit integer hashing primitives shared by shingling, MinHash and the index.

Everything here is plain modular arithmetic on ``uint64`` (numpy wraps silently modulo 2**64), so results
are identical on every machine, process and numpy version: no Python ``hash()``, no random generator state.
"""

from __future__ import annotations

import numpy as np

MASK64 = (1 << 64) - 1
FMIX_C1 = 0xFF51AFD7ED558CCD
FMIX_C2 = 0xC4CEB9FE1A85EC53
_FMIX_C1 = np.uint64(FMIX_C1)
_FMIX_C2 = np.uint64(FMIX_C2)
_S33 = np.uint64(33)


def splitmix64(x: int) -> int:
    """One step of SplitMix64 on a Python int: derives well-spread 64-bit constants from a small seed."""
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def derive_constant(seed: int, purpose: int, odd: bool = False) -> int:
    """A 64-bit constant for ``purpose`` under ``seed``; ``odd`` makes it invertible modulo 2**64."""
    value = splitmix64(splitmix64(seed & MASK64) ^ (purpose * 0x632BE59BD9B4E019 & MASK64))
    return value | 1 if odd else value


def fmix64(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer, vectorized: a bijection on uint64 with full avalanche.

    Used to turn structured values (polynomial hashes, indices) into values that behave like random ones.
    Works on a copy; the input is left untouched.
    """
    return fmix64_inplace(np.array(x, dtype=np.uint64, copy=True))


def fmix64_inplace(h: np.ndarray) -> np.ndarray:
    """:func:`fmix64` computed in place on a ``uint64`` array (no full-size copy of the input); returns ``h``."""
    h ^= h >> _S33
    h *= _FMIX_C1
    h ^= h >> _S33
    h *= _FMIX_C2
    h ^= h >> _S33
    return h


def fmix64_int(x: int) -> int:
    """:func:`fmix64` of one Python int (same value as the vectorized version)."""
    x &= MASK64
    x ^= x >> 33
    x = (x * FMIX_C1) & MASK64
    x ^= x >> 33
    x = (x * FMIX_C2) & MASK64
    return x ^ (x >> 33)


def power_table(base: int, length: int) -> np.ndarray:
    """``[base**0, base**1, ..., base**(length-1)]`` modulo 2**64 as uint64."""
    if length <= 0:
        return np.empty(0, dtype=np.uint64)
    table = np.full(length, base & MASK64, dtype=np.uint64)
    table[0] = 1
    # cumprod wraps modulo 2**64 like every other uint64 operation.
    return np.cumprod(table, dtype=np.uint64)
