"""Shingling without shingle strings: normalized texts to 64-bit shingle hashes, many texts at once.

A *shingle* is a window of ``width`` consecutive units: words (word k-shingles, Broder's w-shingling) or
Unicode code points (character n-grams). Peers build one Python string per shingle and hash it, which is
where their time goes. Here the whole batch is one numpy byte array:

1. each word gets the polynomial hash ``sum_j byte_j * B**(end - 1 - j)`` (mod 2**64) of its bytes. With
   ``S[i] = sum_{j<i} byte_j * B**-j`` (one vectorized multiply and ``cumsum``; B is odd, so ``B**-1`` exists
   modulo 2**64) a word's hash is ``(S[end] - S[start]) * B**(end-1)``: two gathers per word, no loop over
   bytes. Code points are used directly as units for n-grams;
2. each window of ``width`` units gets ``h = h * B2 + unit`` over its units (``width`` vectorized passes),
   then MurmurHash3's finalizer.

A text with fewer than ``width`` units (but at least one) yields a single shingle made of all its units,
so short texts still get a usable signature; an empty text yields none.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Literal

import numpy as np

from .hashing import MASK64, derive_constant, fmix64, inverse_mod_2_64, power_table

ShingleKind = Literal["word", "char"]
SHINGLE_KINDS: tuple[str, ...] = ("word", "char")

# Fixed (seed-independent) constants: shingle identity does not depend on the MinHash seed, so exact Jaccard
# is the same whatever the sketch parameters.
_BYTE_BASE = derive_constant(0x5348494E, 1, odd=True)
_BYTE_BASE_INVERSE = inverse_mod_2_64(_BYTE_BASE)
_UNIT_BASE = np.uint64(derive_constant(0x5348494E, 2, odd=True))
_WORD_SALT = np.uint64(derive_constant(0x5348494E, 3))
# Bytes are hashed in pieces of at most this size, cut at a space (power tables stay 16 MB in all). A token
# longer than a piece (no space in 1 MiB) is cut in two; no real page has one.
_PIECE = 1 << 20
_SPACE, _NEWLINE = 32, 10
_EMPTY_U64 = np.empty(0, dtype=np.uint64)


def shingle_hashes(
    texts: Sequence[bytes], kind: ShingleKind = "word", width: int = 5
) -> tuple[np.ndarray, np.ndarray]:
    """Shingle hashes of many *normalized* texts (see :func:`scrapy_neardup.text.normalize_utf8`).

    Args:
        texts: normalized UTF-8 texts; words are separated by single spaces and no text contains a newline.
        kind: ``"word"`` for word ``width``-shingles, ``"char"`` for character ``width``-grams.
        width: units per shingle (w >= 1).

    Returns:
        ``(hashes, counts)``: all shingle hashes (uint64, in text order, duplicates kept) and how many belong
        to each text (int64, ``counts.sum() == hashes.size``).
    """
    if width < 1:
        raise ValueError(f"shingle width must be >= 1, got {width}")
    if kind == "word":
        units, unit_counts = _word_units(texts)
    elif kind == "char":
        units, unit_counts = _char_units(texts)
    else:
        raise ValueError(f"shingle kind must be one of {SHINGLE_KINDS}, got {kind!r}")
    return _window_hashes(units, unit_counts, width)


@functools.cache
def _power_tables() -> tuple[np.ndarray, np.ndarray]:
    """``B**i`` and ``B**-i`` modulo 2**64 for i < piece size (built on first use)."""
    return power_table(_BYTE_BASE, _PIECE + 1), power_table(_BYTE_BASE_INVERSE, _PIECE + 1)


def _word_units(texts: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """One 64-bit hash per word (space-separated run of bytes) and the word count of each text."""
    raw = b"\n".join(texts)
    words: list[np.ndarray] = []
    owners: list[np.ndarray] = []
    lo, texts_before = 0, 0
    while lo < len(raw):
        hi = _piece_end(raw, lo)
        piece = np.frombuffer(raw, dtype=np.uint8, count=hi - lo, offset=lo)
        piece_words, word_starts = _piece_word_hashes(piece)
        newlines = np.flatnonzero(piece == _NEWLINE)
        words.append(piece_words)
        owners.append(texts_before + np.searchsorted(newlines, word_starts))
        texts_before += newlines.size
        lo = hi
    if not words:
        return _EMPTY_U64, np.zeros(len(texts), dtype=np.int64)
    owner = np.concatenate(owners)
    return np.concatenate(words), np.bincount(owner, minlength=len(texts)).astype(np.int64)


def _piece_end(raw: bytes, lo: int) -> int:
    """End of the piece starting at ``lo``: the whole rest, or just after the last separator in range."""
    hi = lo + _PIECE
    if hi >= len(raw):
        return len(raw)
    cut = max(raw.rfind(b" ", lo, hi), raw.rfind(b"\n", lo, hi))
    return cut + 1 if cut > lo else hi


def _piece_word_hashes(piece: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Word hashes of one piece (see module doc) and the offsets where the words start."""
    powers, inverse_powers = _power_tables()
    inword = piece > _SPACE
    edges = np.diff(inword.view(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1)
    prefix = np.empty(piece.size + 1, dtype=np.uint64)
    prefix[0] = 0
    np.multiply(piece, inverse_powers[: piece.size], out=prefix[1:], dtype=np.uint64)
    np.cumsum(prefix, out=prefix)
    raw_hash = (prefix[ends] - prefix[starts]) * powers[ends - 1]
    return fmix64(raw_hash ^ _WORD_SALT), starts


def _char_units(texts: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Code points of all texts, concatenated, and the length of each text in code points."""
    decoded = [t.decode("utf-8") for t in texts]
    joined = "".join(decoded)
    if not joined:
        return _EMPTY_U64, np.zeros(len(texts), dtype=np.int64)
    points = np.frombuffer(joined.encode("utf-32-le"), dtype="<u4")
    return points.astype(np.uint64), np.fromiter(map(len, decoded), dtype=np.int64, count=len(texts))


def _window_hashes(units: np.ndarray, unit_counts: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Hash every window of ``width`` consecutive units inside each text (one window for short texts).

    Windows are hashed as ``h = h * B2 + unit`` over their units. Full windows come from contiguous slices
    of the unit array (``width`` vectorized passes); the single short window of a text with fewer than
    ``width`` units is hashed on its own.
    """
    counts = np.where(unit_counts >= width, unit_counts - width + 1, np.minimum(unit_counts, 1))
    total = int(counts.sum())
    if total == 0:
        return _EMPTY_U64, counts
    first_unit = np.cumsum(unit_counts) - unit_counts
    first_shingle = np.cumsum(counts) - counts
    per_text = np.repeat(np.arange(counts.size), counts)
    start = first_unit[per_text] + (np.arange(total) - first_shingle[per_text])
    length = np.minimum(unit_counts, width)[per_text]
    hashes = np.empty(total, dtype=np.uint64)
    full = length == width
    if units.size >= width:
        windows = units[: units.size - width + 1].copy()
        for m in range(1, width):
            windows *= _UNIT_BASE
            windows += units[m : units.size - width + 1 + m]
        hashes[full] = windows[start[full]]
    base = int(_UNIT_BASE)
    for i in np.flatnonzero(~full).tolist():  # one per text shorter than a shingle
        h = 0
        for unit in units[start[i] : start[i] + length[i]].tolist():
            h = (h * base + unit) & MASK64
        hashes[i] = h
    return fmix64(hashes ^ length.astype(np.uint64)), counts
