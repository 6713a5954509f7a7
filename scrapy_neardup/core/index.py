"""The embedded candidate index: every kept page sharing >= t of k signature positions, without a scan.

Design notes: docs/architecture.md#scrapy_neardupcoreindex
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import IncompatibleSketches
from . import index_file
from .band_runs import BandRuns, keys_of
from .match import Decision, Match, Sketched, best_first
from .memory import resized
from .page_keys import PageKeys
from .sketch import SKETCHED, Sketch
from .stored_signature import StoredSketch, band_bounds, band_sums, shared_counts, stored_values

# Names other modules take from here (the index's home before it was split, and the types of its answers).

# What of a kept page was sketched travels as a byte (0: not known, a page stored by an earlier version).
_KIND_CODE = {name: code for code, name in enumerate(SKETCHED, start=1)}
_KIND_BY_CODE = {code: name for name, code in _KIND_CODE.items()}

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
        self._shape = (num_perm,)
        #: The store's metadata saved in the header (see save); empty for a new index.
        self.meta: dict[str, Any] = {}
        self._clear()

    def _clear(self) -> None:
        """No page at all (a new index, or one whose pages were all removed and compacted away)."""
        # Per page.
        self._size = 0
        self._values = np.empty((1024, self.num_perm), dtype=np.uint16)
        self._fingerprints = np.empty(1024, dtype=np.uint64)
        self._page_keys = PageKeys()
        # Removed pages (tombstones, see page_keys).
        self._dead = np.zeros(1024, dtype=bool)
        self._dead_count = 0
        # Pages whose key was kept or revisited in the current crawl (see the module doc: repeats).
        self._seen = np.zeros(1024, dtype=bool)
        # What of each kept page was sketched (the kept side of a duplicate's evidence): kind code, words
        # sketched, words of the page's whole text (0: not counted).
        self._text = np.zeros((1024, 3), dtype=np.uint32)
        self._runs = BandRuns(self._band_starts)

    def __len__(self) -> int:
        """Live pages (removed ones are not counted)."""
        return self._size - self._dead_count

    def key(self, doc: int) -> str:
        """The key of the ``doc``-th kept page."""
        return self._page_keys.key(doc)

    def query(self, sketch: Sketch | StoredSketch) -> list[Match]:
        """Every kept page sharing >= t positions with ``sketch``, best first (:func:`best_first`)."""
        values, fingerprint = self._values_of(sketch)
        return self._matches(values, self._candidates(values)[0], fingerprint)

    def best_match(self, sketch: Sketch | StoredSketch) -> Match | None:
        """The kept page sharing the most positions (exact duplicates first), or ``None``."""
        values, fingerprint = self._values_of(sketch)
        return self._best(values, self._candidates(values)[0], fingerprint)

    def add(self, key: str, sketch: Sketch | StoredSketch) -> None:
        """Keep ``sketch`` under ``key`` (no check: see :meth:`check_and_add`)."""
        self._add(key, *self._values_of(sketch), _text_of(sketch))

    def _add(self, key: str, values: np.ndarray, fingerprint: int, text: tuple[int, int, int] = (0, 0, 0)) -> None:
        keys = keys_of(band_sums(values, self._band_starts))
        self._insert(key, values, keys, keys.tolist(), fingerprint, text)

    def check_and_add(self, key: str, sketch: Sketch | StoredSketch) -> Match | None:
        """First seen is kept: return the best kept match, or keep ``sketch`` and return ``None``."""
        values, fingerprint = self._values_of(sketch)
        candidates, keys, band_keys = self._candidates(values)
        if candidates:
            match = self._best(values, candidates, fingerprint)
            if match is not None:
                return match
        self._insert(key, values, keys, band_keys, fingerprint, _text_of(sketch))
        return None

    def query_and_add(self, key: str, sketch: Sketch | StoredSketch) -> list[Match]:
        """Every kept page sharing >= t positions with ``sketch`` (most shared first), then keep ``sketch``
        too, whatever was found: the pair-finding step of Broder's clustering, where every page must be
        findable by the pages after it (see :class:`~scrapy_neardup.core.clustering.GroupBuilder`)."""
        values, fingerprint = self._values_of(sketch)
        candidates, keys, band_keys = self._candidates(values)
        matches = self._matches(values, candidates, fingerprint)
        self._insert(key, values, keys, band_keys, fingerprint, _text_of(sketch))
        return matches

    # -- keys: recurring crawls (see page_keys) --------------------------------------------------------------

    def live(self) -> np.ndarray:
        """The numbers of the live pages (removed ones left out), ascending."""
        return np.flatnonzero(~self._dead[: self._size])

    def stored(self, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The stored values (``uint16[len(docs), k]``, the low 16 bits the t-of-k rule compares) and the
        fingerprints of pages ``docs``."""
        return self._values[docs], self._fingerprints[docs]

    def find(self, key: str) -> int | None:
        """The live page stored under ``key`` (its number), or ``None``."""
        return self._page_keys.find(key, self._dead)

    def remove(self, doc: int) -> None:
        """Mark page ``doc`` dead: no lookup finds it any more (see :mod:`~scrapy_neardup.core.page_keys`)."""
        if not self._dead[doc]:
            self._dead[doc] = True
            self._dead_count += 1
            self._page_keys.forget(doc)

    def put(self, key: str, sketch: Sketch | StoredSketch) -> bool:
        """Make ``sketch`` the stored content of ``key`` (adding it, or replacing the stored version unless
        that is identical); whether anything changed. Idempotent: the journal replays with it."""
        values, fingerprint = self._values_of(sketch)
        doc = self.find(key)
        if doc is not None:
            if int(self._fingerprints[doc]) == fingerprint and np.array_equal(self._values[doc], values):
                return False
            self.remove(doc)
        self._add(key, values, fingerprint, _text_of(sketch))
        return True

    def delete(self, key: str) -> bool:
        """Remove the page stored under ``key``; whether there was one. Idempotent."""
        doc = self.find(key)
        if doc is None:
            return False
        self.remove(doc)
        return True

    def check_key(self, key: str, sketch: Sketch | StoredSketch) -> Decision:
        """The recrawl rule: a page seen again under its key is a revisit, never a copy of itself.

        * ``key`` not stored: as :meth:`check_and_add` (a duplicate of its best match, else kept).
        * ``key`` stored, and its best match (exact duplicates first, then most positions shared; a tie goes
          to its own version) is its own stored version: a revisit, ``changed`` unless the fingerprints (the
          normalized texts) are equal; a changed page replaces the stored version. An unchanged page whose key
          was already kept or revisited in this crawl (:meth:`seen`) is a *repeat* instead (nothing changes).
        * ``key`` stored, no match at all (the content changed completely): a changed revisit (replaced).
        * ``key`` stored, but another kept page matches better: a duplicate naming that page; the key's stale
          entry is removed, so that pages once dropped as its copies are judged afresh later.

        No duplicate ever names a page whose stored content does not share ``>= t`` positions with ``sketch``.
        """
        own = self.find(key)
        values, fingerprint = self._values_of(sketch)
        candidates, keys, band_keys = self._candidates(values)
        best = self._best_doc(values, candidates, fingerprint, own) if candidates else None
        if own is None:
            if best is not None:
                return Decision.duplicate(self._match(best[0], best[1], fingerprint))
            self._insert(key, values, keys, band_keys, fingerprint, _text_of(sketch))
            self._seen[self._size - 1] = True
            return Decision.kept()
        if best is not None and best[0] != own:
            self.remove(own)
            return Decision.duplicate(self._match(best[0], best[1], fingerprint), removed=True)
        if int(self._fingerprints[own]) == fingerprint:
            if self._seen[own]:
                return Decision.repeat()
            self._seen[own] = True
            return Decision.revisit(False)
        self.remove(own)
        self._insert(key, values, keys, band_keys, fingerprint, _text_of(sketch))
        self._seen[self._size - 1] = True
        return Decision.revisit(True)

    # -- repeats within one crawl (see the module doc) -------------------------------------------------------

    def seen(self, key: str) -> bool:
        """Whether ``key`` is stored and was kept or revisited in the current crawl (see the module doc)."""
        doc = self.find(key)
        return doc is not None and bool(self._seen[doc])

    def see(self, key: str) -> bool:
        """Flag ``key`` as kept or revisited in the current crawl (a journal's replay); whether it is stored."""
        doc = self.find(key)
        if doc is None:
            return False
        self._seen[doc] = True
        return True

    def forget_seen(self) -> None:
        """Clear every flag: another crawl starts on this store (its pages are revisits again, once)."""
        self._seen[:] = False

    @property
    def seen_count(self) -> int:
        """Live pages flagged as kept or revisited in the current crawl."""
        n = self._size
        return int(np.count_nonzero(self._seen[:n] & ~self._dead[:n]))

    def compact(self) -> None:
        """Drop the removed pages, renumbering the live ones in order (rebuilds the band runs: one sort)."""
        if not self._dead_count:
            return
        n = self._size
        live = ~self._dead[:n]
        if not live.any():
            self._clear()  # meta (the store's snapshot identity) stays
            return
        self._page_keys.compact(live)
        self._values = self._values[:n][live]
        self._fingerprints = self._fingerprints[:n][live]
        self._seen = self._seen[:n][live]
        self._text = self._text[:n][live]
        self._size = int(self._values.shape[0])
        self._dead = np.zeros(self._size, dtype=bool)
        self._dead_count = 0
        self._runs.rebuild(self._values, self._size)

    def memory_bytes(self) -> int:
        """Bytes the index uses: its arrays as far as written (room reserved for growth and not yet written is
        not resident and not counted), plus the set of recent band keys at about 60 bytes a key."""
        n = self._size
        per_page = self._values[:n].nbytes + self._fingerprints[:n].nbytes
        per_page += self._dead[:n].nbytes + self._seen[:n].nbytes + self._text[:n].nbytes
        return per_page + self._page_keys.memory_bytes() + self._runs.memory_bytes()

    # -- lookups ---------------------------------------------------------------------------------------------

    def _values_of(self, page: Sketch | StoredSketch) -> tuple[np.ndarray, int]:
        """The stored values of a page's signature (their low 16 bits) and its fingerprint, after checking the
        page can be indexed here."""
        if isinstance(page, StoredSketch):
            stored = page.signature
            if stored.tag != self.tag:
                raise IncompatibleSketches(f"index holds {self.tag!r} sketches, got one made with {stored.tag!r}")
            if stored.values.shape != self._shape:
                raise ValueError(f"expected a signature of {self.num_perm} positions, got shape {stored.values.shape}")
            return stored.values, page.fingerprint
        signature = page.signature
        if page.tag != self.tag:
            raise IncompatibleSketches(f"index holds {self.tag!r} sketches, got one made with {page.tag!r}")
        if page.num_shingles == 0:
            raise ValueError("an empty sketch (text without shingles) cannot be indexed")
        if signature.shape != self._shape:
            raise ValueError(f"expected a signature of {self.num_perm} positions, got shape {signature.shape}")
        return stored_values(signature), page.fingerprint

    def _candidates(self, values: np.ndarray) -> tuple[set[int], np.ndarray, list[int]]:
        """Pages sharing a band key with ``values`` (a superset of the t-of-k matches), and the band keys."""
        return self._runs.candidates(band_sums(values, self._band_starts), self._size)

    def _matches(self, values: np.ndarray, candidates: set[int], fingerprint: int) -> list[Match]:
        """The verified matches among ``candidates`` (>= t positions shared), best first (:func:`best_first`)."""
        if not candidates:
            return []
        docs = np.fromiter(candidates, dtype=np.intp, count=len(candidates))
        docs.sort()
        if self._dead_count:
            docs = docs[~self._dead[docs]]
        shared = shared_counts(self._values[docs], values)
        hits = np.flatnonzero(shared >= self.min_shared)
        exact = self._fingerprints[docs[hits]] == np.uint64(fingerprint)
        order = hits[best_first(exact, shared[hits], docs[hits])]
        return [self._match(int(docs[i]), int(shared[i]), fingerprint) for i in order.tolist()]

    def _best(self, values: np.ndarray, candidates: set[int], fingerprint: int) -> Match | None:
        """The best verified match among ``candidates``: exact duplicate, then most shared, then earliest."""
        best = self._best_doc(values, candidates, fingerprint) if candidates else None
        return None if best is None else self._match(best[0], best[1], fingerprint)

    def _best_doc(
        self, values: np.ndarray, candidates: set[int], fingerprint: int, own: int | None = None,
    ) -> tuple[int, int] | None:
        """``(page, shared)`` of the best live verified match: exact duplicate, then most shared, then
        ``own`` (a key's own stored version wins ties), then earliest."""
        if len(candidates) == 1:
            doc = next(iter(candidates))
            shared = int(shared_counts(self._values[doc], values))
            return (doc, shared) if shared >= self.min_shared and not self._dead[doc] else None
        docs = np.fromiter(candidates, dtype=np.intp, count=len(candidates))
        if self._dead_count:
            docs = docs[~self._dead[docs]]
        shared_all = shared_counts(self._values[docs], values)
        hits = np.flatnonzero(shared_all >= self.min_shared)
        if hits.size == 0:
            return None
        exact = self._fingerprints[docs[hits]] == np.uint64(fingerprint)
        # The one ranking (best_first); a key's own stored version wins ties before "earliest": order -1.
        order = np.where(docs[hits] == own, -1, docs[hits]) if own is not None else docs[hits]
        best = int(hits[best_first(exact, shared_all[hits], order)[0]])
        return int(docs[best]), int(shared_all[best])

    def _match(self, doc: int, shared: int, fingerprint: int) -> Match:
        return Match(
            key=self.key(doc),
            shared=shared,
            resemblance=shared / self.num_perm,
            exact=int(self._fingerprints[doc]) == fingerprint,
            kept=self.sketched(doc),
        )

    def sketched(self, doc: int) -> Sketched | None:
        """What of the ``doc``-th kept page was sketched (``None``: not known, stored by an earlier version)."""
        kind, words, page_words = (int(v) for v in self._text[doc])
        return Sketched(_KIND_BY_CODE[kind], words, page_words) if kind in _KIND_BY_CODE else None

    # -- inserts ---------------------------------------------------------------------------------------------

    def _insert(
        self, key: str, values: np.ndarray, keys: np.ndarray, band_keys: list[int], fingerprint: int,
        text: tuple[int, int, int] = (0, 0, 0),
    ) -> None:
        doc = self._size
        if doc >= self._values.shape[0]:
            self._grow(doc + 1)
        self._values[doc] = values
        self._fingerprints[doc] = fingerprint
        self._page_keys.add(doc, key)
        self._dead[doc] = False
        self._seen[doc] = False
        self._text[doc] = text
        self._size = doc + 1
        self._runs.insert(doc, keys, band_keys)

    def _grow(self, needed: int) -> None:
        capacity = max(needed, self._values.shape[0] * 2)
        self._values = resized(self._values, capacity)
        self._fingerprints = resized(self._fingerprints, capacity)
        self._page_keys.grow(capacity)
        if self._dead.shape[0] < capacity:
            self._dead = resized(self._dead, capacity)
        if self._seen.shape[0] < capacity:
            self._seen = resized(self._seen, capacity)
        if self._text.shape[0] < capacity:
            self._text = resized(self._text, capacity)

    # -- persistence (see index_file) ------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str], meta: dict[str, Any] | None = None) -> None:
        """Compact the index (:meth:`compact`: removed pages are not saved), then write it to ``path``
        atomically (temporary file, fsync, rename). ``meta`` (JSON) is saved in the header and becomes
        :attr:`meta`, here and in the loaded index (the embedded store keeps its snapshot identity there).

        A crash while saving leaves the previous file intact. The file is a zip of numpy arrays plus a JSON
        header with the parameters and a SHA-256 of every array, checked on load. Besides the per-page arrays
        it holds the sorted runs of band entries and their directory (about 130 bytes a page), so that a load
        only checks them instead of sorting all band keys again.
        """
        self.compact()
        if meta is not None:
            self.meta = dict(meta)
        n = self._size
        key_ends, key_blob = self._page_keys.saved()
        run_arrays, runs = self._runs.saved()
        arrays: dict[str, np.ndarray] = {
            "values": self._values[:n],
            "fingerprints": self._fingerprints[:n],
            "key_ends": key_ends,
            "key_blob": key_blob,
            # Which pages the current crawl kept or revisited (repeats; older versions ignore the array).
            "seen": self._seen[:n],
            # What of each page was sketched (the kept side of the evidence; older versions ignore the array).
            "sketched": self._text[:n],
            **run_arrays,
        }
        index_file.write(Path(path), (self.tag, self.num_perm, self.min_shared), n, arrays, runs, self.meta)

    @classmethod
    def load(cls, path: str | os.PathLike[str], num_perm: int, min_shared: int, tag: str) -> SketchIndex:
        """Load an index saved by :meth:`save`, checking that it was made with the same parameters.

        Raises:
            StateError: the file is damaged or truncated, or its tag, ``k`` or ``t`` differ from the ones
                asked for (the message names both).
        """
        saved = index_file.read(Path(path), num_perm, min_shared, tag)
        size, arrays = saved.size, saved.arrays
        index = cls(num_perm, min_shared, tag)
        if size:
            index._values = arrays["values"]
            index._fingerprints = arrays["fingerprints"].astype(np.uint64, copy=False)
        index._page_keys.restore(arrays["key_ends"], arrays["key_blob"], size)
        index._size = size
        index._dead = np.zeros(max(size, 1024), dtype=bool)
        index._seen = np.zeros(max(size, 1024), dtype=bool)
        if "seen" in arrays:  # saved by this version (checked by index_file.read); earlier ones: none flagged
            index._seen[:size] = arrays["seen"]
        index._text = np.zeros((max(size, 1024), 3), dtype=np.uint32)
        if "sketched" in arrays:  # saved since evidence names the kept side; earlier files: not known
            index._text[:size] = arrays["sketched"]
        index.meta = saved.meta
        if saved.runs is None or not index._runs.restore(saved.runs, arrays, index._values, size):
            index._runs.rebuild(index._values, size)
        return index


def _text_of(page: Sketch | StoredSketch) -> tuple[int, int, int]:
    """What of ``page`` was sketched, as the index keeps it: (kind code, words, page words)."""
    return _KIND_CODE.get(page.sketched, 0), min(page.words, _MAX_U32), min(page.page_words, _MAX_U32)


_MAX_U32 = (1 << 32) - 1
