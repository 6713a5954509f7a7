"""Validation of index and field names before they reach a request path or a query.

Index names follow Elasticsearch's rules (lowercase; none of ``\\ / * ? " < > | , # :`` or spaces; not starting
with ``-``, ``_`` or ``+``; not ``.`` or ``..``; at most 255 bytes) and, in addition, must not start with ``.``
(hidden and system indices are not ours to write to) and must not contain wildcards, so one name always means
one index. Field names are dotted paths of plain segments: no wildcards, no leading underscore (metadata
fields such as ``_id`` or ``_source``), no empty segments, no whitespace or control characters, and nothing
inside this package's own ``neardup`` namespace.
"""

from __future__ import annotations

import re

from scrapy_neardup.errors import InvalidNameError

_MAX_INDEX_BYTES = 255
_MAX_FIELD_CHARS = 255
_INDEX_FORBIDDEN = set('\\/*?"<>|,#: ') | {chr(c) for c in range(32)}
_FIELD_SEGMENT = re.compile(r"[^\s*?\\\"'#,\x00-\x1f\x7f]+")
#: The object holding this package's fields; user fields may not live inside it.
RESERVED_FIELD_PREFIX = "neardup"


def validate_index_name(name: str) -> str:
    """Return ``name`` if it is a valid, concrete, non-hidden Elasticsearch index name; raise otherwise.

    Raises:
        InvalidNameError: the message names the offending character or rule.
    """
    if not isinstance(name, str) or not name:
        raise InvalidNameError("index name must be a non-empty string")
    if name in (".", ".."):
        raise InvalidNameError(f"index name {name!r} is not allowed")
    if name != name.lower():
        raise InvalidNameError(f"index name {name!r} must be lowercase")
    bad = sorted(set(name) & _INDEX_FORBIDDEN)
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        raise InvalidNameError(f"index name {name!r} must not contain {shown}")
    if name[0] in "-_+.":
        raise InvalidNameError(f"index name {name!r} must not start with {name[0]!r}")
    if len(name.encode("utf-8")) > _MAX_INDEX_BYTES:
        raise InvalidNameError(f"index name is longer than {_MAX_INDEX_BYTES} bytes")
    return name


def validate_field_name(name: str, *, allow_reserved: bool = False) -> str:
    """Return ``name`` if it is a plain (possibly dotted) field path; raise otherwise.

    Args:
        name: e.g. ``"text"`` or ``"page.body"``.
        allow_reserved: accept names inside the ``neardup`` object (for this package's own fields).

    Raises:
        InvalidNameError: wildcard, leading underscore, empty segment, whitespace, quote, or reserved prefix.
    """
    if not isinstance(name, str) or not name:
        raise InvalidNameError("field name must be a non-empty string")
    if len(name) > _MAX_FIELD_CHARS:
        raise InvalidNameError(f"field name is longer than {_MAX_FIELD_CHARS} characters")
    if name[0] == "_":
        raise InvalidNameError(f"field name {name!r} must not start with '_' (metadata fields are not allowed)")
    for segment in name.split("."):
        if not segment:
            raise InvalidNameError(f"field name {name!r} has an empty segment (leading, trailing or double dot)")
        if not _FIELD_SEGMENT.fullmatch(segment):
            raise InvalidNameError(
                f"field name {name!r} must not contain wildcards, quotes, '#', ',', whitespace or control characters"
            )
    if not allow_reserved and (name == RESERVED_FIELD_PREFIX or name.startswith(RESERVED_FIELD_PREFIX + ".")):
        raise InvalidNameError(f"field name {name!r} lies in the reserved {RESERVED_FIELD_PREFIX!r} object")
    return name
