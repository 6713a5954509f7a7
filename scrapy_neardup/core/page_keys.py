"""The keys of the embedded index's pages (:class:`PageKeys`), and the lookup of a page by its key.

Design notes: docs/architecture.md#scrapy_neardupcorepage_keys
"""

from __future__ import annotations

import numpy as np

from .memory import resized

# Key offsets are uint32 until the key blob outgrows them.
_MAX_OFFSET32 = 0xFFFFFFFF
# Keys added since the sorted key-hash array was last merged, held in a dict (about 100 bytes a key).
_RECENT_KEYS = 1 << 15


class PageKeys:
    """The keys of pages ``0 .. count - 1`` (pages are added in order), and which page holds a key.

    Which pages are dead (removed) is the index's: :meth:`find` is given it.
    """

    def __init__(self) -> None:
        self.count = 0
        self._ends = np.empty(1024, dtype=np.uint32)  # int64 once the blob passes 4 GB
        self._blob = bytearray()
        # The key lookup, built on the first find().
        self._indexed = False
        self._hashes = np.empty(0, dtype=np.int64)  # sorted hashes of the keys (all but the recent ones)
        self._docs = np.empty(0, dtype=np.uint32)
        self._recent: dict[str, int] = {}

    def key(self, doc: int) -> str:
        """The key of page ``doc``."""
        start = int(self._ends[doc - 1]) if doc else 0
        return self._blob[start : int(self._ends[doc])].decode("utf-8", errors="surrogatepass")

    def find(self, key: str, dead: np.ndarray) -> int | None:
        """The live page stored under ``key`` (``dead[doc]``: page ``doc`` was removed), or ``None``."""
        if not self._indexed:
            self._index()
        doc = self._recent.get(key)
        if doc is not None:
            return None if dead[doc] else doc
        hashes = self._hashes
        h = hash(key)
        at = int(np.searchsorted(hashes, h))
        while at < hashes.size and int(hashes[at]) == h:
            doc = int(self._docs[at])
            if not dead[doc] and self.key(doc) == key:
                return doc
            at += 1
        return None

    def add(self, doc: int, key: str) -> None:
        """Page ``doc`` (the next one) has ``key``. Its room is there (:meth:`grow`)."""
        blob = self._blob
        blob += key.encode("utf-8", errors="surrogatepass")
        if len(blob) > _MAX_OFFSET32 and self._ends.dtype != np.int64:
            self._ends = self._ends.astype(np.int64)
        self._ends[doc] = len(blob)
        self.count = doc + 1
        if self._indexed:
            self._recent[key] = doc
            if len(self._recent) >= _RECENT_KEYS:
                self._merge_recent()

    def grow(self, capacity: int) -> None:
        """Room for the keys of ``capacity`` pages."""
        self._ends = resized(self._ends, capacity)

    def forget(self, doc: int) -> None:
        """Page ``doc`` was removed: a later page with its key is found through the recent keys, not it."""
        if self._indexed:
            key = self.key(doc)
            if self._recent.get(key) == doc:
                del self._recent[key]

    def compact(self, live: np.ndarray) -> None:
        """Keep the keys of the ``live`` pages only (``bool[count]``), renumbered in order; the lookup is built
        again on the next :meth:`find`."""
        n = self.count
        ends = self._ends[:n].astype(np.int64)
        lengths = np.diff(ends, prepend=0)
        blob = np.frombuffer(bytes(self._blob), dtype=np.uint8)
        self._blob = bytearray(blob[np.repeat(live, lengths)].tobytes())
        kept_ends = np.cumsum(lengths[live])
        self._ends = kept_ends.astype(np.uint32 if len(self._blob) <= _MAX_OFFSET32 else np.int64)
        self.count = int(kept_ends.size)
        self._indexed = False
        self._recent = {}
        self._hashes = np.empty(0, dtype=np.int64)
        self._docs = np.empty(0, dtype=np.uint32)

    def saved(self) -> tuple[np.ndarray, np.ndarray]:
        """What a file keeps: the end offsets and the blob (as ``uint8``)."""
        return self._ends[: self.count], np.frombuffer(bytes(self._blob), dtype=np.uint8)

    def restore(self, ends: np.ndarray, blob: np.ndarray, count: int) -> None:
        """The keys of ``count`` pages as :meth:`saved` gave them (checked by the caller)."""
        if count:
            self._ends = ends.astype(np.uint32 if ends[-1] <= _MAX_OFFSET32 else np.int64)
        self._blob = bytearray(blob.tobytes())
        self.count = count

    def memory_bytes(self) -> int:
        """Bytes of the keys and their offsets, and of the lookup (the recent keys at about 100 bytes a key)."""
        lookup = self._hashes.nbytes + self._docs.nbytes + 100 * len(self._recent)
        return self._ends[: self.count].nbytes + len(self._blob) + lookup

    def _index(self) -> None:
        """Build the key lookup over every page (once; later inserts keep it up to date)."""
        hashes = np.fromiter((hash(self.key(doc)) for doc in range(self.count)), dtype=np.int64, count=self.count)
        order = np.argsort(hashes, kind="stable")
        self._hashes = hashes[order]
        self._docs = order.astype(np.uint32)
        self._recent = {}
        self._indexed = True

    def _merge_recent(self) -> None:
        recent = self._recent
        hashes = np.fromiter((hash(k) for k in recent), dtype=np.int64, count=len(recent))
        docs = np.fromiter(recent.values(), dtype=np.uint32, count=len(recent))
        order = np.argsort(hashes, kind="stable")
        at = np.searchsorted(self._hashes, hashes[order])
        self._hashes = np.insert(self._hashes, at, hashes[order])
        self._docs = np.insert(self._docs, at, docs[order])
        self._recent = {}
