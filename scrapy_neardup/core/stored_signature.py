"""The stored signature: what every index keeps of a sketch and compares, with its parameter tag.

Design notes: docs/architecture.md#scrapy_neardupcorestored_signature
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from ..errors import IncompatibleSketches
from .hashing import derive_constant
from .params import check_min_shared
from .theory import DEFAULT_THRESHOLD, min_shared_for

if TYPE_CHECKING:
    from .sketch import Sketch


#: Bits of each signature position that indexes keep and compare.
VALUE_BITS = 16
_VALUE_MASK = (1 << VALUE_BITS) - 1
_MAX_POSITIONS = 65536
_PREFIXES = [f"{i}_" for i in range(1024)]
_LITTLE = np.dtype("<u2")


def stored_values(signature: np.ndarray) -> np.ndarray:
    """The stored form of one signature (``[k]``) or many (``[n, k]``): each value's low 16 bits, ``uint16``."""
    return np.asarray(signature).astype(np.uint16)  # astype keeps the low 16 bits


def shared_counts(matrix: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Positions each row of ``matrix`` (``uint16[n, k]``) shares with ``values`` (``uint16[k]``): the t-of-k count."""
    return np.count_nonzero(matrix == values, axis=-1)


def verified(
    values: np.ndarray, valid: np.ndarray | None, query: np.ndarray, min_shared: int
) -> list[tuple[int, int]]:
    """``(row, shared)`` of each valid row of ``values`` (``uint16[n, k]``, e.g. decoded candidates; ``valid``:
    which rows could be decoded, None for all) that shares at least ``t = min_shared`` positions with ``query``
    (``uint16[k]``), in row order: the check that turns candidates (which may share fewer) into near-duplicates,
    flagged with probability ``P[Binomial(k, r) >= t]`` at resemblance ``r``. The one such check of the crawler
    backend, the candidate queries and serve-time collapse."""
    shared = shared_counts(values, query)
    keep = shared >= min_shared if valid is None else valid & (shared >= min_shared)
    return [(i, int(shared[i])) for i in np.flatnonzero(keep).tolist()]


@dataclass(frozen=True, eq=False)
class StoredSignature:
    """A sketch's stored signature: ``values`` (``uint16[k]``) made with the parameters named by ``tag``.

    Only signatures with equal tags are compared (:meth:`shared_positions` raises ``IncompatibleSketches``
    otherwise).
    """

    values: np.ndarray
    tag: str
    _bytes: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        values = np.ascontiguousarray(self.values, dtype=np.uint16)
        if values.ndim != 1 or not 0 < values.size <= _MAX_POSITIONS:
            raise ValueError(f"a stored signature holds 1 to {_MAX_POSITIONS} positions, got shape {values.shape}")
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "_bytes", values.astype(_LITTLE, copy=False).tobytes())

    @classmethod
    def from_sketch(cls, sketch: Sketch) -> StoredSignature:
        """The stored form of a non-empty sketch.

        Raises:
            ValueError: the sketch is empty (its text had no shingles: nothing to store or compare).
        """
        if sketch.empty:
            raise ValueError("an empty sketch (text without shingles) has no stored signature")
        return cls(stored_values(sketch.signature), sketch.tag)

    @property
    def num_perm(self) -> int:
        """k."""
        return int(self.values.size)

    def check_tag(self, tag: str) -> None:
        """Raise ``IncompatibleSketches`` unless this signature was made with ``tag``."""
        if tag != self.tag:
            raise IncompatibleSketches(f"signatures made with different parameters cannot be compared: "
                                       f"{self.tag!r} vs {tag!r}")

    def shared_positions(self, other: StoredSignature) -> int:
        """Positions where the two stored signatures agree (``~ Binomial(k, r + (1 - r) / 65536)``)."""
        self.check_tag(other.tag)
        return int(shared_counts(self.values, other.values))

    def digest(self) -> bytes:
        """The values as little-endian bytes: equal exactly for equal stored signatures (a dict key)."""
        return self._bytes

    # -- position tokens -----------------------------------------------------------------------------------

    def tokens(self) -> list[str]:
        """Broder's ``"i_v"`` tokens: position ``i`` in decimal, its value ``v`` in lowercase hex."""
        values = self.values.tolist()
        if len(values) <= len(_PREFIXES):
            return [p + format(v, "x") for p, v in zip(_PREFIXES, values, strict=False)]
        return [f"{i}_{v:x}" for i, v in enumerate(values)]

    @classmethod
    def from_tokens(cls, tokens: Sequence[str], num_perm: int, tag: str) -> StoredSignature:
        """The inverse of :meth:`tokens` (any order).

        Raises:
            ValueError: a malformed token, a position outside ``[0, k)``, missing or repeated, or a value of more
                than 16 bits.
        """
        if not 0 < num_perm <= _MAX_POSITIONS:
            raise ValueError(f"num_perm must lie in [1, {_MAX_POSITIONS}], got {num_perm}")
        values = np.zeros(num_perm, dtype=np.uint16)
        seen = np.zeros(num_perm, dtype=bool)
        for token in tokens:
            position, sep, value = token.partition("_")
            if not sep:
                raise ValueError(f"malformed position token {token!r}")
            i = int(position)
            if not 0 <= i < num_perm or seen[i]:
                raise ValueError(f"position {i} out of range or repeated in a signature of {num_perm} positions")
            stored = int(value, 16)
            if not 0 <= stored <= _VALUE_MASK:
                raise ValueError(f"value of position token {token!r} has more than {VALUE_BITS} bits")
            values[i] = stored
            seen[i] = True
        if not seen.all():
            raise ValueError(f"signature has {int(seen.sum())} of {num_perm} positions")
        return cls(values, tag)

    # -- compact encoding ----------------------------------------------------------------------------------

    def encode(self) -> str:
        """The compact form: base64 of the little-endian values, zero-padded to a multiple of 3 bytes."""
        return base64.b64encode(self._bytes + bytes(_padding(self.num_perm))).decode("ascii")

    @classmethod
    def decode(cls, text: str, num_perm: int, tag: str) -> StoredSignature:
        """The inverse of :meth:`encode`.

        Raises:
            ValueError: not the encoding of ``num_perm`` values.
        """
        values, valid = decode_many([text], num_perm)
        if not valid[0]:
            raise ValueError(f"not an encoded signature of {num_perm} positions: {text[:40]!r}")
        return cls(values[0], tag)

    # -- band tokens ---------------------------------------------------------------------------------------

    def band_tokens(self) -> list[str]:
        """The stored layout's band tokens (see the module doc)."""
        return band_tokens(self.values[None, :])[0]


@dataclass(frozen=True, eq=False)
class StoredSketch:
    """A page as an index keeps it: its stored signature and the fingerprint of its normalized text.

    What a journal or an index reads back instead of a :class:`~scrapy_neardup.core.sketch.Sketch` (whose full
    signature is not kept); :class:`~scrapy_neardup.core.index.SketchIndex` takes either.
    """

    signature: StoredSignature
    fingerprint: int
    #: What of the page was sketched (:attr:`Sketch.sketched <scrapy_neardup.core.sketch.Sketch.sketched>`,
    #: ``words``, ``page_words``), when the journal recorded it (``""``/0: not known).
    sketched: str = ""
    words: int = 0
    page_words: int = 0


def _padding(num_perm: int) -> int:
    return -(2 * num_perm) % 3


def encoded_length(num_perm: int) -> int:
    """Characters of :meth:`StoredSignature.encode` for ``k`` positions."""
    return (2 * num_perm + _padding(num_perm)) // 3 * 4


def encode_many(values: np.ndarray) -> list[str]:
    """:meth:`StoredSignature.encode` of each row of ``uint16[n, k]``, in one base64 call."""
    n, k = values.shape
    width = 2 * k + _padding(k)
    raw = np.zeros((n, width), dtype=np.uint8)
    raw[:, : 2 * k] = np.ascontiguousarray(values, dtype=_LITTLE).view(np.uint8).reshape(n, 2 * k)
    text = base64.b64encode(raw.tobytes()).decode("ascii")
    step = encoded_length(k)
    return [text[i : i + step] for i in range(0, len(text), step)]


def decode_many(texts: Sequence[object], num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    """Many encoded signatures at once: ``(uint16[n, k], valid[n])``; invalid rows (not a string of the right
    length, or not base64) are zero. Valid texts are joined and decoded in one call (a sweep decodes a
    thousand per request)."""
    n, step = len(texts), encoded_length(num_perm)
    width = 2 * num_perm + _padding(num_perm)
    valid = np.fromiter((isinstance(t, str) and len(t) == step for t in texts), dtype=bool, count=n)
    values = np.zeros((n, num_perm), dtype=np.uint16)
    rows = np.flatnonzero(valid)
    if rows.size == 0:
        return values, valid
    good = [texts[i] for i in rows.tolist()]
    try:
        raw = np.frombuffer(base64.b64decode("".join(good), validate=True), dtype=np.uint8)  # type: ignore[arg-type]
        values[rows] = raw.reshape(rows.size, width)[:, : 2 * num_perm].copy().view(_LITTLE)
    except (binascii.Error, ValueError):
        for i in rows.tolist():  # the slow path, for a page holding a damaged value: each on its own
            try:
                raw = np.frombuffer(base64.b64decode(texts[i], validate=True), dtype=np.uint8)  # type: ignore[arg-type]
                values[i] = raw[: 2 * num_perm].view(_LITTLE)
            except (binascii.Error, ValueError):
                valid[i] = False
    return values, valid


# -- bands ---------------------------------------------------------------------------------------------------


def band_bounds(num_perm: int, min_shared: int) -> np.ndarray:
    """Start offsets of the ``b = k - t + 1`` pigeonhole bands (sizes differ by at most one)."""
    check_min_shared(min_shared, num_perm)
    bands = num_perm - min_shared + 1
    return (np.arange(bands, dtype=np.int64) * num_perm) // bands


@lru_cache(maxsize=16)
def band_layout(num_perm: int) -> int:
    """``t0``: stored band tokens serve every ``t >= t0`` (the default threshold's ``t``; see the module doc).

    Cached: it sums binomial terms (about 0.2 ms), and every page's band tokens need it."""
    return min_shared_for(DEFAULT_THRESHOLD, num_perm)


@lru_cache(maxsize=16)
def _multipliers(num_perm: int) -> np.ndarray:
    # The embedded index's multipliers (core.index): one band hash for the whole project.
    return np.array([derive_constant(0xBA4D, i, odd=True) for i in range(num_perm)], dtype=np.uint64)


def band_sums(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per band, ``sum_i v_i * a_i mod 2**64`` of ``uint16[..., k]`` values; the top 32 bits are the band key."""
    return np.add.reduceat(values * _multipliers(values.shape[-1]), starts, axis=-1)


def band_keys(values: np.ndarray, min_shared: int) -> np.ndarray:
    """``uint32[n, b]``: the band keys of each row of ``values`` for the ``b = k - t + 1`` bands of ``t``."""
    starts = band_bounds(values.shape[-1], min_shared)
    return (band_sums(values, starts) >> np.uint64(32)).astype(np.uint32)


def band_tokens(values: np.ndarray) -> list[list[str]]:
    """The stored layout's band tokens of each row of ``uint16[n, k]`` (see the module doc)."""
    keys = band_keys(values, band_layout(values.shape[-1]))
    prefixes = [f"b{keys.shape[1]}_{j}_" for j in range(keys.shape[1])]
    return [[p + format(key, "x") for p, key in zip(prefixes, row, strict=True)] for row in keys.tolist()]


def stored_bands(num_perm: int) -> int:
    """``b = k - t0 + 1``: the number of stored band tokens per document."""
    return num_perm - band_layout(num_perm) + 1


def band_pairs(values: np.ndarray) -> np.ndarray:
    """``uint64[n * b]``: the stored layout's ``(band j, key)`` pairs ``j << 32 | key`` of the rows of
    ``uint16[n, k]`` (with repeats; the integers behind :func:`band_tokens`)."""
    keys = band_keys(values, band_layout(values.shape[-1]))
    return ((np.arange(keys.shape[1], dtype=np.uint64) << np.uint64(32)) | keys.astype(np.uint64)).ravel()


def distinct_band_pairs(values: np.ndarray) -> np.ndarray:
    """The distinct :func:`band_pairs` of all rows of ``uint16[n, k]``, sorted."""
    return np.unique(band_pairs(values))


def pair_tokens(pairs: np.ndarray, num_perm: int) -> list[str]:
    """The band tokens of sorted :func:`distinct_band_pairs` values (``b{b}_{j}_{key:x}``)."""
    bands = stored_bands(num_perm)
    cuts = np.searchsorted(pairs, np.arange(1, bands, dtype=np.uint64) << np.uint64(32))
    tokens: list[str] = []
    for j, part in enumerate(np.split(pairs & np.uint64(0xFFFFFFFF), cuts)):
        tokens.extend(map(f"b{bands}_{j}_%x".__mod__, part.tolist()))
    return tokens


def distinct_band_tokens(values: np.ndarray) -> list[str]:
    """The distinct band tokens of all rows of ``uint16[n, k]`` (:func:`band_tokens`, flattened), ordered by band
    then key. Duplicates are dropped on the ``(band, key)`` integers before any string is built: a batch query of
    many signatures formats each token once."""
    return pair_tokens(distinct_band_pairs(values), values.shape[-1])


# -- position tokens, many at once -----------------------------------------------------------------------------


def values_from_token_lists(token_lists: Sequence[Sequence[str]], num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    """Many stored signatures back from their position tokens at once (:meth:`StoredSignature.from_tokens`).

    A sweep of a million documents reads 128 million tokens; parsing them one by one in Python would take a
    minute, so the tokens of all documents are joined into one byte string and their decimal positions and
    hex values are read with array arithmetic (digit times its power of 10 or 16, summed per token).

    Returns:
        ``(values, valid)``: ``uint16[n, k]`` (rows of invalid lists are zero) and ``bool[n]``; a list is
        invalid when it does not hold exactly one well-formed token ``"i_v"`` for each position ``i < k``
        with ``v < 2**16``.
    """
    n = len(token_lists)
    values = np.zeros((n, num_perm), dtype=np.uint16)
    valid = np.fromiter((len(tokens) == num_perm for tokens in token_lists), dtype=bool, count=n)
    rows = np.flatnonzero(valid)
    if rows.size == 0:
        return values, valid
    try:
        blob = "_".join(token for i in rows.tolist() for token in token_lists[i]).encode("ascii")
    except (UnicodeEncodeError, TypeError):
        return _parse_one_by_one(token_lists, num_perm, values, valid)
    parsed = _parse_fields(np.frombuffer(blob, dtype=np.uint8), 2 * rows.size * num_perm)
    if parsed is None:
        return _parse_one_by_one(token_lists, num_perm, values, valid)
    positions = parsed[0::2].reshape(rows.size, num_perm)
    numbers = parsed[1::2].reshape(rows.size, num_perm)
    good = (positions < num_perm).all(axis=1) & (numbers <= _VALUE_MASK).all(axis=1)
    # Each position exactly once: the positions of a row, sorted, are 0 .. k-1.
    good &= (np.sort(np.where(positions < num_perm, positions, 0), axis=1) == np.arange(num_perm)).all(axis=1)
    take = rows[good]
    values[take[:, None], positions[good]] = numbers[good]
    valid[rows[~good]] = False
    return values, valid


# Value of each ASCII digit in hex ("0"-"9", "a"-"f"); 255 for any other byte.
_DIGIT = np.full(256, 255, dtype=np.int64)
_DIGIT[np.frombuffer(b"0123456789abcdef", dtype=np.uint8)] = np.arange(16)
_UNDERSCORE = ord("_")
_MAX_FIELD_DIGITS = 5
# Weight of a digit by field parity (0: decimal position, 1: hex value) and digits after it.
_WEIGHTS = np.array([[10**e for e in range(_MAX_FIELD_DIGITS)], [16**e for e in range(_MAX_FIELD_DIGITS)]])


def _parse_fields(data: np.ndarray, fields: int) -> np.ndarray | None:
    """The ``fields`` numbers of ``"p_v_p_v..."`` (``p`` decimal, ``v`` hex), or ``None`` if malformed."""
    seps = np.flatnonzero(data == _UNDERSCORE)
    if seps.size != fields - 1:
        return None
    starts = np.concatenate(([0], seps + 1))
    ends = np.concatenate((seps, [data.size]))
    lengths = ends - starts
    if lengths.min() < 1 or lengths.max() > _MAX_FIELD_DIGITS:
        return None
    field_of = np.repeat(np.arange(fields), lengths)
    chars = np.delete(data, seps)
    digits = _DIGIT[chars]
    parity = field_of & 1  # even fields are positions
    if (digits == 255).any() or (digits[parity == 0] > 9).any():
        return None
    power = np.repeat(ends, lengths) - (np.arange(chars.size) + field_of) - 1  # digits after this one
    weight = _WEIGHTS[parity, power]
    return np.bincount(field_of, weights=digits * weight, minlength=fields).astype(np.int64)


def _parse_one_by_one(
    token_lists: Sequence[Sequence[str]], num_perm: int, values: np.ndarray, valid: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The slow path, for a page of hits holding a malformed token: each list on its own."""
    for i in np.flatnonzero(valid).tolist():
        try:
            values[i] = StoredSignature.from_tokens(token_lists[i], num_perm, "").values
        except (ValueError, TypeError, AttributeError):
            valid[i] = False
    return values, valid
