"""A Bloom filter of the band keys of the documents an assigned groups run covered, kept on the client's disk, so
that ``neardup es groups --new`` asks Elasticsearch only for band tokens an older document may hold.

Design notes: docs/architecture.md#es_integrationband_filter
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scrapy_neardup.core.atomic_files import atomic_writer
from scrapy_neardup.core.stored_signature import band_pairs

__all__ = ["BITS_PER_KEY", "PROBES", "BandFilter", "BandFilterStore", "default_directory"]

logger = logging.getLogger(__name__)

#: Bits per key when a filter is sized (rounded up to a power of two: 10-20 bits per key).
BITS_PER_KEY = 10
#: Probes per key (``h``).
PROBES = 3
_MIN_BITS = 1 << 16
_CHUNK_ROWS = 16_384  # rows of signatures per step while adding: a 16 MB temporary at k = 128
_FORMAT = 1


def default_directory() -> Path:
    """``$XDG_CACHE_HOME/scrapy-neardup/band-filters`` (``~/.cache`` when unset): where ``neardup es groups``
    keeps band filters unless told otherwise."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "scrapy-neardup" / "band-filters"


def _mix(keys: np.ndarray) -> np.ndarray:
    # A 64-bit finalizer (xor-shift-multiply; wrapping uint64 arithmetic): every key bit moves both halves.
    x = keys ^ (keys >> np.uint64(33))
    x *= np.uint64(0xFF51AFD7ED558CCD)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xC4CEB9FE1A85EC53)
    x ^= x >> np.uint64(33)
    return x


@dataclass
class BandFilter:
    """A Bloom filter over ``uint64`` band pairs (see the module doc for ``p``).

    Attributes:
        words: the ``m`` bits, as ``uint64[m / 64]``.
        keys: keys added (with repeats; an upper bound of ``n``).
    """

    words: np.ndarray
    keys: int = 0

    @classmethod
    def sized_for(cls, keys: int) -> BandFilter:
        """An empty filter of ``m = 2**ceil(log2(BITS_PER_KEY * keys))`` bits (at least 65,536)."""
        bits = max(_MIN_BITS, 1 << max(0, int(BITS_PER_KEY * max(keys, 1) - 1).bit_length()))
        return cls(np.zeros(bits // 64, dtype=np.uint64))

    @property
    def bits(self) -> int:
        return self.words.size * 64

    def false_positive_rate(self) -> float:
        """``p`` for the keys added so far (repeated keys counted each time: an upper bound)."""
        return float((1.0 - np.exp(-PROBES * self.keys / self.bits)) ** PROBES)

    def _probes(self, pairs: np.ndarray) -> np.ndarray:
        # h1 is the whole mix (a filter may pass 2**32 bits at 100M documents); h2 the mix with its halves
        # swapped, odd so that the probes differ: below 2**32 bits the two come from disjoint halves.
        h1 = _mix(pairs.astype(np.uint64, copy=False))
        h2 = ((h1 << np.uint64(32)) | (h1 >> np.uint64(32))) | np.uint64(1)
        steps = np.arange(PROBES, dtype=np.uint64)
        return (h1[:, None] + steps * h2[:, None]) & np.uint64(self.bits - 1)

    def add_pairs(self, pairs: np.ndarray) -> None:
        """Add ``uint64`` band pairs."""
        bit = self._probes(pairs).ravel()
        np.bitwise_or.at(self.words, bit >> np.uint64(6), np.uint64(1) << (bit & np.uint64(63)))
        self.keys += int(pairs.size)

    def add(self, values: np.ndarray) -> None:
        """Add the band pairs of every row of the signatures ``uint16[n, k]`` (a memory map is read in steps)."""
        for lo in range(0, values.shape[0], _CHUNK_ROWS):
            self.add_pairs(band_pairs(np.asarray(values[lo : lo + _CHUNK_ROWS])))

    def may_hold(self, pairs: np.ndarray) -> np.ndarray:
        """``bool`` per pair: False means no added key is that pair; True, that one may be (``p``)."""
        bit = self._probes(pairs)
        held = (self.words[bit >> np.uint64(6)] >> (bit & np.uint64(63))) & np.uint64(1)
        return held.all(axis=1)


class BandFilterStore:
    """Band filters on disk, one per index (by UUID) and tag: ``<directory>/<uuid>-<tag>.npy`` and its ``.json``
    record (format, index UUID, tag, watermark ``seq``, keys)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _paths(self, index_uuid: str, tag: str) -> tuple[Path, Path]:
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{index_uuid}-{tag}")
        return self.directory / f"{stem}.npy", self.directory / f"{stem}.json"

    def load(self, index_uuid: str, tag: str, seq: int) -> BandFilter | None:
        """The filter written for exactly this index, tag and watermark ``seq``; None if there is none (or it
        is another watermark's, or unreadable: logged)."""
        bits_path, record_path = self._paths(index_uuid, tag)
        try:
            record = json.loads(record_path.read_text())
        except FileNotFoundError:
            logger.info("no band filter for this index and tag in %s: every band token is queried", self.directory)
            return None
        except (OSError, ValueError) as exc:
            logger.warning("band filter record %s unreadable (%s): every band token is queried", record_path, exc)
            return None
        if (record.get("format"), record.get("index_uuid"), record.get("tag"), record.get("seq")) != (
            _FORMAT, index_uuid, tag, seq
        ):
            logger.info("band filter %s was written for another groups run (watermark %s, now %s): every band "
                        "token is queried; a full --assign with this filter directory writes a new one",
                        record_path, record.get("seq"), seq)
            return None
        try:
            words = np.load(bits_path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            logger.warning("band filter %s unreadable (%s): every band token is queried", bits_path, exc)
            return None
        if words.dtype != np.uint64 or words.ndim != 1 or words.size * 64 < _MIN_BITS or words.size & (words.size - 1):
            logger.warning("band filter %s has an unexpected shape: every band token is queried", bits_path)
            return None
        return BandFilter(words, int(record.get("keys", 0)))

    def save(self, band_filter: BandFilter, index_uuid: str, tag: str, seq: int, *, replaces: int | None = None
             ) -> bool:
        """Write the filter for this index, tag and watermark (bits first, then the record that makes them valid;
        each replaced atomically) and return True.

        Args:
            replaces: the watermark of the filter this one extends: if the file on disk is no longer that one
                (another run on the same machine saved meanwhile), neither covers both runs' documents, so the file
                is removed instead and False returned.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        bits_path, record_path = self._paths(index_uuid, tag)
        if replaces is not None and self._seq_on_disk(record_path) != replaces:
            logger.warning("band filter %s changed during this run (another groups run?): removed; a full --assign "
                           "writes a new one", record_path)
            self.discard(index_uuid, tag)
            return False
        record_path.unlink(missing_ok=True)  # bits and record are never a mismatched pair
        with atomic_writer(bits_path) as out:
            np.save(out, band_filter.words, allow_pickle=False)
        record = {"format": _FORMAT, "index_uuid": index_uuid, "tag": tag, "seq": seq, "keys": band_filter.keys}
        with atomic_writer(record_path) as out:
            out.write(json.dumps(record).encode())
        return True

    @staticmethod
    def _seq_on_disk(record_path: Path) -> object:
        try:
            return json.loads(record_path.read_text()).get("seq")
        except (OSError, ValueError, AttributeError):
            return None

    def discard(self, index_uuid: str, tag: str) -> None:
        """Remove this index and tag's filter (it no longer covers the watermark)."""
        for path in self._paths(index_uuid, tag):
            path.unlink(missing_ok=True)
