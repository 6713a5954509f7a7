"""Checksummed records appended to a file: the framing the journal and the template log share.

A record is ``u32 size | u32 crc32(size) | u32 crc32(payload) | payload`` (little-endian). It is handed to the
kernel in one unbuffered ``write(2)``; a write cut short is cut off the file again, so later records always
follow intact ones. Reading tells a *torn tail* (the last record, in flight when the process died: incomplete,
or failing a checksum with nothing but zero bytes after it, i.e. blocks allocated but never written after a
power loss) from *damage* (a record failing a check with data after it).
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
import zlib
from typing import IO

_RECORD = struct.Struct("<III")  # payload size, crc32(size), crc32(payload)
_SIZE = struct.Struct("<I")
#: Bytes a record adds to its payload.
OVERHEAD = _RECORD.size


class DamagedRecord(ValueError):
    """A record failed a check and is not the last one: the file is damaged (the message says how)."""


def frame(payload: bytes) -> bytes:
    """The record holding ``payload``."""
    size = _SIZE.pack(len(payload))
    return b"".join((size, _SIZE.pack(zlib.crc32(size)), _SIZE.pack(zlib.crc32(payload)), payload))


def unframe(data: mmap.mmap | bytes, offset: int, min_size: int = 1) -> tuple[bytes | None, int]:
    """The payload of the record at ``offset`` and the record's length; ``(None, 0)`` when the rest of ``data``
    is a torn tail.

    Raises:
        DamagedRecord: a record fails a check and data follows it.
    """
    end = len(data)
    if end - offset < _RECORD.size:
        return None, 0
    size, size_crc, crc = _RECORD.unpack_from(data, offset)
    if size_crc != zlib.crc32(data[offset : offset + _SIZE.size]) or size < min_size:
        if _zero_tail(data) < offset + _RECORD.size:  # the header itself runs into unwritten blocks
            return None, 0
        raise DamagedRecord("record header checksum mismatch")
    stop = offset + _RECORD.size + size
    if stop > end:
        return None, 0
    payload = bytes(data[offset + _RECORD.size : stop])
    if zlib.crc32(payload) != crc:
        if _zero_tail(data) <= stop:  # nothing but unwritten blocks after it: the last record
            return None, 0
        raise DamagedRecord("record checksum mismatch")
    return payload, stop - offset


def append(file: IO[bytes], record: bytes, end: int) -> int:
    """Write ``record`` at the end (``end``) of ``file``, opened unbuffered for appending; returns the new end.

    Raises:
        OSError: the write failed; what part of the record was written is cut off again.
    """
    written = 0
    try:
        while written < len(record):  # a regular file writes everything, short of a full disk
            count = file.write(record[written:])
            if not count:
                raise OSError(errno.EIO, "the write made no progress")
            written += count
    except OSError:
        try:
            os.ftruncate(file.fileno(), end)
        except OSError as cut:
            raise OSError(errno.EIO, f"could not cut a partial record off: {cut}") from cut
        raise
    return end + len(record)


def _zero_tail(data: mmap.mmap | bytes) -> int:
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
