"""The embedded candidate index: every kept page sharing >= t of k signature positions, without a scan.

**Pigeonhole retrieval.** The ``k`` positions are split into ``b = k - t + 1`` contiguous bands. Two signatures
that agree in at least ``t`` positions disagree in at most ``k - t = b - 1``, so at least one band agrees
entirely. Looking up each band of a new signature therefore finds *every* kept page sharing >= t positions
(no false negatives); candidates are then verified by counting agreeing positions (no false positives).
With the defaults (k = 128, t = 107) that is 22 bands of 5-6 positions.

**Stored per page.** The low 16 bits of each signature position (b-bit minwise hashing, Li & König 2010:
two positions then agree with probability ``r + (1 - r) / 65536`` instead of ``r``, a difference of at most
1.5e-5; all counting, and so the t-of-k rule, is on these 16-bit values), the 64-bit fingerprint, the page
key (UTF-8, in one byte blob, with a 32-bit end offset per page) and one 6-byte *band entry* per band. With
k = 128, b = 22 and 60-byte URLs that is 256 + 8 + 64 + 132 = 460 bytes, plus at most half a byte of
bucket directory per band entry and the recent tier (below).

**Band keys.** A band's key is the top 32 bits of ``sum_i v_i * a_i mod 2**64`` over its positions, with
fixed random 64-bit multipliers ``a_i`` (multiply-shift hashing): two different bands share a key with
probability about 2**-32, and such a collision only adds a candidate, which the count then rejects.

**Three tiers of band entries**, so that an insert costs O(1) amortized and a lookup a fixed number of numpy
calls whatever the size:

* *recent*: the band keys of the last pages kept (up to 1/32 of the index, at most 16384 pages) as a Python
  set (is any key there?) plus band-major rows of keys (which pages?). An insert is one set update.
* *mid* and *main*: two runs of entries sorted by key, back to back in one array of the keys' low 16 bits
  and one array of 32-bit page numbers. Each run has a directory of bucket start offsets over the top ``D``
  bits of the key (``D >= 16``, chosen so that main's buckets hold 8-16 entries on average; mid uses
  ``D - 2``); bucket and low 16 bits give back the whole key. A lookup reads one directory slot and one
  contiguous window of 32 entries per band and run (all the entries of a key sit at the start of its
  bucket): a couple of cache misses instead of a binary search through megabytes, and both runs are
  searched by the same few numpy calls. An entry of the window with the same low 16 bits but from the next
  bucket is a (rare) extra candidate; buckets larger than the window (a band shared by many kept pages) are
  listed apart and searched in full.

When the recent tier is full its entries are sorted and merged into mid; when mid outgrows a quarter of main,
mid is merged into main. Merges go segment by segment from the back of a run, in place (temporaries stay a
fraction of the run), and move the directories by counts instead of recounting; a larger main gets a
recounted directory with more bits. Each entry is rewritten a few times in its life: a few microseconds per
insert, amortized. After a merge, freed heap memory is handed back to the OS (glibc keeps freed temporaries
of many megabytes otherwise, which would count as resident memory).

**Keys, replacements, removals (recurring crawls).** A page's key identifies it across crawls:
:meth:`SketchIndex.find` gives the live page stored under a key (a sorted array of the keys' 64-bit hashes,
12 bytes a page, plus a dict of the keys added since its last merge; a hash hit is confirmed on the key
itself). :meth:`SketchIndex.remove` marks a page dead (a tombstone: lookups skip it; its band entries stay,
which only adds candidates that are then rejected, so retrieval stays exact for the live pages), and a
replacement is a removal plus an insert. :meth:`SketchIndex.compact` drops dead pages and renumbers the rest
(one sort of the band entries); :meth:`SketchIndex.save` compacts first, so a saved index holds only live
pages: its size is bounded by the number of distinct live keys however often they were replaced.
:meth:`SketchIndex.check_key` applies the recrawl rule (see there).

**Persistence.** ``save`` writes the per-page arrays (band entries are derived from the stored values and are
rebuilt on load: one sort) as a zip of ``.npy`` files with a JSON header holding the parameters and a SHA-256
of every array, checked on load.

The index is not thread-safe: callers that check and insert concurrently must serialize
:meth:`SketchIndex.check_and_add` (the Scrapy pipeline runs it on the reactor thread, without awaiting inside).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import StateError
from .match import Decision, Match, best_first
from .params import content_change, parse_tag
from .sketch import Sketch
from .storage import atomic_writer
from .stored import StoredSignature, band_bounds, band_sums, shared_counts, stored_values

logger = logging.getLogger(__name__)

FORMAT_VERSION = 3
# Format 1 has no runs (they are rebuilt from the values); format 3 adds the store's metadata to the header
# (see SketchIndex.save: the embedded store's snapshot identity); the arrays of 2 and 3 are the same.
_READABLE_FORMATS = (1, 2, 3)
_MAGIC = "scrapy-neardup-index"
_ARRAYS = ("values", "fingerprints", "key_ends", "key_blob")
_RUN_ARRAYS = ("band_low", "band_pages", "directory")
_S32 = np.uint64(32)
_HIGH32 = np.uint64(0xFFFFFFFF00000000)
# Where, in a uint64 band sum seen as uint32 (uint16) words, the band key (its low 16 bits) sits.
_KEY_WORD = 1 if sys.byteorder == "little" else 0
_KEY_LOW_WORD = 2 if sys.byteorder == "little" else 1
# Main's directory buckets hold at most this many entries on average (and more than half as many).
_BUCKET_MEAN = 16
# At least 16 directory bits, so that a bucket and the stored low 16 bits give back the whole 32-bit key.
_MIN_BITS = 16
_MAX_BITS = 28
# Keys read per bucket lookup; larger buckets are searched in full (see _big). A bucket of Poisson(16)
# entries exceeds 32 with probability 1e-4.
_WINDOW = 32
# Page number of the padding after the runs: never a real page, so padding read by a window never matches.
_NO_PAGE = np.uint32(0xFFFFFFFF)
# Mid is merged into main when it holds more than this fraction of main's entries.
_MID_FRACTION = 0.25
# Recent pages are flushed into the runs after 1/32 of the runs' size in pages, within these bounds (the set
# of their band keys costs about 60 bytes a key: at most 22 MB with 22 bands).
_RECENT_MIN_PAGES = 1 << 9
_RECENT_PAGES = 1 << 14
# Runs are merged in 64 segments of buckets (of at least 2**12 buckets), from the back, in place: temporaries
# stay a fraction of the run.
_SEGMENTS_BITS = 6
_MIN_SEGMENT_BITS = 12
# Key offsets are uint32 until the key blob outgrows them.
_MAX_OFFSET32 = 0xFFFFFFFF
# Pages whose band entries are computed per numpy pass when rebuilding after load (bounds temporaries).
_REBUILD_CHUNK = 1 << 16
# Keys added since the sorted key-hash array was last merged, held in a dict (about 100 bytes a key).
_RECENT_KEYS = 1 << 15


def parameters_differ(path: Any, saved: tuple[Any, Any, Any], used: tuple[str, int, int]) -> str:
    """The one line refusing a saved store (index or journal) made with other parameters, naming what to do."""
    change = content_change(str(saved[0]), used[0]) if saved[1:] == used[1:] else None
    if change is not None:
        mode = parse_tag(str(saved[0])).content
        return (f"{path}: {change}; reset the store with NEARDUP_RESET=True (each page is sketched anew "
                f"when the crawl meets it), or keep it with NEARDUP_CONTENT={mode!r}")
    return (f"{path} was made with tag={saved[0]} num_perm={saved[1]} min_shared={saved[2]}, but this run uses "
            f"tag={used[0]} num_perm={used[1]} min_shared={used[2]}; use another state directory or reset it")


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
        self._bands = int(self._band_starts.size)
        self._shape = (num_perm,)
        self._buckets = np.empty((2, self._bands), dtype=np.uint64)
        self._bucket_numbers = self._buckets.view(np.intp)
        # Per page.
        self._size = 0
        self._values = np.empty((1024, num_perm), dtype=np.uint16)
        self._fingerprints = np.empty(1024, dtype=np.uint64)
        self._key_ends = np.empty(1024, dtype=np.uint32)  # int64 once the blob passes 4 GB
        self._key_blob = bytearray()
        # Removed pages (tombstones, see the module doc) and the key lookup, built on the first find().
        self._dead = np.zeros(1024, dtype=bool)
        self._dead_count = 0
        self._keys_indexed = False
        self._key_hashes = np.empty(0, dtype=np.int64)  # sorted hashes of the keys of pages < _keys_sorted_upto
        self._key_docs = np.empty(0, dtype=np.uint32)
        self._recent_key_docs: dict[str, int] = {}
        #: The store's metadata saved in the header (see save); empty for a new index.
        self.meta: dict[str, Any] = {}
        # Recent tier: pages _recent_first .. _size - 1.
        self._recent: set[int] = set()
        self._recent_keys = np.empty((self._bands, _RECENT_PAGES), dtype=np.uint32)
        self._recent_first = 0
        self._recent_limit = _RECENT_MIN_PAGES
        # Runs: main = [0, _main), mid = [_main, _used) of _low / _pages, then _WINDOW + 1 padding slots.
        self._low = np.zeros(_WINDOW + 1, dtype=np.uint16)
        self._pages = np.full(_WINDOW + 1, _NO_PAGE, dtype=np.uint32)
        self._main = 0
        self._used = 0
        self._main_bits = _MIN_BITS + 2
        self._directory = np.zeros((1 << self._main_bits) + 1, dtype=np.uint32)
        self._set_main_directory(self._main_bits)

    def __len__(self) -> int:
        """Live pages (removed ones are not counted)."""
        return self._size - self._dead_count

    def key(self, doc: int) -> str:
        """The key of the ``doc``-th kept page."""
        start = int(self._key_ends[doc - 1]) if doc else 0
        return self._key_blob[start : int(self._key_ends[doc])].decode("utf-8", errors="surrogatepass")

    def query(self, sketch: Sketch) -> list[Match]:
        """Every kept page sharing >= t positions with ``sketch``, best first (:func:`best_first`)."""
        values = self._check(sketch)
        return self._matches(values, self._candidates(self._band_sums(values))[0], sketch.fingerprint)

    def query_stored(self, stored: StoredSignature, fingerprint: int) -> list[Match]:
        """:meth:`query` for a stored signature (as read back from a journal or an index) and its fingerprint."""
        values = self._check_stored(stored)
        return self._matches(values, self._candidates(self._band_sums(values))[0], fingerprint)

    def best_match(self, sketch: Sketch) -> Match | None:
        """The kept page sharing the most positions (exact duplicates first), or ``None``."""
        values = self._check(sketch)
        return self._best(values, self._candidates(self._band_sums(values))[0], sketch.fingerprint)

    def add(self, key: str, sketch: Sketch) -> None:
        """Keep ``sketch`` under ``key`` (no check: see :meth:`check_and_add`)."""
        self._add(key, self._check(sketch), sketch.fingerprint)

    def add_stored(self, key: str, stored: StoredSignature, fingerprint: int) -> None:
        """:meth:`add` for a stored signature and its fingerprint."""
        self._add(key, self._check_stored(stored), fingerprint)

    def _add(self, key: str, values: np.ndarray, fingerprint: int) -> None:
        keys = self._band_sums(values).view(np.uint32)[_KEY_WORD::2]
        self._insert(key, values, keys, keys.tolist(), fingerprint)

    def check_and_add(self, key: str, sketch: Sketch) -> Match | None:
        """First seen is kept: return the best kept match, or keep ``sketch`` and return ``None``."""
        return self._check_and_add(key, self._check(sketch), sketch.fingerprint)

    def check_and_add_stored(self, key: str, stored: StoredSignature, fingerprint: int) -> Match | None:
        """:meth:`check_and_add` for a stored signature and its fingerprint."""
        return self._check_and_add(key, self._check_stored(stored), fingerprint)

    def _check_and_add(self, key: str, values: np.ndarray, fingerprint: int) -> Match | None:
        candidates, keys, band_keys = self._candidates(self._band_sums(values))
        if candidates:
            match = self._best(values, candidates, fingerprint)
            if match is not None:
                return match
        self._insert(key, values, keys, band_keys, fingerprint)
        return None

    def query_and_add(self, key: str, sketch: Sketch) -> list[Match]:
        """Every kept page sharing >= t positions with ``sketch`` (most shared first), then keep ``sketch``
        too, whatever was found: the pair-finding step of Broder's clustering, where every page must be
        findable by the pages after it (see :class:`~scrapy_neardup.core.clustering.GroupBuilder`)."""
        return self._query_and_add(key, self._check(sketch), sketch.fingerprint)

    def query_and_add_stored(self, key: str, stored: StoredSignature, fingerprint: int) -> list[Match]:
        """:meth:`query_and_add` for a stored signature and its fingerprint."""
        return self._query_and_add(key, self._check_stored(stored), fingerprint)

    def _query_and_add(self, key: str, values: np.ndarray, fingerprint: int) -> list[Match]:
        candidates, keys, band_keys = self._candidates(self._band_sums(values))
        matches = self._matches(values, candidates, fingerprint)
        self._insert(key, values, keys, band_keys, fingerprint)
        return matches

    # -- keys: recurring crawls ------------------------------------------------------------------------------

    def find(self, key: str) -> int | None:
        """The live page stored under ``key`` (its number), or ``None``."""
        if not self._keys_indexed:
            self._index_keys()
        doc = self._recent_key_docs.get(key)
        if doc is not None:
            return None if self._dead[doc] else doc
        hashes = self._key_hashes
        h = hash(key)
        at = int(np.searchsorted(hashes, h))
        while at < hashes.size and int(hashes[at]) == h:
            doc = int(self._key_docs[at])
            if not self._dead[doc] and self.key(doc) == key:
                return doc
            at += 1
        return None

    def remove(self, doc: int) -> None:
        """Mark page ``doc`` dead: no lookup finds it any more (see the module doc)."""
        if not self._dead[doc]:
            self._dead[doc] = True
            self._dead_count += 1
            if self._keys_indexed:
                key = self.key(doc)
                if self._recent_key_docs.get(key) == doc:
                    del self._recent_key_docs[key]

    def put(self, key: str, sketch: Sketch) -> bool:
        """Make ``sketch`` the stored content of ``key`` (adding it, or replacing the stored version unless
        that is identical); whether anything changed. Idempotent: the journal replays with it."""
        return self._put(key, self._check(sketch), sketch.fingerprint)

    def put_stored(self, key: str, stored: StoredSignature, fingerprint: int) -> bool:
        """:meth:`put` for a stored signature and its fingerprint (a journal's replay)."""
        return self._put(key, self._check_stored(stored), fingerprint)

    def _put(self, key: str, values: np.ndarray, fingerprint: int) -> bool:
        doc = self.find(key)
        if doc is not None:
            if int(self._fingerprints[doc]) == fingerprint and np.array_equal(self._values[doc], values):
                return False
            self.remove(doc)
        self._add(key, values, fingerprint)
        return True

    def delete(self, key: str) -> bool:
        """Remove the page stored under ``key``; whether there was one. Idempotent."""
        doc = self.find(key)
        if doc is None:
            return False
        self.remove(doc)
        return True

    def check_key(self, key: str, sketch: Sketch) -> Decision:
        """The recrawl rule: a page seen again under its key is a revisit, never a copy of itself.

        * ``key`` not stored: as :meth:`check_and_add` (a duplicate of its best match, else kept).
        * ``key`` stored, and its best match (exact duplicates first, then most positions shared; a tie goes
          to its own version) is its own stored version: a revisit, ``changed`` unless the fingerprints (the
          normalized texts) are equal; a changed page replaces the stored version.
        * ``key`` stored, no match at all (the content changed completely): a changed revisit (replaced).
        * ``key`` stored, but another kept page matches better: a duplicate naming that page; the key's stale
          entry is removed, so that pages once dropped as its copies are judged afresh later.

        No duplicate ever names a page whose stored content does not share ``>= t`` positions with ``sketch``.
        """
        own = self.find(key)
        values = self._check(sketch)
        candidates, keys, band_keys = self._candidates(self._band_sums(values))
        best = self._best_doc(values, candidates, sketch.fingerprint, own) if candidates else None
        if own is None:
            if best is not None:
                return Decision.duplicate(self._match(best[0], best[1], sketch.fingerprint))
            self._insert(key, values, keys, band_keys, sketch.fingerprint)
            return Decision.kept()
        if best is not None and best[0] != own:
            self.remove(own)
            return Decision.duplicate(self._match(best[0], best[1], sketch.fingerprint), removed=True)
        if int(self._fingerprints[own]) == sketch.fingerprint:
            return Decision.revisit(False)
        self.remove(own)
        self._insert(key, values, keys, band_keys, sketch.fingerprint)
        return Decision.revisit(True)

    def compact(self) -> None:
        """Drop the removed pages, renumbering the live ones in order (rebuilds the band runs: one sort)."""
        if not self._dead_count:
            return
        n = self._size
        live = ~self._dead[:n]
        ends = self._key_ends[:n].astype(np.int64)
        lengths = np.diff(ends, prepend=0)
        blob = np.frombuffer(bytes(self._key_blob), dtype=np.uint8)
        self._key_blob = bytearray(blob[np.repeat(live, lengths)].tobytes())
        kept_ends = np.cumsum(lengths[live])
        self._key_ends = kept_ends.astype(np.uint32 if len(self._key_blob) <= _MAX_OFFSET32 else np.int64)
        self._values = self._values[:n][live]
        self._fingerprints = self._fingerprints[:n][live]
        self._size = int(self._values.shape[0])
        self._dead = np.zeros(max(self._size, 1), dtype=bool)
        self._dead_count = 0
        self._keys_indexed = False
        self._recent_key_docs = {}
        self._key_hashes = np.empty(0, dtype=np.int64)
        self._key_docs = np.empty(0, dtype=np.uint32)
        if self._size:
            self._rebuild_bands()
        else:
            fresh = SketchIndex(self.num_perm, self.min_shared, self.tag)
            fresh.meta = self.meta
            self.__dict__.update(fresh.__dict__)

    def _index_keys(self) -> None:
        """Build the key lookup over every page (once; later inserts keep it up to date)."""
        hashes = np.fromiter((hash(self.key(doc)) for doc in range(self._size)), dtype=np.int64, count=self._size)
        order = np.argsort(hashes, kind="stable")
        self._key_hashes = hashes[order]
        self._key_docs = order.astype(np.uint32)
        self._recent_key_docs = {}
        self._keys_indexed = True

    def _merge_recent_keys(self) -> None:
        recent = self._recent_key_docs
        hashes = np.fromiter((hash(k) for k in recent), dtype=np.int64, count=len(recent))
        docs = np.fromiter(recent.values(), dtype=np.uint32, count=len(recent))
        order = np.argsort(hashes, kind="stable")
        at = np.searchsorted(self._key_hashes, hashes[order])
        self._key_hashes = np.insert(self._key_hashes, at, hashes[order])
        self._key_docs = np.insert(self._key_docs, at, docs[order])
        self._recent_key_docs = {}

    def memory_bytes(self) -> int:
        """Bytes the index uses: its arrays as far as written (room reserved for growth and not yet written is
        not resident and not counted), plus the set of recent band keys at about 60 bytes a key."""
        n, entries = self._size, self._used + _WINDOW + 1
        per_page = self._values[:n].nbytes + self._fingerprints[:n].nbytes + self._key_ends[:n].nbytes
        runs = self._low[:entries].nbytes + self._pages[:entries].nbytes + self._directory.nbytes
        recent = self._recent_keys.nbytes + 60 * len(self._recent)
        keys = self._dead[:n].nbytes + self._key_hashes.nbytes + self._key_docs.nbytes
        keys += 100 * len(self._recent_key_docs)
        return per_page + len(self._key_blob) + runs + recent + keys

    # -- lookups ---------------------------------------------------------------------------------------------

    def _check_stored(self, stored: StoredSignature) -> np.ndarray:
        """The values of a stored signature, after checking its tag and length."""
        if stored.tag != self.tag:
            from .sketch import IncompatibleSketches

            raise IncompatibleSketches(f"index holds {self.tag!r} sketches, got one made with {stored.tag!r}")
        if stored.values.shape != self._shape:
            raise ValueError(f"expected a signature of {self.num_perm} positions, got shape {stored.values.shape}")
        return stored.values

    def _check(self, sketch: Sketch) -> np.ndarray:
        """The stored form of a sketch's signature (its low 16 bits), after checking it can be indexed."""
        signature = sketch.signature
        if sketch.tag != self.tag:
            from .sketch import IncompatibleSketches

            raise IncompatibleSketches(f"index holds {self.tag!r} sketches, got one made with {sketch.tag!r}")
        if sketch.num_shingles == 0:
            raise ValueError("an empty sketch (text without shingles) cannot be indexed")
        if signature.shape != self._shape:
            raise ValueError(f"expected a signature of {self.num_perm} positions, got shape {signature.shape}")
        return stored_values(signature)

    def _band_sums(self, values: np.ndarray) -> np.ndarray:
        """Per band, ``sum_i v_i * a_i mod 2**64``; its top 32 bits are the band key (see module doc)."""
        return band_sums(values, self._band_starts)

    def _candidates(self, sums: np.ndarray) -> tuple[set[int], np.ndarray, list[int]]:
        """Pages sharing a band key with ``sums`` (a superset of the t-of-k matches), and the band keys."""
        keys = sums.view(np.uint32)[_KEY_WORD::2]
        band_keys: list[int] = keys.tolist()
        found: set[int] = set()
        if self._used:
            np.right_shift(sums, self._shifts, out=self._buckets)  # (2, bands): main's and mid's buckets
            buckets = self._bucket_numbers  # the same memory as intp (buckets are far below 2**63)
            buckets += self._bases
            first = self._directory[buckets].astype(np.intp)
            # Same low 16 bits in the window: the same key if in the key's bucket, else a rare extra candidate.
            hit = self._low_windows[first] == sums.view(np.uint16)[_KEY_LOW_WORD::4, None]
            if np.count_nonzero(hit):
                pages = self._page_windows[first][hit]
                found.update(pages[pages != _NO_PAGE].tolist())
            if self._big and not self._big.isdisjoint(buckets.ravel().tolist()):
                self._search_big(buckets, band_keys, found)
        recent = self._recent
        if recent and not recent.isdisjoint(band_keys):
            bands = [j for j, band_key in enumerate(band_keys) if band_key in recent]
            block = self._recent_keys[bands, : self._size - self._recent_first] == keys[bands, None]
            found.update((np.nonzero(block)[1] + self._recent_first).tolist())
        return found, keys, band_keys

    def _search_big(self, buckets: np.ndarray, band_keys: list[int], found: set[int]) -> None:
        """Search in full the buckets too large for the lookup window."""
        for bucket, key in zip(buckets.ravel().tolist(), band_keys * 2, strict=True):
            if bucket in self._big:
                lo, hi = int(self._directory[bucket]), int(self._directory[bucket + 1])
                found.update(self._pages[lo:hi][self._low[lo:hi] == (key & 0xFFFF)].tolist())

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
        )

    # -- inserts ---------------------------------------------------------------------------------------------

    def _insert(self, key: str, values: np.ndarray, keys: np.ndarray, band_keys: list[int], fingerprint: int) -> None:
        doc = self._size
        if doc >= self._values.shape[0]:
            self._grow(doc + 1)
        self._values[doc] = values
        self._fingerprints[doc] = fingerprint
        blob = self._key_blob
        blob += key.encode("utf-8", errors="surrogatepass")
        if len(blob) > _MAX_OFFSET32 and self._key_ends.dtype != np.int64:
            self._key_ends = self._key_ends.astype(np.int64)
        self._key_ends[doc] = len(blob)
        self._dead[doc] = False
        self._size = doc + 1
        if self._keys_indexed:
            self._recent_key_docs[key] = doc
            if len(self._recent_key_docs) >= _RECENT_KEYS:
                self._merge_recent_keys()
        self._recent_keys[:, doc - self._recent_first] = keys
        self._recent.update(band_keys)
        if self._size - self._recent_first >= self._recent_limit:
            self._flush_recent()

    def _grow(self, needed: int) -> None:
        capacity = max(needed, self._values.shape[0] * 2)
        self._values = _resized(self._values, capacity)
        self._fingerprints = _resized(self._fingerprints, capacity)
        self._key_ends = _resized(self._key_ends, capacity)
        if self._dead.shape[0] < capacity:
            self._dead = _resized(self._dead, capacity)

    def _flush_recent(self) -> None:
        """Merge the recent pages' band entries into mid (and mid into main when mid has grown large)."""
        first, count = self._recent_first, self._size - self._recent_first
        entries = self._recent_keys[:, :count].astype(np.uint64)
        entries <<= _S32
        entries |= np.arange(first, first + count, dtype=np.uint64)
        entries = entries.ravel()
        entries.sort()
        self._recent = set()
        self._recent_first = self._size
        words = entries.view(np.uint32)
        self._reserve(self._used + entries.size)
        self._merge_run(self._mid_base, self._mid_bits, words[_KEY_WORD::2], words[1 - _KEY_WORD :: 2])
        if self._used - self._main > _MID_FRACTION * self._main:
            self._merge_mid_into_main()
        else:
            self._mid_changed()
        self._recent_limit = max(_RECENT_MIN_PAGES, min(_RECENT_PAGES, self._used // (32 * self._bands)))
        _release_free_memory()

    def _merge_mid_into_main(self) -> None:
        mid_directory = self._directory[self._mid_base :]
        keys = self._full_keys(mid_directory, self._mid_bits, 0, mid_directory.size - 1)
        pages = self._pages[self._main : self._used].copy()
        self._used = self._main
        self._merge_run(0, self._main_bits, keys, pages)
        self._main = self._used
        bits = _bits_for(self._main)
        if bits != self._main_bits:
            self._directory = self._recount(bits)
        self._set_main_directory(bits)

    def _merge_run(self, directory_at: int, bits: int, keys: np.ndarray, pages: np.ndarray) -> None:
        """Merge entries (``keys`` sorted, 32-bit) into the run whose directory starts at ``directory_at``.

        The run must end at ``_used`` (it grows into the room after it). Segments of buckets are merged from
        the last to the first, each written at its new place (shifted right by the new entries before it),
        which never overwrites a segment not yet read; then the directory moves by the same counts.
        """
        directory = self._directory[directory_at : directory_at + (1 << bits) + 1]
        per_segment = _segment_buckets(bits)
        segments = (1 << bits) // per_segment
        segment_of = keys >> np.uint32(32 - bits + per_segment.bit_length() - 1)
        bounds = np.searchsorted(segment_of, np.arange(segments + 1, dtype=np.uint32)).tolist()
        for segment in range(segments - 1, -1, -1):
            added_before, added_end = bounds[segment], bounds[segment + 1]
            lo, hi = segment * per_segment, (segment + 1) * per_segment
            start, end = int(directory[lo]), int(directory[hi])
            if added_end == 0:
                break  # nothing new here or before: the rest of the run stays where it is
            if added_before == added_end:  # no new entry in this segment: it only moves
                self._low[start + added_before : end + added_before] = self._low[start:end]
                self._pages[start + added_before : end + added_before] = self._pages[start:end]
                continue
            new = keys[added_before:added_end]
            at = np.searchsorted(self._full_keys(directory, bits, lo, hi), new)
            at += np.arange(new.size)
            from_old = np.ones(end - start + new.size, dtype=bool)
            from_old[at] = False
            merged_low = np.empty(from_old.size, dtype=np.uint16)
            merged_low[at] = new.astype(np.uint16)  # the low 16 bits
            merged_low[from_old] = self._low[start:end]
            merged_pages = np.empty(from_old.size, dtype=np.uint32)
            merged_pages[at] = pages[added_before:added_end]
            merged_pages[from_old] = self._pages[start:end]
            self._low[start + added_before : end + added_end] = merged_low
            self._pages[start + added_before : end + added_end] = merged_pages
        counts = np.bincount((keys >> np.uint32(32 - bits)).view(np.int32), minlength=1 << bits)
        directory[1:] += np.cumsum(counts).astype(np.uint32)
        self._used += keys.size
        self._pages[self._used : self._used + _WINDOW + 1] = _NO_PAGE

    def _full_keys(self, directory: np.ndarray, bits: int, lo: int, hi: int) -> np.ndarray:
        """The 32-bit keys of buckets ``lo .. hi - 1`` of a run: bucket bits, then the stored low 16 bits."""
        start, end = int(directory[lo]), int(directory[hi])
        buckets = np.repeat(np.arange(lo, hi, dtype=np.uint32), np.diff(directory[lo : hi + 1]).astype(np.intp))
        keys = buckets << np.uint32(32 - bits)
        keys |= self._low[start:end] & np.uint16((1 << (32 - bits)) - 1)
        return keys

    def _recount(self, bits: int) -> np.ndarray:
        """A directory array whose main part has ``bits`` (more than now) bits, counted segment by segment."""
        directory = self._directory[: self._mid_base]
        old_bits = self._main_bits
        counts = np.zeros(1 << bits, dtype=np.int64)
        per_segment = _segment_buckets(old_bits)
        finer = 1 << (bits - old_bits)  # new buckets per old bucket
        for lo in range(0, directory.size - 1, per_segment):
            keys = self._full_keys(directory, old_bits, lo, lo + per_segment)
            local = (keys >> np.uint32(32 - bits)).view(np.int32) - lo * finer
            counts[lo * finer : (lo + per_segment) * finer] = np.bincount(local, minlength=per_segment * finer)
        recounted = np.empty((1 << bits) + 1, dtype=np.uint32)
        recounted[0] = 0
        recounted[1:] = np.cumsum(counts)
        return recounted

    def _reserve(self, needed: int) -> None:
        needed += _WINDOW + 1  # the padding read by lookup windows
        if needed > self._low.size:
            capacity = max(needed, self._low.size * 2, 1 << 16)  # only the used part is copied (resident)
            used = self._used + _WINDOW + 1
            self._low = _resized(self._low[:used], capacity)
            self._pages = _resized(self._pages[:used], capacity)
            self._windows_changed()

    # -- directories -----------------------------------------------------------------------------------------

    def _set_main_directory(self, bits: int, keep_mid: bool = False) -> None:
        """Main's directory is ``self._directory[: 2**bits + 1]``; mid's (``bits - 2`` bits) follows it: an
        empty one is appended unless ``keep_mid``."""
        self._main_bits = bits
        self._mid_bits = max(_MIN_BITS, bits - 2)
        self._mid_base = (1 << bits) + 1
        main_directory = self._directory[: self._mid_base]
        if not keep_mid:
            self._directory = np.concatenate(
                [main_directory, np.full((1 << self._mid_bits) + 1, self._main, dtype=np.uint32)]
            )
        self._shifts = np.array([[64 - bits], [64 - self._mid_bits]], dtype=np.uint64)
        self._bases = np.array([[0], [self._mid_base]], dtype=np.intp)
        self._main_big = set(_big_buckets(main_directory, 0).tolist())
        self._mid_changed()

    def _mid_changed(self) -> None:
        mid_big = _big_buckets(self._directory[self._mid_base :], self._mid_base)
        self._big = self._main_big | set(mid_big.tolist())
        self._windows_changed()

    def _windows_changed(self) -> None:
        """Lookup windows: row ``i`` is a view of entries ``i .. i + _WINDOW - 1`` (low key bits and pages)."""
        rows = self._low.size - _WINDOW
        self._low_windows = np.lib.stride_tricks.as_strided(
            self._low, shape=(rows, _WINDOW), strides=(2, 2), writeable=False
        )
        self._page_windows = np.lib.stride_tricks.as_strided(
            self._pages, shape=(rows, _WINDOW), strides=(4, 4), writeable=False
        )

    def _rebuild_bands(self) -> None:
        """All band entries from the stored values (after load), sorted into the main run."""
        n, bands = self._size, self._bands
        entries = np.empty(n * bands, dtype=np.uint64)
        for lo in range(0, n, _REBUILD_CHUNK):
            hi = min(n, lo + _REBUILD_CHUNK)
            sums = self._band_sums(self._values[lo:hi])
            sums &= _HIGH32
            sums |= np.arange(lo, hi, dtype=np.uint64)[:, None]
            entries[lo * bands : hi * bands] = sums.ravel()
        entries.sort(kind="stable")
        size = entries.size + _WINDOW + 1
        words = entries.view(np.uint32)
        self._low = np.zeros(size, dtype=np.uint16)
        self._low[: entries.size] = words[_KEY_WORD::2]
        self._pages = np.full(size, _NO_PAGE, dtype=np.uint32)
        self._pages[: entries.size] = words[1 - _KEY_WORD :: 2]
        bits = _bits_for(entries.size)
        self._directory = _directory(words[_KEY_WORD::2], bits)
        del entries, words
        self._main = self._used = n * bands
        self._recent = set()
        self._recent_first = n
        self._recent_limit = max(_RECENT_MIN_PAGES, min(_RECENT_PAGES, n // 32))
        self._set_main_directory(bits)
        _release_free_memory()

    # -- persistence -----------------------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str], meta: dict[str, Any] | None = None) -> None:
        """Compact the index (:meth:`compact`: removed pages are not saved), then write it to ``path``
        atomically (temporary file, fsync, rename). ``meta`` (JSON) is saved in the header and becomes
        :attr:`meta`, here and in the loaded index (the embedded store keeps its snapshot identity there).

        A crash while saving leaves the previous file intact. The file is a zip of numpy arrays plus a JSON
        header with the parameters and a SHA-256 of every array, checked on load. Besides the per-page arrays
        it holds the sorted runs of band entries and their directory (about 130 bytes a page), so that a load
        only checks them instead of sorting all band keys again.
        """
        path = Path(path)
        self.compact()
        if meta is not None:
            self.meta = dict(meta)
        n = self._size
        arrays: dict[str, np.ndarray] = {
            "values": self._values[:n],
            "fingerprints": self._fingerprints[:n],
            "key_ends": self._key_ends[:n],
            "key_blob": np.frombuffer(bytes(self._key_blob), dtype=np.uint8),
            # The sorted runs and their directory, so that loading does not sort them again.
            "band_low": self._low[: self._used],
            "band_pages": self._pages[: self._used],
            "directory": self._directory,
        }
        header = {
            "magic": _MAGIC,
            "format": FORMAT_VERSION,
            "tag": self.tag,
            "num_perm": self.num_perm,
            "min_shared": self.min_shared,
            "size": n,
            "runs": {
                "main": self._main,
                "used": self._used,
                "main_bits": self._main_bits,
                "recent_first": self._recent_first,
            },
            "sha256": {name: _digest(a) for name, a in arrays.items()},
            "meta": self.meta,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_writer(path) as out, zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as zf:
            zf.writestr("header.json", json.dumps(header))
            for name, array in arrays.items():
                with zf.open(name + ".npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.ascontiguousarray(array), allow_pickle=False)
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
                names = _ARRAYS + (_RUN_ARRAYS if isinstance(header, dict) and "runs" in header else ())
                arrays: dict[str, np.ndarray] = {}
                for name in names:
                    with zf.open(name + ".npy") as member:
                        arrays[name] = np.lib.format.read_array(member, allow_pickle=False)
        except (OSError, zipfile.BadZipFile, KeyError, ValueError, EOFError) as exc:
            raise StateError(f"near-duplicate state file {path} is damaged or unreadable: {exc}") from exc
        if (
            not isinstance(header, dict)
            or header.get("magic") != _MAGIC
            or header.get("format") not in _READABLE_FORMATS
        ):
            raise StateError(f"{path} is not a scrapy-neardup index of format {FORMAT_VERSION}")
        saved = (header.get("tag"), header.get("num_perm"), header.get("min_shared"))
        if saved != (tag, num_perm, min_shared):
            raise StateError(parameters_differ(path, saved, (tag, num_perm, min_shared)))
        digests = header.get("sha256")
        for name, array in arrays.items():
            if not isinstance(digests, dict) or digests.get(name) != _digest(array):
                raise StateError(f"near-duplicate state file {path} is damaged: checksum mismatch in {name!r}")
        size = header.get("size")
        values, key_ends = arrays["values"], arrays["key_ends"]
        if (
            not isinstance(size, int)
            or values.shape != (size, num_perm)
            or values.dtype != np.uint16
            or key_ends.shape != (size,)
            or key_ends.dtype.kind not in "iu"
            or arrays["fingerprints"].shape != (size,)
            or (size and int(key_ends[-1]) != arrays["key_blob"].size)
        ):
            raise StateError(f"near-duplicate state file {path} is damaged: array shapes disagree with header")
        index = cls(num_perm, min_shared, tag)
        if size:
            index._values = values
            index._fingerprints = arrays["fingerprints"].astype(np.uint64, copy=False)
            index._key_ends = key_ends.astype(np.uint32 if key_ends[-1] <= _MAX_OFFSET32 else np.int64)
        index._key_blob = bytearray(arrays["key_blob"].tobytes())
        index._size = size
        index._dead = np.zeros(max(size, 1024), dtype=bool)
        meta = header.get("meta")
        index.meta = dict(meta) if isinstance(meta, dict) else {}
        if not ("runs" in header and index._restore_runs(header["runs"], arrays)):
            index._rebuild_bands()
        return index

    def _restore_runs(self, runs: Any, arrays: dict[str, np.ndarray]) -> bool:
        """Take the saved runs if they are consistent with the pages (else the caller rebuilds them)."""
        low, pages, directory = arrays["band_low"], arrays["band_pages"], arrays["directory"]
        try:
            main, used, bits, first = (int(runs[name]) for name in ("main", "used", "main_bits", "recent_first"))
        except (KeyError, TypeError, ValueError):
            return False
        mid_bits = max(_MIN_BITS, bits - 2)
        mid_base = (1 << bits) + 1 if _MIN_BITS + 2 <= bits <= _MAX_BITS else 0
        recent = self._size - first
        consistent = (
            mid_base
            and 0 <= first <= self._size
            and recent < _RECENT_PAGES
            and used == first * self._bands
            and 0 <= main <= used
            and low.dtype == np.uint16
            and pages.dtype == np.uint32
            and low.shape == pages.shape == (used,)
            and directory.dtype == np.uint32
            and directory.shape == (mid_base + (1 << mid_bits) + 1,)
            and directory[0] == 0
            and directory[mid_base - 1] == main == directory[mid_base]
            and directory[-1] == used
            and not np.any(directory[1:mid_base] < directory[: mid_base - 1])
            and not np.any(directory[mid_base + 1 :] < directory[mid_base:-1])
            and (used == 0 or int(pages.max()) < first)
        )
        if not consistent:
            logger.warning("the saved band index is inconsistent with the saved pages; rebuilding it")
            return False
        self._low = np.zeros(used + _WINDOW + 1, dtype=np.uint16)
        self._low[:used] = low
        self._pages = np.full(used + _WINDOW + 1, _NO_PAGE, dtype=np.uint32)
        self._pages[:used] = pages
        self._main, self._used, self._directory = main, used, directory
        self._set_main_directory(bits, keep_mid=True)
        # The recent tier: the pages kept after the last flush, from their stored values.
        self._recent_first = first
        if recent:
            keys = self._band_sums(self._values[first : self._size]).view(np.uint32)[:, _KEY_WORD::2]
            self._recent_keys[:, :recent] = keys.T
            self._recent = set(keys.ravel().tolist())
        self._recent_limit = max(_RECENT_MIN_PAGES, min(_RECENT_PAGES, used // (32 * self._bands)))
        if recent >= self._recent_limit:
            self._flush_recent()
        _release_free_memory()
        return True


def _bits_for(entries: int) -> int:
    """Directory bits for a main run of ``entries``: buckets of 8-16 entries on average (at least 18 bits)."""
    return max(_MIN_BITS + 2, min(_MAX_BITS, ((max(entries, 1) - 1) // _BUCKET_MEAN).bit_length()))


def _segment_buckets(bits: int) -> int:
    """Buckets per merge segment of a run with ``bits`` directory bits."""
    return 1 << min(bits, max(_MIN_SEGMENT_BITS, bits - _SEGMENTS_BITS))


def _directory(keys: np.ndarray, bits: int) -> np.ndarray:
    """Start offsets of the buckets (top ``bits`` bits) of sorted 32-bit ``keys``, and the end."""
    counts = np.bincount((keys >> np.uint32(32 - bits)).view(np.int32), minlength=1 << bits)
    directory = np.empty(counts.size + 1, dtype=np.uint32)
    directory[0] = 0
    directory[1:] = np.cumsum(counts)
    return directory


def _big_buckets(directory: np.ndarray, base: int) -> np.ndarray:
    """Buckets (numbered from ``base``) holding more entries than a lookup window reads."""
    return np.flatnonzero(np.diff(directory) > _WINDOW) + base


def _release_free_memory() -> None:
    """Give freed heap memory back to the OS (glibc only; elsewhere a no-op).

    Merges allocate and free temporaries of many megabytes; glibc keeps such freed memory in the heap (its
    trim threshold rises with the sizes it has seen, up to 64 MB), which shows up as resident memory that
    the index no longer uses. ``malloc_trim`` returns it; it takes a few milliseconds, once per flush.
    """
    global _malloc_trim
    if _malloc_trim is None:
        try:
            _malloc_trim = ctypes.CDLL(None).malloc_trim
        except (AttributeError, OSError):
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim: Any = None


def _resized(array: np.ndarray, capacity: int) -> np.ndarray:
    grown = np.empty((capacity, *array.shape[1:]), dtype=array.dtype)
    grown[: array.shape[0]] = array
    return grown


def _digest(array: np.ndarray) -> str:
    # The array's bytes without copying them (the same digest as ``array.tobytes()``).
    return hashlib.sha256(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data).hexdigest()
