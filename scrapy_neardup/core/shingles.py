"""Shingling without shingle strings: normalized texts to 64-bit shingle hashes, many texts at once.

Design notes: docs/architecture.md#scrapy_neardupcoreshingles
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Literal

import numpy as np

from .hashing import derive_constant, fmix64_inplace, power_table

ShingleKind = Literal["word", "char"]
SHINGLE_KINDS: tuple[str, ...] = ("word", "char")

# Fixed (seed-independent) constants: shingle identity does not depend on the MinHash seed, so exact Jaccard
# is the same whatever the sketch parameters.
_UNIT_BASE = np.uint64(derive_constant(0x5348494E, 2, odd=True))
_LENGTH_SALT = np.uint64(derive_constant(0x5348494E, 4, odd=True))
_CHUNK_SALT = np.uint64(derive_constant(0x5348494E, 5))
_CHUNK_BASE = derive_constant(0x5348494E, 6, odd=True)
_CHUNK_BASE_1 = np.uint64(_CHUNK_BASE)
#: Texts are shingled in groups of about this many bytes (temporaries of a group fit in the CPU cache).
GROUP_BYTES = 1 << 18
# MASKS[n] keeps the low n bytes of a little-endian 64-bit chunk.
_MASKS = np.array([(1 << (8 * n)) - 1 for n in range(9)], dtype=np.uint64)
_PAD = bytes(8)  # lets an 8-byte read start at any byte of the text
# Windows of at most this many texts are cut out by slicing, of more texts by a mask.
_FEW_TEXTS = 32
_SEPARATOR = 32
_EMPTY_U64 = np.empty(0, dtype=np.uint64)


def shingle_hashes(texts: Sequence[bytes], kind: ShingleKind = "word", width: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Shingle hashes of many *normalized* texts (see :func:`scrapy_neardup.core.text.normalize_utf8`).

    Args:
        texts: normalized UTF-8 texts (words separated by single spaces; any bytes <= 32 separate words).
        kind: ``"word"`` for word ``width``-shingles, ``"char"`` for character ``width``-grams.
        width: units per shingle (w >= 1).

    Returns:
        ``(hashes, counts)``: all shingle hashes (uint64, in text order, duplicates kept) and how many belong
        to each text (int64, ``counts.sum() == hashes.size``).
    """
    if width < 1:
        raise ValueError(f"shingle width must be >= 1, got {width}")
    if kind == "word":
        group = _word_group
    elif kind == "char":
        group = _char_group
    else:
        raise ValueError(f"shingle kind must be one of {SHINGLE_KINDS}, got {kind!r}")
    counts = np.zeros(len(texts), dtype=np.int64)
    parts: list[np.ndarray] = []
    for lo, hi in _groups(texts):
        hashes, counts[lo:hi] = group(texts[lo:hi], width)
        parts.append(hashes)
    if not parts:
        return _EMPTY_U64, counts
    return (parts[0] if len(parts) == 1 else np.concatenate(parts)), counts


def _groups(texts: Sequence[bytes]) -> Iterator[tuple[int, int]]:
    """Consecutive ranges of texts of about :data:`GROUP_BYTES` bytes (a longer text is a range alone)."""
    lo, size = 0, 0
    for i, text in enumerate(texts):
        if size and size + len(text) >= GROUP_BYTES:
            yield lo, i
            lo, size = i, 0
        size += len(text) + 1
    if lo < len(texts):
        yield lo, len(texts)


def _word_group(texts: Sequence[bytes], width: int) -> tuple[np.ndarray, np.ndarray]:
    """Word shingle hashes of one group of texts and the shingle count of each."""
    buffer, ends = join_texts(texts)
    starts, lengths = tokens(buffer)
    if starts.size == 0:
        return _EMPTY_U64, np.zeros(len(texts), dtype=np.int64)
    words_before = np.searchsorted(starts, ends)  # words before each text's closing space: its last word's end
    units_per_text = words_before.copy()
    units_per_text[1:] -= words_before[:-1]
    return window_hashes(word_hashes(buffer, starts, lengths), units_per_text, width)


def join_texts(texts: Sequence[bytes]) -> tuple[bytes, np.ndarray]:
    """``texts`` in one buffer, each followed by a space, then 8 zero bytes (every word's 8-byte reads stay in
    the buffer); and where each text's closing space is."""
    buffer = b" ".join([*texts, _PAD])
    ends = np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)) + 1) - 1
    return buffer, ends


