"""The three marker bytes that carry a page's block structure from its HTML to its normalized text.

HTML extraction (:mod:`scrapy_neardup.core.html`) puts :data:`BLOCK` at every boundary of a block element
(paragraph, list item, table cell, heading, ``div``...) and brackets link text with :data:`LINK_START` and
:data:`LINK_END`; normalization (:mod:`scrapy_neardup.core.normalize`) keeps them when asked to; the block
splitter (:mod:`scrapy_neardup.core.blocks`) reads them back. They are ASCII control characters, which page
text never needs: normalization turns them into word separators anyway, so an input holding them literally
loses nothing when they are replaced by spaces first (:data:`CLEAR_MARKS`).
"""

from __future__ import annotations

#: A block boundary.
BLOCK = 0x1E
#: Start of a link's text (``<a>``).
LINK_START = 0x1D
#: End of a link's text (``</a>``).
LINK_END = 0x1C
MARKS = (BLOCK, LINK_START, LINK_END)
#: ``bytes.translate`` table that turns the marker bytes of raw input into spaces.
CLEAR_MARKS = bytes(32 if b in MARKS else b for b in range(256))
_MARK_BYTES = tuple(bytes((mark,)) for mark in MARKS)


def clear_marks(data: bytes) -> bytes:
    """UTF-8 ``data`` with the marker bytes it holds turned into spaces (:data:`CLEAR_MARKS`); ``data`` itself when
    it holds none, as nearly every page: three byte searches cost a tenth of the copy."""
    if any(mark in data for mark in _MARK_BYTES):
        return data.translate(CLEAR_MARKS)
    return data
