"""JSON lines in and out, for every ``neardup`` command that reads or writes records.

:func:`open_input` opens a file (or stdin for ``-``); :func:`read_records` yields ``(line number, object)``
and raises :class:`InputError` naming the line of the first record that is not a JSON object; blank
lines are skipped; bytes that are not UTF-8 become U+FFFD rather than stopping the run. :func:`json_line`
writes one record as one line. :func:`choose_id_field` gives the field that names a record (``--id-field``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from ..core.dedupe import skip_reason
from ..core.mirror_table import host_of
from ..errors import InputError

#: The field naming a record unless ``--id-field`` says otherwise (or, see :func:`choose_id_field`, the URL).
DEFAULT_ID_FIELD = "id"
#: The help of ``--id-field``, the same in every command.
ID_FIELD_HELP = ("field holding the record id (default: id; when the first record has no id but a --url-field "
                 "value, the URL, as the Scrapy pipeline keys pages, said in one line on stderr)")


def choose_id_field(
    given: str | None, first: dict[str, Any] | None, url_field: str, command: str,
    get: Callable[[dict[str, Any], str], Any] = dict.get,
) -> str:
    """The field that names each record: ``given`` (``--id-field``) when set; else ``id``, unless the first record
    has no ``id`` but has a ``url_field`` value, in which case the URL names the records (the key the Scrapy
    pipeline gives pages), and one line on stderr says so. ``get`` reads a field (dotted paths: the ``es``
    commands)."""
    if given is not None:
        return given
    if first is not None and get(first, DEFAULT_ID_FIELD) is None and get(first, url_field) is not None:
        print(f"{command}: the records have no {DEFAULT_ID_FIELD!r} field; using {url_field!r} as their id "
              f"(--id-field to choose)", file=sys.stderr)
        return url_field
    return DEFAULT_ID_FIELD


@contextlib.contextmanager
def open_input(path: str, *, rereadable: bool = False) -> Iterator[tuple[IO[bytes], int | None]]:
    """``(binary handle, size in bytes or None)`` of ``path``, or of stdin for ``-``; ``rereadable``: stdin is first
    copied to a temporary file, so that the handle can be read again after ``seek(0)``.

    Raises:
        InputError: the file cannot be opened.
    """
    if path == "-":
        if not rereadable:
            yield sys.stdin.buffer, None
            return
        with tempfile.TemporaryFile() as copy:
            shutil.copyfileobj(sys.stdin.buffer, copy)
            size = copy.tell()
            copy.seek(0)
            yield copy, size
        return
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None
    with handle:
        yield handle, os.fstat(handle.fileno()).st_size


def read_records(
    lines: Iterable[bytes], on_line: Callable[[int], Any] | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` for each non-blank line; ``on_line(bytes read)`` after each line (progress).

    Raises:
        InputError: at the first line that is not valid JSON or not a JSON object (the records before it
            have been yielded).
    """
    for number, raw in enumerate(lines, start=1):
        if on_line is not None:
            on_line(len(raw))
        line = raw.decode("utf-8", errors="replace")
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            # Some of json's messages end in "at" ("Unterminated string starting at"): the column completes them.
            where = "column" if exc.msg.endswith(" at") else "at column"
            raise InputError(f"line {number}: invalid JSON ({exc.msg} {where} {exc.colno})") from None
        if not isinstance(record, dict):
            raise InputError(f"line {number}: expected a JSON object, got {type(record).__name__}")
        yield number, record


# Line and paragraph separators are legal raw inside JSON strings, but readers that split lines on them
# (str.splitlines) would cut the record: write them escaped.
_LINE_BREAKS = str.maketrans({"\u0085": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def json_line(record: dict[str, Any]) -> str:
    """One record as one line of JSON (non-ASCII kept, line separators escaped), newline included."""
    return json.dumps(record, ensure_ascii=False).translate(_LINE_BREAKS) + "\n"


def record_host(record: dict[str, Any], url_field: str) -> str | None:
    """The host (``scheme://host[:port]``) of a record's page, from its ``url_field``; ``None`` without one."""
    url = record.get(url_field)
    return host_of(url) if isinstance(url, str) else None


def record_pages(
    source: Iterable[bytes], text_field: str, url_field: str, on_line: Callable[[int], Any] | None = None,
) -> Iterator[tuple[str, str, Any]]:
    """``(host, key, content)`` of the records of ``source`` that have a host and text: what a batch job learns its
    hosts' templates from (:func:`scrapy_neardup.core.host_template.learn_hosts`). A line that is not a JSON object ends
    the input (the pass that follows reports it, after writing the records before it)."""
    with contextlib.suppress(InputError):
        for number, record in read_records(source, on_line):
            host, content = record_host(record, url_field), record.get(text_field)
            if host is not None and skip_reason(content) is None:
                yield host, str(record.get(url_field) or number), content