def tokens(buffer: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Where the words of a :func:`join_texts` buffer start and how long they are: maximal runs of bytes above
    32 (the separators of normalized text are single spaces; the marks of ``"auto"`` text are below 32)."""
    data = np.frombuffer(buffer, dtype=np.uint8, count=len(buffer) - len(_PAD))
    separators = np.flatnonzero(data <= _SEPARATOR)
    starts = np.empty_like(separators)
    if starts.size == 0:
        return starts, starts
    starts[0] = 0
    np.add(separators[:-1], 1, out=starts[1:])
    lengths = separators - starts
    if not lengths.all():  # empty texts or runs of separators: drop the empty tokens
        nonempty = lengths != 0
        starts, lengths = starts[nonempty], lengths[nonempty]
    return starts, lengths


def word_hashes(buffer: bytes, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """64-bit hashes of the words at ``starts`` (byte offsets into ``buffer``, which has 8 bytes after its last
    word: see :func:`join_texts`) of ``lengths`` bytes."""
    # Every byte offset viewed as the start of a little-endian uint64 (strides of one byte, unaligned).
    chunks = np.ndarray((len(buffer) - 7,), dtype="<u8", buffer=buffer, strides=(1,))
    lengths_u = lengths.astype(np.uint64)
    words = chunks[starts]
    words &= _MASKS[np.minimum(lengths, 8)]
    words ^= lengths_u * _LENGTH_SALT
    fmix64_inplace(words)
    # The second chunk of every word longer than 8 bytes (most long words have just two chunks)...
    long_words = np.flatnonzero(lengths > 8)
    if long_words.size:
        long_lengths = lengths[long_words]
        terms = chunks[starts[long_words] + 8]
        terms &= _MASKS[np.minimum(long_lengths - 8, 8)]
        terms ^= _CHUNK_SALT
        fmix64_inplace(terms)
        terms *= _CHUNK_BASE_1
        words[long_words] += terms
        # ... and the further chunks of words longer than 16 bytes, all at once.
        very_long = long_words[long_lengths > 16]
        if very_long.size:
            extra = (lengths[very_long] - 9) >> 3  # chunks after the second
            first_extra = np.cumsum(extra) - extra
            owner = np.repeat(very_long, extra)
            chunk_no = np.arange(2, owner.size + 2, dtype=np.int64) - np.repeat(first_extra, extra)
            offset = chunk_no << 3
            terms = chunks[starts[owner] + offset]
            terms &= _MASKS[np.minimum(lengths[owner] - offset, 8)]
            terms ^= _CHUNK_SALT
            fmix64_inplace(terms)
            terms *= power_table(_CHUNK_BASE, int(chunk_no.max()) + 1)[chunk_no]
            words[very_long] += np.add.reduceat(terms, first_extra)
    return words


def _char_group(texts: Sequence[bytes], width: int) -> tuple[np.ndarray, np.ndarray]:
    """Character shingle hashes of one group of texts and the shingle count of each."""
    decoded = [t.decode("utf-8", errors="replace") for t in texts]
    joined = "".join(decoded)
    if not joined:
        return _EMPTY_U64, np.zeros(len(texts), dtype=np.int64)
    points = np.frombuffer(joined.encode("utf-32-le"), dtype="<u4").astype(np.uint64)
    return window_hashes(points, np.fromiter(map(len, decoded), dtype=np.int64, count=len(texts)), width)


def window_hashes(units: np.ndarray, units_per_text: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Hash every window of ``width`` consecutive units inside each text (one window for short texts).

    ``units`` holds the units of all texts back to back; ``units_per_text[i]`` of them belong to text ``i``.
    """
    total_units = units.size
    short = (units_per_text < width) & (units_per_text > 0)
    counts = np.where(units_per_text >= width, units_per_text - width + 1, short.astype(np.int64))
    first_unit = np.cumsum(units_per_text) - units_per_text
    if total_units >= width:
        windows = units[: total_units - width + 1].copy()
        for m in range(1, width):
            windows *= _UNIT_BASE
            windows += units[m : total_units - width + 1 + m]
        windows ^= np.uint64(width)
        # A window is valid when it ends inside its text: drop the last width - 1 starts of every text.
        full = np.flatnonzero(units_per_text >= width)
        if full.size <= _FEW_TEXTS:  # copy the valid stretches
            lo, n = first_unit[full].tolist(), counts[full].tolist()
            windows = np.concatenate([windows[a : a + b] for a, b in zip(lo, n, strict=True)] or [_EMPTY_U64])
        else:  # mask the invalid starts
            tail = (first_unit + units_per_text)[:, None] - np.arange(1, width)[None, :]
            tail = tail[(tail >= first_unit[:, None]) & (tail <= total_units - width)]
            valid = np.ones(windows.size, dtype=bool)
            valid[tail] = False
            windows = windows[valid]
    else:
        windows = _EMPTY_U64
    if not short.any():
        return windows, counts
    # Texts shorter than a shingle: one window of all their units, placed where the text's shingles go.
    first_unit, size = first_unit[short], units_per_text[short]
    singles = units[first_unit].copy()
    for m in range(1, width - 1):
        more = size > m
        singles[more] = singles[more] * _UNIT_BASE + units[first_unit[more] + m]
    singles ^= size.astype(np.uint64)
    hashes = np.empty(int(counts.sum()), dtype=np.uint64)
    at_single = np.zeros(hashes.size, dtype=bool)
    at_single[(np.cumsum(counts) - counts)[short]] = True
    hashes[at_single] = singles
    hashes[~at_single] = windows
    return hashes, counts
