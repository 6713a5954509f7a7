"""The host templates of the embedded store: an append-only file next to its snapshot and journal.

Design notes: docs/architecture.md#scrapy_neardupstoretemplate_log
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import struct
import zlib
from pathlib import Path
from typing import IO

from ..core.atomic_files import write_atomically
from ..core.host_template import HostTemplate
from ..errors import DamagedRecord, StateError, TemplateFormatError, TemplateWriteError
from . import records

logger = logging.getLogger(__name__)

TEMPLATE_LOG_MAGIC = b"NDUPTMPL"
TEMPLATE_LOG_FORMAT = 1
_HEADER = struct.Struct("<8sIII")  # magic, format, params length, crc32(params)
_HOST = struct.Struct("<H")


class TemplateLog:
    """One template file (see the module doc).

    Args:
        path: the file.
        tag: the store's sketch parameter tag; a file made for another is refused.
    """

    def __init__(self, path: Path, tag: str) -> None:
        self.path = path
        self.tag = tag
        self._file: IO[bytes] | None = None
        self._end = 0

    def load(self) -> tuple[dict[str, HostTemplate], int]:
        """The templates in the file (none when there is no file) and the bytes of a torn last record (0: none).

        Raises:
            StateError: the file is damaged before its end, or made for another tag.
        """
        if not self.path.exists():
            return {}, 0
        try:
            with open(self.path, "rb") as handle:
                if os.fstat(handle.fileno()).st_size < _HEADER.size:
                    raise StateError(f"near-duplicate template file {self.path} is damaged: shorter than its header")
                with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                    return self._read(data)
        except OSError as exc:
            raise StateError(f"near-duplicate template file {self.path} is unreadable: {exc}") from exc

    def _read(self, data: mmap.mmap) -> tuple[dict[str, HostTemplate], int]:
        offset = self._check_header(data)
        templates: dict[str, HostTemplate] = {}
        number = 0
        while offset < len(data):
            try:
                payload, length = records.unframe(data, offset, _HOST.size)
                if payload is None:
                    return templates, len(data) - offset
                (size,) = _HOST.unpack_from(payload)
                host = payload[_HOST.size : _HOST.size + size].decode("utf-8", errors="surrogatepass")
                template = HostTemplate.from_bytes(payload[_HOST.size + size :])
            except (DamagedRecord, TemplateFormatError) as exc:
                raise StateError(
                    f"near-duplicate template file {self.path} is damaged at byte {offset} (record {number}, not "
                    f"the last one): {exc}; use another state directory or reset it (NEARDUP_RESET=True)"
                ) from exc
            templates.setdefault(host, template)
            offset += length
            number += 1
        return templates, 0

    def _check_header(self, data: mmap.mmap) -> int:
        magic, version, length, crc = _HEADER.unpack_from(data)
        raw = data[_HEADER.size : _HEADER.size + length]
        if magic != TEMPLATE_LOG_MAGIC or version != TEMPLATE_LOG_FORMAT or zlib.crc32(raw) != crc:
            raise StateError(f"{self.path} is not a scrapy-neardup template file of format "
                             f"{TEMPLATE_LOG_FORMAT} (or its header is damaged)")
        try:
            tag = json.loads(raw)["tag"]
        except (ValueError, KeyError, TypeError) as exc:
            raise StateError(f"near-duplicate template file {self.path} is damaged: unreadable header") from exc
        if tag != self.tag:
            raise StateError(f"{self.path} holds templates for sketches tagged {tag}, but this run uses {self.tag}; "
                             "use another state directory or reset it (NEARDUP_RESET=True)")
        return _HEADER.size + length

    def open_for_append(self, torn: int = 0) -> None:
        """Open the file for appending, creating it (header written atomically and fsynced) when missing; a torn
        last record of ``torn`` bytes is cut off first, so new records follow intact ones."""
        if not self.path.exists():
            params = json.dumps({"tag": self.tag}).encode()
            write_atomically(self.path, _HEADER.pack(TEMPLATE_LOG_MAGIC, TEMPLATE_LOG_FORMAT, len(params),
                                                     zlib.crc32(params)) + params)
        self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 - closed by close()
        self._end = self._file.seek(0, os.SEEK_END)
        if torn:
            self._end -= torn
            os.ftruncate(self._file.fileno(), self._end)

    def append(self, host: str, template: HostTemplate) -> None:
        """Record ``host``'s template, handed to the kernel before returning.

        Raises:
            TemplateWriteError: the write failed (nothing of it stays in the file).
        """
        assert self._file is not None, "open_for_append first"
        name = host.encode("utf-8", errors="surrogatepass")
        payload = _HOST.pack(len(name)) + name + template.to_bytes()
        try:
            self._end = records.append(self._file, records.frame(payload), self._end)
        except OSError as exc:
            raise TemplateWriteError(
                f"could not append to the near-duplicate template file {self.path}: {exc}"
            ) from exc

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


