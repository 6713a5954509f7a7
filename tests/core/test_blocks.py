"""A page's blocks and own text ("auto" mode): marks, hashes, link lists, templates and the fallbacks."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_neardup.core.blocks import LINK_RUN, MIN_OWN_WORDS, link_lists, own_text, split_blocks
from scrapy_neardup.core.html import marked_text, tag_positions
from scrapy_neardup.core.marks import BLOCK, LINK_END, LINK_START
from scrapy_neardup.core.sketch import Sketcher
from scrapy_neardup.core.text import clean_text


def blocks_of(html: str):  # noqa: ANN201 - a test helper
    return split_blocks(clean_text(html, True, mode="auto").utf8)


def texts(html: str) -> list[str]:
    """The words of each block with words, in order."""
    page = blocks_of(html)
    return [page.text(page.block == i).decode() for i in np.flatnonzero(page.counts > 0).tolist()]


def test_block_elements_bound_blocks_and_inline_ones_do_not() -> None:
    html = "<body><p>One <b>bold</b> line</p><ul><li>first</li><li>second <i>item</i></li></ul><div>tail</div></body>"
    assert texts(html) == ["one bold line", "first", "second item", "tail"]


def test_marks_come_out_of_the_parser_in_place() -> None:
    data = b"<p>a <a href=x>link</a> b</p><table><tr><td>cell</td></tr></table>"
    text, marked = marked_text(data, tag_positions(data))
    assert not marked
    assert chr(LINK_START) + "link" + chr(LINK_END) in text
    # Cells are blocks; the table elements around them get no mark (a character there would be moved).
    assert text.count(chr(BLOCK)) == 4
    assert text.index("cell") > text.index("link")


def test_marker_bytes_in_the_input_are_plain_separators() -> None:
    hostile = "<p>x\x1ey\x1dz\x1cw</p>"
    assert texts(hostile) == ["x y z w"]
    assert Sketcher(content="auto").text(hostile) == Sketcher(content="body").text(hostile) == b"x y z w"


def test_block_hashes_ignore_markup_and_spacing_but_not_words_or_links() -> None:
    a = blocks_of("<div><p>The  quick <a href=1>brown</a> fox</p></div>")
    b = blocks_of("<section><p>the quick <a href=2 class=x><b>brown</b></a> <em>fox</em></p></section>")
    c = blocks_of("<p>the quick brownfox</p>")
    d = blocks_of("<p>the quick brown fox</p>")  # the same words, none of them a link: a heading, not a menu entry
    assert a.distinct_hashes.tolist() == b.distinct_hashes.tolist()
    assert a.distinct_hashes.tolist() != c.distinct_hashes.tolist()
    assert a.distinct_hashes.tolist() != d.distinct_hashes.tolist()


def test_link_share_is_counted_per_block() -> None:
    page = blocks_of("<p>plain words here <a href=x>one link</a></p><p><a href=y>all of it</a></p>")
    rows = np.flatnonzero(page.counts > 0)
    assert page.link_chars[rows].tolist() == [7, 7]
    assert page.chars[rows].tolist() == [21, 7]


# The link-list and template rules read the marks extraction leaves; they are tested on marked text directly (the
# extraction itself takes most menus out before them: tests/core/test_main_content.py).
_B, _LS, _LE = chr(BLOCK), chr(LINK_START), chr(LINK_END)


def _block(words: str, link: bool = False) -> str:
    return _B + (_LS + words + _LE if link else words) + _B


def _menu(n: int) -> str:
    return "".join(_block(f"entry {i}", link=True) for i in range(n))


def _marked(text: str):  # noqa: ANN202 - a test helper
    return split_blocks(text.encode())


def test_runs_of_link_blocks_are_link_lists_but_a_lone_link_stays() -> None:
    words = " ".join(f"word{i}" for i in range(30))
    page = _marked(_menu(LINK_RUN) + _block(words) + _block("read more", link=True) + _block(words)
                   + _menu(LINK_RUN - 1))
    listed = link_lists(page)[page.counts > 0].tolist()
    assert listed == [True] * LINK_RUN + [False] * 3 + [False] * (LINK_RUN - 1)
    shorter = " ".join(f"entry {i}" for i in range(LINK_RUN - 1))
    assert own_text(page) == f"{words} read more {words} {shorter}".encode()


def test_template_blocks_go_and_fallbacks_keep_a_short_pages_own_words() -> None:
    footer = _block("copyright the example project all rights reserved")
    page = _marked(_menu(5) + _block("uses of widget") + _block("no usage of widget") + footer)
    template = _marked(footer).distinct_hashes
    # Fewer than MIN_OWN_WORDS words of its own without the menu: the menu (not template) comes back.
    assert MIN_OWN_WORDS > 6
    assert own_text(page, template) == b"entry 0 entry 1 entry 2 entry 3 entry 4 uses of widget no usage of widget"
    # A page that is all template is sketched whole: it says nothing of its own.
    all_template = _marked(footer)
    assert own_text(all_template, template) == b"copyright the example project all rights reserved"
    assert own_text(blocks_of("<p> </p>"), template) == b""


def test_plain_text_has_a_block_per_line() -> None:
    page = split_blocks(clean_text("first line\nsecond line\n\nthird", False, mode="auto").utf8)
    assert int((page.counts > 0).sum()) == 3


@pytest.mark.parametrize("mode", ["body", "main", "auto"])
def test_every_mode_reads_main_role_main_once(mode: str) -> None:
    words = " ".join(f"w{i}" for i in range(40))
    html = f'<body><nav><a href=/>home</a></nav><main role="main"><p>{words}</p></main></body>'
    text = Sketcher(content=mode).text(html).decode()
    assert text.count("w39") == 1
