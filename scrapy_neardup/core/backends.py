"""The store the Scrapy pipeline checks pages against: the contract, and the embedded implementation.

A backend answers one question atomically: *is this sketch a near-duplicate of a page already kept? If not,
keep it.* Two backends implement it: :class:`EmbeddedBackend` (an in-process
:class:`~scrapy_neardup.core.index.SketchIndex`, optionally persisted to a state directory) and
``es_integration.backend.ElasticsearchBackend`` (several crawler processes sharing one index).

Crash safety of the embedded store
----------------------------------
With a state directory, the embedded store is two files:

* ``neardup-index.bin``, the *snapshot*: the whole index, written atomically (temporary file, fsync, rename)
  by :meth:`SketchIndex.save` when the spider closes gracefully.
* ``neardup-journal.bin``, the *journal*: every page kept since that snapshot, appended the moment
  ``check_and_add`` keeps it, so that a crawl killed with ``kill -9`` (or an out-of-memory kill, or a crash)
  still knows, when resumed, every page it kept and passed on.

Journal format (all integers little-endian)::

    header   b"NDUPJRNL" | u32 format (1) | u32 n | u32 crc32(params) | params: n bytes of UTF-8 JSON
             {"tag": ..., "num_perm": k, "min_shared": t, "base": B}
    record   u32 size | u32 crc32(size) | u32 crc32(payload) | payload: size bytes
             payload = u64 fingerprint | k x u32 signature | key (UTF-8, lone surrogates kept)

``base`` is the number of pages in the snapshot the journal continues: record ``i`` is the index's page
``base + i``. A record costs one ``write(2)`` of ``12 + 8 + 4k + len(key)`` bytes (about 600 bytes for k = 128).

Guarantees:

* *kill -9.* A record is handed to the kernel (an unbuffered ``write(2)``) before ``check_and_add`` returns,
  so before the pipeline passes the item on: every page that reached the pipeline's output is in the journal,
  and after ``kill -9`` at most the items that were inside the pipeline at that instant are unrecorded. The
  journal is not fsynced per record: data handed to the kernel survives the death of the process, and an fsync
  per kept page (0.1-10 ms each) would bound a crawl to a few hundred pages a second. The snapshot and a
  new journal's header are fsynced. An OS crash or power loss can therefore lose the records of the last
  seconds (whatever the kernel had not written back); what it leaves is detected as below.
* *Open.* The snapshot is loaded (if any), then the journal is replayed: records ``base + i`` at or beyond the
  snapshot's size are added, earlier ones must already be in the snapshot (a crash between writing the
  snapshot and starting a new journal) and are checked there. A torn last record (the one in flight when the
  process died: incomplete, or failing a checksum with nothing but zero bytes after it, i.e. blocks allocated
  but never written after a power loss) is ignored, logged at WARNING, and counted
  (:attr:`EmbeddedBackend.open_stats`, which the pipeline adds to its ``neardup/*`` stats). After a replay the
  store is compacted: a new snapshot, then an empty journal.
* *Never silently wrong.* A damaged record *before* the end, a damaged header, a journal made with another
  tag, ``k`` or ``t``, a journal that continues a snapshot other than the one present (missing, older, or
  not holding the journal's earlier records) raise :class:`~scrapy_neardup.core.index.StateError` naming the
  file, before any page is checked, and leave both files untouched. ``NEARDUP_RESET`` (``reset=True``)
  discards both files.
* *Close.* The snapshot is written atomically, then the journal is replaced (atomically) by an empty one whose
  ``base`` is the snapshot's size. A crash between the two is the case handled above.
* *One writer.* The state directory is locked (``flock``) while open; a second process opening it gets a
  :class:`~scrapy_neardup.core.index.StateError`. The lock goes away with the process, ``kill -9`` included.
"""

from __future__ import annotations

import errno
import json
import logging
import mmap
import os
import struct
import tempfile
import zlib
from pathlib import Path
from typing import IO, Protocol, runtime_checkable

