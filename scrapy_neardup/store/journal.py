"""The journal of the embedded store: every change since the last snapshot, one record per change.

Design notes: docs/architecture.md#scrapy_neardupstorejournal
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..core.atomic_files import write_atomically
from ..core.index import SketchIndex
from ..core.index_file import parameters_differ
from ..core.sketch import SKETCHED, Sketch
from ..core.stored_signature import StoredSignature, StoredSketch, stored_values
from ..errors import DamagedRecord, JournalWriteError, StateError
from . import records

logger = logging.getLogger(__name__)

JOURNAL_MAGIC = b"NDUPJRNL"
JOURNAL_FORMAT = 4
_READABLE = (1, 2, 3, 4)
#: Record kinds (formats 2 to 4; SEEN: format 3; PUT_SKETCHED: format 4, a put that also says what of the page
#: was sketched, the kept side of a later duplicate's evidence).
PUT = 1
DELETE = 2
SEEN = 3
PUT_SKETCHED = 4

_HEADER = struct.Struct("<8sIII")  # magic, format, params length, crc32(params)
_FINGERPRINT = struct.Struct("<Q")
_SKETCHED = struct.Struct("<BII")  # kind code (0: not known), words sketched, words of the page's whole text
_KIND_CODE = {name: code for code, name in enumerate(SKETCHED, start=1)}
_KIND_BY_CODE = {code: name for name, code in _KIND_CODE.items()}


@dataclass(frozen=True, slots=True)
class Replay:
    """What :meth:`Journal.replay` found: the ``base`` in the header, the intact ``records`` read, how many
    were ``replayed`` (changes applied to the index: puts and deletes), the bytes of a ``torn`` tail (0: none),
    whether the journal was ``absorbed`` (already in the snapshot: skipped), whether it is of the ``legacy``
    format 1, the ``crawl`` its header names (``None``: none, format 1 or 2) and how many keys it flagged
    ``seen`` in the index (its records replayed by that same crawl), and its ``format``."""

    base: int
    records: int
    replayed: int
    torn: int
    absorbed: bool = False
    legacy: bool = False
    crawl: str | None = None
    seen: int = 0
    #: the journal's format (one of an older format is not appended to: see the embedded store)
    format: int = JOURNAL_FORMAT


#: A parsed record: ``(kind, key, the stored sketch or None for a delete or a seen)``.
Record = tuple[int, str, StoredSketch | None]


class Journal:
    """One journal file (see the module doc for the format).

    Args:
        path: the journal file.
        num_perm, min_shared, tag: the store's parameters; a journal made with others is refused.
        snapshot: the snapshot file the journal continues, for error messages.
        crawl: the identity of the crawl writing it (named in the header of a new journal; ``None``: none).
    """

    def __init__(
        self, path: Path, num_perm: int, min_shared: int, tag: str, snapshot: Path, crawl: str | None = None,
    ) -> None:
        self.path = path
        self.num_perm = num_perm
        self.min_shared = min_shared
        self.tag = tag
        self.snapshot = snapshot
        self.crawl = crawl
        self._file: IO[bytes] | None = None
        self._end = 0

    @property
    def is_open(self) -> bool:
        return self._file is not None

    # -- reading ---------------------------------------------------------------------------------------------

    def replay(self, index: SketchIndex) -> Replay:
        """Apply to ``index`` (the snapshot just loaded, whose :attr:`~SketchIndex.meta` holds its ``id`` and
        ``previous``) the journal's records it lacks.

        A journal continuing this snapshot is replayed; one continuing its predecessor is already in it
        (skipped, ``absorbed``). When the journal's header names this journal's crawl (:attr:`crawl`: a resumed
        crawl), the keys of its puts and seens are flagged as met in this crawl. A format-1 journal: records
        ``base + i`` at or beyond the snapshot's size are added, earlier ones must already be in the snapshot and
        are checked there.

        Raises:
            StateError: the journal is damaged before its end, made with other parameters, or continues
                another snapshot.
        """
        path = self.path
        try:
            with open(path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size < _HEADER.size:
                    raise StateError(
                        f"near-duplicate journal {path} is damaged: {size} bytes, shorter than its header"
                    )
                with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                    version, params, offset = self._parse_header(data)
                    if version == 1:
                        return self._replay_legacy(index, data, params["base"], offset)
                    absorbed = self._continues(index, params)
                    crawl = params.get("crawl") if isinstance(params.get("crawl"), str) else None
                    same_crawl = crawl is not None and crawl == self.crawl
                    records = replayed = seen = torn = 0
                    while offset < size:
                        record, length = self._parse_record(data, offset, records, version)
                        if record is None:
                            torn = size - offset
                            break
                        if not absorbed:
                            kind, key, content = record
                            if kind in (PUT, PUT_SKETCHED):
                                assert content is not None
                                index.put(key, content)
                                replayed += 1
                            elif kind == DELETE:
                                index.delete(key)
                                replayed += 1
                            if kind != DELETE and same_crawl and index.see(key):
                                seen += 1
                        records += 1
                        offset += length
                    return Replay(params["base"], records, replayed, torn, absorbed, crawl=crawl, seen=seen,
                                  format=version)
        except OSError as exc:
            raise StateError(f"near-duplicate journal {path} is unreadable: {exc}") from exc

    def _continues(self, index: SketchIndex, params: dict[str, Any]) -> bool:
        """Check the journal continues ``index`` (the snapshot); ``True`` when it is already in it."""
        continued, base = params.get("snapshot"), params["base"]
        current, previous = index.meta.get("id"), index.meta.get("previous")
        if continued == current:
            return False
        if continued is not None and continued == previous:
            return True
        if current is None and not base and continued is not None:
            # No snapshot yet: the journal continues the empty store it was started on, whose identity only
            # the journal holds; the next snapshot will name it as its predecessor.
            index.meta["id"] = continued
            return False
        if current is None and base:
            raise StateError(
                f"near-duplicate journal {self.path} continues a snapshot of {base} sketches, but "
                f"{self.snapshot.parent} holds no snapshot: the snapshot was replaced or deleted; use another "
                "state directory or reset it (NEARDUP_RESET=True)"
            )
        raise StateError(
            f"near-duplicate journal {self.path} does not belong to the snapshot {self.snapshot} (it continues "
            f"snapshot {continued}, a snapshot of {base} sketches; found {current}); use another state "
            "directory or reset it (NEARDUP_RESET=True)"
        )

    def _replay_legacy(self, index: SketchIndex, data: mmap.mmap, base: int, offset: int) -> Replay:
        """A format-1 journal (see the module doc)."""
        path, size = self.path, len(data)
        snapshot_size = len(index)
        if base > snapshot_size:
            found = f"a snapshot of {snapshot_size} sketches" if snapshot_size else "no snapshot"
            raise StateError(
                f"near-duplicate journal {path} continues a snapshot of {base} sketches, but "
                f"{self.snapshot.parent} holds {found}: the snapshot was replaced or deleted; use "
                "another state directory or reset it (NEARDUP_RESET=True)"
            )
        records = replayed = 0
        while offset < size:
            record, length = self._parse_record(data, offset, records, 1)
            if record is None:
                return Replay(base, records, replayed, size - offset, legacy=True)
            _, key, content = record
            assert content is not None
            seq = base + records
            if seq >= snapshot_size:
                index.add(key, content)
                replayed += 1
            elif not any(m.key == key for m in index.query(content)):
                # Written before the snapshot that should now hold it (a crash between saving the
                # snapshot and starting a new journal): it must be there, or the snapshot is not
                # the one this journal continues.
                raise StateError(
                    f"near-duplicate journal {path} does not belong to the snapshot "
                    f"{self.snapshot}: its page {seq} ({key!r}) is not in the snapshot; use "
                    "another state directory or reset it (NEARDUP_RESET=True)"
                )
            records += 1
            offset += length
        return Replay(base, records, replayed, 0, legacy=True)

    def _parse_header(self, data: mmap.mmap) -> tuple[int, dict[str, Any], int]:
        """``(format, params, offset of the first record)``."""
        path = self.path
        magic, version, length, crc = _HEADER.unpack_from(data)
        if magic != JOURNAL_MAGIC:
            raise StateError(f"{path} is not a scrapy-neardup journal (or its header is damaged)")
        if version not in _READABLE:
            raise StateError(f"{path} is a journal of format {version}; this version reads formats 1 to 4")
        raw = data[_HEADER.size : _HEADER.size + length]
        if len(raw) != length or zlib.crc32(raw) != crc:
            raise StateError(f"near-duplicate journal {path} is damaged: header checksum mismatch")
        try:
            params = json.loads(raw)
            saved = (params["tag"], params["num_perm"], params["min_shared"])
            base = params["base"]
        except (ValueError, KeyError, TypeError) as exc:
            raise StateError(f"near-duplicate journal {path} is damaged: unreadable header ({exc})") from exc
        if saved != (self.tag, self.num_perm, self.min_shared):
            raise StateError(parameters_differ(path, saved, (self.tag, self.num_perm, self.min_shared)))
        if not isinstance(base, int) or base < 0:
            raise StateError(f"near-duplicate journal {path} is damaged: base {base!r}")
        return version, params, _HEADER.size + length

    def _parse_record(self, data: mmap.mmap, offset: int, number: int, version: int) -> tuple[Record | None, int]:
        """The record at ``offset`` and its length; ``(None, 0)`` when the rest of the file is a torn tail
        (:func:`scrapy_neardup.store.records.unframe`)."""
        min_size = 1 if version >= 2 else _FINGERPRINT.size + 4 * self.num_perm
        try:
            payload, length = records.unframe(data, offset, min_size)
        except DamagedRecord as exc:
            raise self._damaged(offset, number, str(exc)) from exc
        if payload is None:
            return None, 0
        size = len(payload)
        kind, at = (payload[0], 1) if version >= 2 else (PUT, 0)
        sketch_end = at + _FINGERPRINT.size + 4 * self.num_perm
        if kind == DELETE or kind == SEEN and version >= 3:
            return (kind, payload[at:].decode("utf-8", errors="surrogatepass"), None), length
        text = kind == PUT_SKETCHED and version >= 4
        key_start = sketch_end + (_SKETCHED.size if text else 0)
        if kind != PUT and not text or size < key_start:  # intact (checksums agree) but not a record we wrote
            raise self._damaged(offset, number, f"unknown record kind {kind} of {size} bytes")
        (fingerprint,) = _FINGERPRINT.unpack_from(payload, at)
        signature = np.frombuffer(payload, dtype="<u4", count=self.num_perm, offset=at + _FINGERPRINT.size)
        code, words, page_words = _SKETCHED.unpack_from(payload, sketch_end) if text else (0, 0, 0)
        key = payload[key_start:].decode("utf-8", errors="surrogatepass")
        # Only non-empty sketches are kept and journaled; the index compares their stored form.
        stored = StoredSketch(StoredSignature(stored_values(signature), self.tag), fingerprint,
                              _KIND_BY_CODE.get(code, ""), words, page_words)
        return (PUT, key, stored), length

    def _damaged(self, offset: int, number: int, what: str) -> StateError:
        return StateError(
            f"near-duplicate journal {self.path} is damaged at byte {offset} (record {number}, not the "
            f"last one): {what}; use another state directory or reset it (NEARDUP_RESET=True)"
        )

    # -- writing ---------------------------------------------------------------------------------------------

    def open_for_append(self) -> None:
        """Open the journal for appending (the file must exist: see :meth:`write_new`)."""
        self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 - closed by close()
        self._end = self._file.seek(0, os.SEEK_END)

    def write_new(self, base: int, snapshot: str | None) -> None:
        """Atomically replace the journal by an empty one continuing the snapshot ``snapshot`` (its id;
        ``None``: none) of ``base`` pages."""
        params = json.dumps({
            "tag": self.tag, "num_perm": self.num_perm, "min_shared": self.min_shared, "base": base,
            "snapshot": snapshot, "crawl": self.crawl,
        }).encode()
        header = _HEADER.pack(JOURNAL_MAGIC, JOURNAL_FORMAT, len(params), zlib.crc32(params)) + params
        write_atomically(self.path, header)

    def append(self, key: str, sketch: Sketch) -> None:
        """A *put* record: ``sketch`` is now the stored content of ``key`` (a page kept, or a kept page whose
        content changed); handed to the kernel before returning (not fsynced: see the module doc).

        Raises:
            JournalWriteError: the write failed; a partial record is cut off, so later records still follow
                intact ones.
        """
        self._write(key, b"".join((
            bytes((PUT_SKETCHED,)),
            _FINGERPRINT.pack(sketch.fingerprint),
            np.asarray(sketch.signature, dtype="<u4").tobytes(),
            _SKETCHED.pack(_KIND_CODE.get(sketch.sketched, 0), min(sketch.words, 2**32 - 1),
                           min(sketch.page_words, 2**32 - 1)),
            key.encode("utf-8", errors="surrogatepass"),
        )))

    def append_delete(self, key: str) -> None:
        """A *delete* record: ``key`` is no longer stored. As :meth:`append` otherwise."""
        self._write(key, bytes((DELETE,)) + key.encode("utf-8", errors="surrogatepass"))

    def append_seen(self, key: str) -> None:
        """A *seen* record: this crawl met ``key``'s stored page unchanged (a revisit, after which the page met
        again is a repeat). As :meth:`append` otherwise."""
        self._write(key, bytes((SEEN,)) + key.encode("utf-8", errors="surrogatepass"))

    def _write(self, key: str, payload: bytes) -> None:
        journal = self._file
        assert journal is not None
        try:
            self._end = records.append(journal, records.frame(payload), self._end)
        except OSError as exc:
            raise JournalWriteError(
                f"could not append to the near-duplicate journal {self.path}: {exc}; the change to {key!r} "
                "holds for this run but would be forgotten after a crash"
            ) from exc

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


