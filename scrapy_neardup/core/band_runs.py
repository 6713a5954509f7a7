"""The band entries of the embedded index (:class:`BandRuns`): which kept pages share a band key with a page.

Design notes: docs/architecture.md#scrapy_neardupcoreband_runs
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import numpy as np

from .memory import release_free_memory, resized
from .stored_signature import band_sums

logger = logging.getLogger(__name__)

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
# Pages whose band entries are computed per numpy pass when rebuilding after load (bounds temporaries).
_REBUILD_CHUNK = 1 << 16


def keys_of(sums: np.ndarray) -> np.ndarray:
    """The band keys (top 32 bits) of band sums, as a ``uint32`` view of them (no copy)."""
    return sums.view(np.uint32)[..., _KEY_WORD::2]


class BandRuns:
    """The band entries of the pages of an index: the recent tier and the mid and main runs (see module doc).

    Pages are numbered by the index; :meth:`insert` takes them in order, ``0, 1, ...``. ``starts`` are the
    bands' start positions (:func:`~scrapy_neardup.core.stored_signature.band_bounds`).
    """

    def __init__(self, starts: np.ndarray) -> None:
        self.starts = starts
        self.bands = int(starts.size)
        self._buckets = np.empty((2, self.bands), dtype=np.uint64)
        self._bucket_numbers = self._buckets.view(np.intp)
        # Recent tier: pages _recent_first .. size - 1.
        self._recent: set[int] = set()
        self._recent_keys = np.empty((self.bands, _RECENT_PAGES), dtype=np.uint32)
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

    def memory_bytes(self) -> int:
        """Bytes of the runs as far as written, their directory, and the recent tier (60 bytes a key in its set)."""
        entries = self._used + _WINDOW + 1
        runs = self._low[:entries].nbytes + self._pages[:entries].nbytes + self._directory.nbytes
        return runs + self._recent_keys.nbytes + 60 * len(self._recent)

    # -- lookups ---------------------------------------------------------------------------------------------

    def candidates(self, sums: np.ndarray, size: int) -> tuple[set[int], np.ndarray, list[int]]:
        """Pages sharing a band key with ``sums`` (a superset of the t-of-k matches), and the band keys.

        ``size``: the pages inserted so far (the recent tier holds the last ones)."""
        keys = keys_of(sums)
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
            block = self._recent_keys[bands, : size - self._recent_first] == keys[bands, None]
            found.update((np.nonzero(block)[1] + self._recent_first).tolist())
        return found, keys, band_keys

    def _search_big(self, buckets: np.ndarray, band_keys: list[int], found: set[int]) -> None:
        """Search in full the buckets too large for the lookup window."""
        for bucket, key in zip(buckets.ravel().tolist(), band_keys * 2, strict=True):
            if bucket in self._big:
                lo, hi = int(self._directory[bucket]), int(self._directory[bucket + 1])
                found.update(self._pages[lo:hi][self._low[lo:hi] == (key & 0xFFFF)].tolist())

    # -- inserts ---------------------------------------------------------------------------------------------

    def insert(self, doc: int, keys: np.ndarray, band_keys: list[int]) -> None:
        """Page ``doc`` (the next one: the index now holds ``doc + 1`` pages) has these band keys (``keys``
        and the same as a list)."""
        self._recent_keys[:, doc - self._recent_first] = keys
        self._recent.update(band_keys)
        if doc + 1 - self._recent_first >= self._recent_limit:
            self.flush(doc + 1)

    def flush(self, size: int) -> None:
        """Merge the recent pages' band entries (pages up to ``size - 1``) into mid (and mid into main when
        mid has grown large)."""
        first, count = self._recent_first, size - self._recent_first
        entries = self._recent_keys[:, :count].astype(np.uint64)
        entries <<= _S32
        entries |= np.arange(first, first + count, dtype=np.uint64)
        entries = entries.ravel()
        entries.sort()
        self._recent = set()
        self._recent_first = size
        words = entries.view(np.uint32)
        self._reserve(self._used + entries.size)
        self._merge_run(self._mid_base, self._mid_bits, words[_KEY_WORD::2], words[1 - _KEY_WORD :: 2])
        if self._used - self._main > _MID_FRACTION * self._main:
            self._merge_mid_into_main()
        else:
            self._mid_changed()
        self._recent_limit = max(_RECENT_MIN_PAGES, min(_RECENT_PAGES, self._used // (32 * self.bands)))
        release_free_memory()

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
            self._low = resized(self._low[:used], capacity)
            self._pages = resized(self._pages[:used], capacity)
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

    # -- from the stored values, and to and from a file --------------------------------------------------------

    def rebuild(self, values: np.ndarray, n: int) -> None:
        """All band entries of pages ``0 .. n - 1`` from their stored ``values``, sorted into the main run."""
        bands = self.bands
        entries = np.empty(n * bands, dtype=np.uint64)
        for lo in range(0, n, _REBUILD_CHUNK):
            hi = min(n, lo + _REBUILD_CHUNK)
            sums = band_sums(values[lo:hi], self.starts)
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
        release_free_memory()

    def saved(self) -> tuple[dict[str, np.ndarray], dict[str, int]]:
        """What a file keeps of the runs: the sorted runs and their directory, so that loading does not sort
        them again, and where they end (the header's ``runs``)."""
        used = self._used
        runs = {"main": self._main, "used": used, "main_bits": self._main_bits, "recent_first": self._recent_first}
        return {"band_low": self._low[:used], "band_pages": self._pages[:used], "directory": self._directory}, runs

    def restore(self, runs: Any, arrays: dict[str, np.ndarray], values: np.ndarray, size: int) -> bool:
        """Take the saved runs if they are consistent with the ``size`` pages (else the caller rebuilds them).

        ``runs`` is the header's entry (:meth:`saved`), ``arrays`` holds the saved run arrays, ``values`` the
        pages' stored values (the recent tier is rebuilt from them)."""
        low, pages, directory = arrays["band_low"], arrays["band_pages"], arrays["directory"]
        try:
            main, used, bits, first = (int(runs[name]) for name in ("main", "used", "main_bits", "recent_first"))
        except (KeyError, TypeError, ValueError):
            return False
        mid_bits = max(_MIN_BITS, bits - 2)
        mid_base = (1 << bits) + 1 if _MIN_BITS + 2 <= bits <= _MAX_BITS else 0
        recent = size - first
        consistent = (
            mid_base
            and 0 <= first <= size
            and recent < _RECENT_PAGES
            and used == first * self.bands
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
            keys = keys_of(band_sums(values[first:size], self.starts))
            self._recent_keys[:, :recent] = keys.T
            self._recent = set(keys.ravel().tolist())
        self._recent_limit = max(_RECENT_MIN_PAGES, min(_RECENT_PAGES, used // (32 * self.bands)))
        if recent >= self._recent_limit:
            self.flush(size)
        release_free_memory()
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