import numpy as np

from .index import Match, SketchIndex, StateError, fsync_directory
from .sketch import Sketch
from .stored import StoredSignature, stored_values

try:  # POSIX only; elsewhere the state directory is not locked.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

STATE_FILE = "neardup-index.bin"
JOURNAL_FILE = "neardup-journal.bin"
JOURNAL_MAGIC = b"NDUPJRNL"
JOURNAL_FORMAT = 1

_HEADER = struct.Struct("<8sIII")  # magic, format, params length, crc32(params)
_RECORD = struct.Struct("<III")  # payload size, crc32(size), crc32(payload)
_SIZE = struct.Struct("<I")
_FINGERPRINT = struct.Struct("<Q")


@runtime_checkable
class Backend(Protocol):
    """What the pipeline needs from a store of kept sketches."""

    async def open(self) -> None:
        """Connect or load state; raise with a clear message when that is impossible."""

    async def check_and_add(self, key: str, sketch: Sketch) -> Match | None:
        """Return the best kept match of ``sketch``; when there is none, keep it under ``key``.

        Must be atomic with respect to other calls: of near-duplicates checked at the same time, exactly one
        is kept and every other one names a kept page.
        """

    async def close(self) -> None:
        """Persist what must survive a graceful stop and release resources."""

    # Optional: a backend whose ``check_and_add`` never awaits may set ``never_suspends = True``; the pipeline
    # then skips its lock (on the single reactor thread such calls cannot interleave anyway), saving a trip
    # through the event loop per item.


