"""The embedded candidate index: every kept page sharing >= t of k signature positions, without a scan.

**Pigeonhole retrieval.** The ``k`` positions are split into ``b = k - t + 1`` contiguous bands. Two signatures
that agree in at least ``t`` positions disagree in at most ``k - t = b - 1``, so at least one band agrees
entirely. Looking up each band of a new signature therefore finds *every* kept page sharing >= t positions
(no false negatives); candidates are then verified by counting agreeing positions (no false positives).
With the defaults (k = 128, t = 107) that is 22 bands of 5-6 positions.

**Storage.** The index keeps, per page, the low 16 bits of each signature position (b-bit minwise hashing,
Li & König 2010: two positions then agree with probability ``r + (1 - r) / 65536`` instead of ``r``, a
difference of at most 1.5e-5), the 64-bit fingerprint, and the page key. Band keys are 64-bit hashes of the
band's values, kept in one sorted array (searched with ``np.searchsorted``) plus a dict of recent inserts that
is merged into the sorted array when it grows past a fraction of it. Band keys are derived from the stored
values, so they are rebuilt on load rather than saved.

The index is not thread-safe: callers that check and insert concurrently must serialize
:meth:`SketchIndex.check_and_add` (the Scrapy pipeline runs it on the reactor thread, without awaiting inside).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .hashing import derive_constant, fmix64
from .sketch import Sketch

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
_MAGIC = "scrapy-neardup-index"
_LOW16 = np.uint32(0xFFFF)
_MERGE_FRACTION = 0.05
_MIN_MERGE = 4096


class StateError(RuntimeError):
    """A saved index cannot be used: damaged, truncated, of another format, or made with other parameters."""


@dataclass(frozen=True, slots=True)
class Match:
    """A kept page that a query sketch near-duplicates.

    Attributes:
        key: the kept page's key (URL or id) as given to :meth:`SketchIndex.add`.
        shared: positions where the signatures agree (>= t).
        resemblance: ``shared / k``, the estimated resemblance.
        exact: the normalized texts are identical (equal 64-bit fingerprints).
    """

    key: str
    shared: int
    resemblance: float
    exact: bool


def band_bounds(num_perm: int, min_shared: int) -> np.ndarray:
    """Start offsets of the ``b = k - t + 1`` pigeonhole bands (sizes differ by at most one)."""
    if not 1 <= min_shared <= num_perm:
        raise ValueError(f"min_shared must lie in [1, num_perm={num_perm}], got {min_shared}")
    bands = num_perm - min_shared + 1
    return (np.arange(bands, dtype=np.int64) * num_perm) // bands


class SketchIndex:
    """In-process index of kept sketches with exact t-of-k candidate retrieval (see module doc).

    Args:
        num_perm: ``k``; must equal the sketches' signature length.
        min_shared: ``t``; a page is a near-duplicate of a kept page when they agree in >= t positions.
        tag: the sketch parameter tag; sketches with another tag are refused (``IncompatibleSketches``).
    """

    def __init__(self, num_perm: int, min_shared: int, tag: str) -> None:
        self.num_perm = num_perm
        self.min_shared = min_shared
        self.tag = tag
        self._band_starts = band_bounds(num_perm, min_shared)
        multipliers = [derive_constant(0xBA4D, i, odd=True) for i in range(num_perm)]
        self._multipliers = np.array(multipliers, dtype=np.uint64)
        salts = [derive_constant(0x5A17, j) for j in range(self._band_starts.size)]
        self._band_salts = np.array(salts, dtype=np.uint64)
        self._size = 0
        self._values = np.empty((1024, num_perm), dtype=np.uint16)
        self._fingerprints = np.empty(1024, dtype=np.uint64)
        self._key_ends = np.empty(1024, dtype=np.int64)
        self._key_blob = bytearray()
        self._sorted_keys = np.empty(0, dtype=np.uint64)
        self._sorted_ids = np.empty(0, dtype=np.int32)
        self._recent: dict[int, list[int]] = {}

    def __len__(self) -> int:
        return self._size

    def key(self, doc: int) -> str:
        """The key of the ``doc``-th kept page."""
        start = int(self._key_ends[doc - 1]) if doc else 0
        return self._key_blob[start : int(self._key_ends[doc])].decode("utf-8", errors="surrogatepass")

    def query(self, sketch: Sketch) -> list[Match]:
        """Every kept page sharing >= t positions with ``sketch``, most shared first."""
        values = self._check(sketch)
        candidates = self._candidates(self._band_keys(values))
        if candidates.size == 0:
            return []
        shared = np.count_nonzero(self._values[candidates] == values, axis=1)
        hits = np.flatnonzero(shared >= self.min_shared)
        order = hits[np.argsort(-shared[hits], kind="stable")]
        return [
            Match(
                key=self.key(int(candidates[i])),
                shared=int(shared[i]),
                resemblance=int(shared[i]) / self.num_perm,
                exact=int(self._fingerprints[candidates[i]]) == sketch.fingerprint,
            )
            for i in order
        ]

    def best_match(self, sketch: Sketch) -> Match | None:
        """The kept page sharing the most positions (exact duplicates first), or ``None``."""
        matches = self.query(sketch)
        if not matches:
            return None
        return max(matches, key=lambda m: (m.exact, m.shared))

    def add(self, key: str, sketch: Sketch) -> None:
        """Keep ``sketch`` under ``key`` (no check: see :meth:`check_and_add`)."""
        self._insert(key, self._check(sketch), sketch.fingerprint)

    def check_and_add(self, key: str, sketch: Sketch) -> Match | None:
        """First seen is kept: return the best kept match, or keep ``sketch`` and return ``None``."""
        match = self.best_match(sketch)
        if match is None:
            self.add(key, sketch)
        return match

    # -- internals -------------------------------------------------------------------------------------------

    def _check(self, sketch: Sketch) -> np.ndarray:
        if sketch.tag != self.tag:
            from .sketch import IncompatibleSketches

            raise IncompatibleSketches(f"index holds {self.tag!r} sketches, got one made with {sketch.tag!r}")
        if sketch.empty:
            raise ValueError("an empty sketch (text without shingles) cannot be indexed")
        return (sketch.signature & _LOW16).astype(np.uint16)

    def _band_keys(self, values: np.ndarray) -> np.ndarray:
        """64-bit keys of a signature's bands: ``fmix64(sum_i v_i * a_i  xor  salt_band)``."""
        weighted = values.astype(np.uint64) * self._multipliers
        return fmix64(np.add.reduceat(weighted, self._band_starts, axis=-1) ^ self._band_salts)

    def _candidates(self, band_keys: np.ndarray) -> np.ndarray:
        lo = np.searchsorted(self._sorted_keys, band_keys, side="left")
        hi = np.searchsorted(self._sorted_keys, band_keys, side="right")
        found = [self._sorted_ids[a:b] for a, b in zip(lo.tolist(), hi.tolist(), strict=True) if b > a]
        recent = self._recent
        for band_key in band_keys.tolist():
            docs = recent.get(band_key)
            if docs is not None:
                found.append(np.asarray(docs, dtype=np.int32))
        if not found:
            return np.empty(0, dtype=np.int64)
        return np.unique(np.concatenate(found)).astype(np.int64)

    def _insert(self, key: str, values: np.ndarray, fingerprint: int) -> None:
        doc = self._size
        self._grow(doc + 1)
        self._values[doc] = values
        self._fingerprints[doc] = fingerprint
        self._key_blob += key.encode("utf-8", errors="surrogatepass")
        self._key_ends[doc] = len(self._key_blob)
        self._size += 1
        for band_key in self._band_keys(values).tolist():
            self._recent.setdefault(band_key, []).append(doc)
        if len(self._recent) > max(_MIN_MERGE, _MERGE_FRACTION * self._sorted_keys.size):
            self._merge_recent()

    def _grow(self, needed: int) -> None:
        capacity = self._values.shape[0]
        if needed <= capacity:
            return
        capacity = max(needed, capacity * 2)
        self._values = _resized(self._values, capacity)
        self._fingerprints = _resized(self._fingerprints, capacity)
        self._key_ends = _resized(self._key_ends, capacity)

    def _merge_recent(self) -> None:
        keys = np.fromiter(
            (k for k, docs in self._recent.items() for _ in docs), dtype=np.uint64
        )
        ids = np.fromiter((d for docs in self._recent.values() for d in docs), dtype=np.int32)
        self._set_sorted(np.concatenate([self._sorted_keys, keys]), np.concatenate([self._sorted_ids, ids]))
        self._recent = {}

    def _set_sorted(self, keys: np.ndarray, ids: np.ndarray) -> None:
        order = np.argsort(keys, kind="stable")
        self._sorted_keys = keys[order]
        self._sorted_ids = ids[order]

    def _rebuild_bands(self) -> None:
        values = self._values[: self._size]
        keys = self._band_keys(values).ravel()
        ids = np.repeat(np.arange(self._size, dtype=np.int32), self._band_starts.size)
        self._set_sorted(keys, ids)
        self._recent = {}

    # -- persistence -----------------------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the index to ``path`` atomically (temporary file, fsync, rename).

        A crash while saving leaves the previous file intact. The file is a zip of numpy arrays plus a JSON
        header with the parameters and a SHA-256 of every array, checked on load.
        """
        path = Path(path)
        n = self._size
        arrays = {
            "values": self._values[:n],
            "fingerprints": self._fingerprints[:n],
            "key_ends": self._key_ends[:n],
            "key_blob": np.frombuffer(bytes(self._key_blob), dtype=np.uint8),
        }
        header = {
            "magic": _MAGIC,
            "format": FORMAT_VERSION,
            "tag": self.tag,
            "num_perm": self.num_perm,
            "min_shared": self.min_shared,
            "size": n,
            "sha256": {name: _digest(a) for name, a in arrays.items()},
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as zf:
                    zf.writestr("header.json", json.dumps(header))
                    for name, array in arrays.items():
                        buffer = io.BytesIO()
                        np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
                        zf.writestr(name + ".npy", buffer.getvalue())
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
            _fsync_dir(path.parent)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        logger.debug("saved %d sketches to %s", n, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str], num_perm: int, min_shared: int, tag: str) -> SketchIndex:
        """Load an index saved by :meth:`save`, checking that it was made with the same parameters.

        Raises:
            StateError: the file is damaged or truncated, or its tag, ``k`` or ``t`` differ from the ones
                asked for (the message names both).
        """
        path = Path(path)
        try:
            with zipfile.ZipFile(path) as zf:
                header = json.loads(zf.read("header.json"))
                arrays: dict[str, np.ndarray] = {
                    name: np.load(io.BytesIO(zf.read(name + ".npy")), allow_pickle=False)
                    for name in ("values", "fingerprints", "key_ends", "key_blob")
                }
        except (OSError, zipfile.BadZipFile, KeyError, ValueError, EOFError) as exc:
            raise StateError(f"near-duplicate state file {path} is damaged or unreadable: {exc}") from exc
        if header.get("magic") != _MAGIC or header.get("format") != FORMAT_VERSION:
            raise StateError(f"{path} is not a scrapy-neardup index of format {FORMAT_VERSION}")
        saved = (header.get("tag"), header.get("num_perm"), header.get("min_shared"))
        if saved != (tag, num_perm, min_shared):
            raise StateError(
                f"{path} was made with tag={saved[0]} num_perm={saved[1]} min_shared={saved[2]}, but this run uses "
                f"tag={tag} num_perm={num_perm} min_shared={min_shared}; use another state directory or reset it"
            )
        for name, array in arrays.items():
            if header["sha256"].get(name) != _digest(array):
                raise StateError(f"near-duplicate state file {path} is damaged: checksum mismatch in {name!r}")
        size = int(header["size"])
        index = cls(num_perm, min_shared, tag)
        values = arrays["values"]
        if values.shape != (size, num_perm) or arrays["key_ends"].shape != (size,):
            raise StateError(f"near-duplicate state file {path} is damaged: array shapes disagree with header")
        index._grow(size)
        index._values[:size] = values
        index._fingerprints[:size] = arrays["fingerprints"]
        index._key_ends[:size] = arrays["key_ends"]
        index._key_blob = bytearray(arrays["key_blob"].tobytes())
        index._size = size
        index._rebuild_bands()
        return index

    def memory_bytes(self) -> int:
        """Bytes held by the index's arrays (the dict of recent inserts estimated at 100 bytes an entry)."""
        arrays = (self._values, self._fingerprints, self._key_ends, self._sorted_keys, self._sorted_ids)
        recent = sum(len(docs) for docs in self._recent.values()) * 100
        return sum(a.nbytes for a in arrays) + len(self._key_blob) + recent


def _resized(array: np.ndarray, capacity: int) -> np.ndarray:
    grown = np.empty((capacity, *array.shape[1:]), dtype=array.dtype)
    grown[: array.shape[0]] = array
    return grown


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