class EmbeddedBackend:
    """An in-process :class:`SketchIndex`, persisted to ``state_dir`` (when one is given) as a snapshot written
    on close plus a journal of the pages kept since (see the module doc for the format and guarantees).

    ``check_and_add`` never awaits, so on Scrapy's single reactor thread concurrent items cannot interleave
    between the check and the insert; its only I/O is one small unbuffered write per kept page.

    Args:
        num_perm, min_shared, tag: the index parameters (see :class:`SketchIndex`).
        state_dir: directory for ``neardup-index.bin`` and ``neardup-journal.bin``; ``None`` keeps nothing
            after the crawl.
        reset: discard saved state instead of loading it.

    Attributes:
        open_stats: what opening found, for the crawl's stats: ``state_loaded`` (pages in the snapshot),
            ``journal_replayed`` (pages recovered from the journal), ``journal_torn`` (torn records ignored:
            at most one after ``kill -9``), ``journal_torn_bytes``. Zero counts are left out.
    """

    #: ``check_and_add`` never awaits (see the class doc): the pipeline needs no lock around it.
    never_suspends = True

    def __init__(
        self, num_perm: int, min_shared: int, tag: str, state_dir: str | os.PathLike[str] | None = None,
        reset: bool = False,
    ) -> None:
        self.num_perm = num_perm
        self.min_shared = min_shared
        self.tag = tag
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self.state_path = self.state_dir / STATE_FILE if self.state_dir is not None else None
        self.journal_path = self.state_dir / JOURNAL_FILE if self.state_dir is not None else None
        self.reset = reset
        self.index = SketchIndex(num_perm, min_shared, tag)
        self.open_stats: dict[str, int] = {}
        self._journal: IO[bytes] | None = None
        self._journal_end = 0
        self._lock_fd: int | None = None

    async def open(self) -> None:
        self.load()

    def load(self) -> None:
        """Lock the state directory, load the snapshot, replay the journal and open it for appending.

        Nothing is written when this raises: damaged state is left as it was found.

        Raises:
            StateError: the state is damaged, made with other parameters, or in use by another process.
        """
        if self.state_dir is None:
            return
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._lock()
        try:
            self._remove_temporary_files()
            if self.reset:
                self._discard()
            else:
                self._recover()
            self._open_journal()
        except BaseException:
            self._release()
            raise

    async def check_and_add(self, key: str, sketch: Sketch) -> Match | None:
        match = self.index.check_and_add(key, sketch)
        if match is None and self._journal is not None:
            self._append(key, sketch)
        return match

    async def close(self) -> None:
        self.save()

    def save(self) -> None:
        """Write the snapshot atomically, start an empty journal, release the state directory.

        A no-op without a state directory, or when the backend is not open.
        """
        if self.state_path is None or self._journal is None:
            return
        try:
            self._checkpoint()
            logger.info("saved %d kept sketches to %s", len(self.index), self.state_path)
        finally:
            self._release()

    # -- opening ---------------------------------------------------------------------------------------------

    def _remove_temporary_files(self) -> None:
        """Temporary files of a save interrupted by a crash (never renamed into place, so never used)."""
        assert self.state_dir is not None
        for name in (STATE_FILE, JOURNAL_FILE):
            for tmp in self.state_dir.glob(f"{name}.*.tmp"):
                logger.debug("removing %s, left by an interrupted save", tmp)
                tmp.unlink(missing_ok=True)

    def _discard(self) -> None:
        for path in (self.state_path, self.journal_path):
            assert path is not None
            if path.exists():
                logger.info("discarding near-duplicate state %s (reset)", path)
                path.unlink()

    def _recover(self) -> None:
        """Snapshot plus journal into ``self.index``; compacts them when the journal held anything new."""
        assert self.state_path is not None and self.journal_path is not None
        index = SketchIndex(self.num_perm, self.min_shared, self.tag)
        if self.state_path.exists():
            try:
                index = SketchIndex.load(self.state_path, self.num_perm, self.min_shared, self.tag)
            except StateError as exc:
                if "reset" in str(exc):
                    raise
                raise StateError(f"{exc}; use another state directory or reset it (NEARDUP_RESET=True)") from exc
            logger.info("loaded %d kept sketches from %s", len(index), self.state_path)
            self._count("state_loaded", len(index))
        if not self.journal_path.exists():
            self.index = index
            return
        base, records, replayed, torn_bytes = self._replay(index)
        # Only now, with the whole journal read and checked, does the recovered index replace the empty one.
        self.index = index
        if torn_bytes:
            self._count("journal_torn", 1)
            self._count("journal_torn_bytes", torn_bytes)
            logger.warning(
                "near-duplicate journal %s ends with a torn record (%d bytes: the page in flight when the "
                "process died); ignored", self.journal_path, torn_bytes,
            )
        if replayed:
            self._count("journal_replayed", replayed)
            logger.info("replayed %d kept sketches from %s", replayed, self.journal_path)
            # Compact now, so that a crash later in this run replays only this run's pages.
            self.index.save(self.state_path)
        if replayed or torn_bytes or base + records != len(index):
            # A new journal continuing the current snapshot: new records must follow intact ones only, and
            # a journal that stopped short of the snapshot cannot be continued.
            self._write_new_journal()

    def _replay(self, index: SketchIndex) -> tuple[int, int, int, int]:
        """Add the journal's records that ``index`` (the snapshot) lacks.

        Returns ``(base, records read, records added, bytes of a torn tail)``.

        Raises:
            StateError: the journal is damaged before its end, made with other parameters, or continues
                another snapshot.
        """
        path = self.journal_path
        assert path is not None
        snapshot_size = len(index)
        try:
            with open(path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size < _HEADER.size:
                    raise StateError(
                        f"near-duplicate journal {path} is damaged: {size} bytes, shorter than its header"
                    )
                with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                    base, offset = self._parse_header(data)
                    if base > snapshot_size:
                        found = f"a snapshot of {snapshot_size} sketches" if snapshot_size else "no snapshot"
                        raise StateError(
                            f"near-duplicate journal {path} continues a snapshot of {base} sketches, but "
                            f"{self.state_dir} holds {found}: the snapshot was replaced or deleted; use another "
                            "state directory or reset it (NEARDUP_RESET=True)"
                        )
                    records = replayed = 0
                    while offset < size:
                        record, length = self._parse_record(data, offset, records)
                        if record is None:
                            return base, records, replayed, size - offset
                        seq, (key, stored, fingerprint) = base + records, record
                        if seq >= snapshot_size:
                            index.add_stored(key, stored, fingerprint)
                            replayed += 1
                        elif not any(m.key == key for m in index.query_stored(stored, fingerprint)):
                            # Written before the snapshot that should now hold it (a crash between saving the
                            # snapshot and starting a new journal): it must be there, or the snapshot is not
                            # the one this journal continues.
                            raise StateError(
                                f"near-duplicate journal {path} does not belong to the snapshot "
                                f"{self.state_path}: its page {seq} ({key!r}) is not in the snapshot; use "
                                "another state directory or reset it (NEARDUP_RESET=True)"
                            )
                        records += 1
                        offset += length
                    return base, records, replayed, 0
        except OSError as exc:
            raise StateError(f"near-duplicate journal {path} is unreadable: {exc}") from exc

    def _parse_header(self, data: mmap.mmap) -> tuple[int, int]:
        """``(base, offset of the first record)``."""
        path = self.journal_path
        magic, version, length, crc = _HEADER.unpack_from(data)
        if magic != JOURNAL_MAGIC:
            raise StateError(f"{path} is not a scrapy-neardup journal (or its header is damaged)")
        if version != JOURNAL_FORMAT:
            raise StateError(f"{path} is a journal of format {version}; this version reads format {JOURNAL_FORMAT}")
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
            raise StateError(
                f"{path} was made with tag={saved[0]} num_perm={saved[1]} min_shared={saved[2]}, but this run uses "
                f"tag={self.tag} num_perm={self.num_perm} min_shared={self.min_shared}; use another state "
                "directory or reset it (NEARDUP_RESET=True)"
            )
        if not isinstance(base, int) or base < 0:
            raise StateError(f"near-duplicate journal {path} is damaged: base {base!r}")
        return base, _HEADER.size + length

    def _parse_record(
        self, data: mmap.mmap, offset: int, number: int
    ) -> tuple[tuple[str, StoredSignature, int] | None, int]:
        """The record at ``offset`` and its length; ``(None, 0)`` when the rest of the file is a torn tail.

        A torn tail is what a write cut short leaves: a last record that is incomplete, or that fails a check
        where nothing but zero bytes follows (blocks allocated but never written, after a power loss). A
        record failing a check with data after it is damage.
        """
        end = len(data)
        if end - offset < _RECORD.size:
            return None, 0
        size, size_crc, crc = _RECORD.unpack_from(data, offset)
        min_size = _FINGERPRINT.size + 4 * self.num_perm
        if size_crc != zlib.crc32(data[offset : offset + _SIZE.size]) or size < min_size:
            if _zero_tail(data) < offset + _RECORD.size:  # the header itself runs into unwritten blocks
                return None, 0
            raise self._damaged(offset, number, "record header checksum mismatch")
        stop = offset + _RECORD.size + size
        if stop > end:
            return None, 0
        payload = data[offset + _RECORD.size : stop]
        if zlib.crc32(payload) != crc:
            if _zero_tail(data) <= stop:  # nothing but unwritten blocks after it: the last record
                return None, 0
            raise self._damaged(offset, number, "record checksum mismatch")
        (fingerprint,) = _FINGERPRINT.unpack_from(payload)
        signature = np.frombuffer(payload, dtype="<u4", count=self.num_perm, offset=_FINGERPRINT.size)
        key = payload[min_size:].decode("utf-8", errors="surrogatepass")
        # Only non-empty sketches are kept and journaled; the index compares their stored form.
        return (key, StoredSignature(stored_values(signature), self.tag), fingerprint), stop - offset

    def _damaged(self, offset: int, number: int, what: str) -> StateError:
        return StateError(
            f"near-duplicate journal {self.journal_path} is damaged at byte {offset} (record {number}, not the "
            f"last one): {what}; use another state directory or reset it (NEARDUP_RESET=True)"
        )

    # -- the journal -----------------------------------------------------------------------------------------

    def _open_journal(self) -> None:
        """Open the journal for appending, creating it (with an fsynced header) when there is none."""
        path = self.journal_path
        assert path is not None
        if not path.exists():
            self._write_new_journal()
        self._journal = open(path, "ab", buffering=0)  # noqa: SIM115 - closed by _release
        self._journal_end = self._journal.seek(0, os.SEEK_END)

    def _write_new_journal(self) -> None:
        """Atomically replace the journal by an empty one continuing the current index."""
        path = self.journal_path
        assert path is not None
        params = json.dumps(
            {"tag": self.tag, "num_perm": self.num_perm, "min_shared": self.min_shared, "base": len(self.index)}
        ).encode()
        header = _HEADER.pack(JOURNAL_MAGIC, JOURNAL_FORMAT, len(params), zlib.crc32(params)) + params
        _write_atomically(path, header)

    def _append(self, key: str, sketch: Sketch) -> None:
        """One record, handed to the kernel before returning (see the module doc for why not fsynced)."""
        journal = self._journal
        assert journal is not None
        payload = b"".join((
            _FINGERPRINT.pack(sketch.fingerprint),
            np.asarray(sketch.signature, dtype="<u4").tobytes(),
            key.encode("utf-8", errors="surrogatepass"),
        ))
        size = _SIZE.pack(len(payload))
        record = b"".join((size, _SIZE.pack(zlib.crc32(size)), _SIZE.pack(zlib.crc32(payload)), payload))
        try:
            written = 0
            while written < len(record):  # a regular file writes everything, short of a full disk
                count = journal.write(record[written:])
                if not count:
                    raise OSError(errno.EIO, "the write made no progress")
                written += count
        except OSError as exc:
            # Cut a partial record off, so that later records still follow intact ones.
            try:
                os.ftruncate(journal.fileno(), self._journal_end)
            except OSError:
                logger.exception("could not cut a partial record off %s", self.journal_path)
            raise StateError(
                f"could not append to the near-duplicate journal {self.journal_path}: {exc}; {key!r} is kept "
                "for this run but would be forgotten after a crash"
            ) from exc
        self._journal_end += len(record)

    def _checkpoint(self) -> None:
        """Snapshot first, then an empty journal: a crash in between leaves a journal the snapshot covers."""
        assert self.state_path is not None
        self.index.save(self.state_path)
        self._write_new_journal()

    # -- the lock --------------------------------------------------------------------------------------------

    def _lock(self) -> None:
        if fcntl is None or self.state_dir is None:
            return
        fd = os.open(self.state_dir, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise StateError(
                    f"near-duplicate state directory {self.state_dir} is in use by another crawl; two crawls "
                    "cannot share one (give each its own JOBDIR or NEARDUP_STATE_DIR)"
                ) from exc
            logger.debug("cannot lock %s (%s); continuing without a lock", self.state_dir, exc)
            return
        self._lock_fd = fd

    def _release(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    def _count(self, name: str, value: int) -> None:
        if value:
            self.open_stats[name] = self.open_stats.get(name, 0) + value


def _write_atomically(path: Path, data: bytes) -> None:
    """Temporary file, fsync, rename, fsync of the directory: ``path`` holds the old or the new bytes."""
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def _zero_tail(data: mmap.mmap) -> int:
    """Where the run of zero bytes that ends ``data`` starts (``len(data)`` when it ends otherwise)."""
    chunk = 1 << 20
    end = len(data)
    while end > 0:
        start = max(0, end - chunk)
        piece = data[start:end].rstrip(b"\0")
        if piece:
            return start + len(piece)
        end = start
    return 0


__all__ = ["JOURNAL_FILE", "STATE_FILE", "Backend", "EmbeddedBackend", "StateError"]
