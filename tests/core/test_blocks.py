"""A page's blocks and own text ("auto" mode): marks, hashes, link lists, templates and the fallbacks."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_neardup.core.blocks import (
    LINK_RUN,
    MIN_OWN_WORDS,
    MIN_PASSAGE_WORDS,
    PASSAGE_GAP,
    PASSAGES_OF_MAIN,
    PASSAGES_OF_PAGE,
    PASSAGES_UNDER_TEMPLATE,
    PROSE_CHARS,
    link_blocks,
    link_lists,
    own_text,
    passages,
    prose_share,
    split_blocks,
)
from scrapy_neardup.core.host_template import learn_template
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


def test_plain_text_lines_hold_when_a_line_starts_with_a_character_that_is_folded() -> None:
    # A non-ASCII character is folded with the character before it, here the line feed: the line must still end.
    # (Long lines of ASCII: the text is folded piece by piece, as most pages are.)
    ascii_words = " plain words" * 20
    text = f"a quote follows{ascii_words}\n“best” is the word{ascii_words}\nÉtude starts{ascii_words}\n—\nthe last"
    page = split_blocks(clean_text(text, False, mode="auto").utf8)
    assert int((page.counts > 0).sum()) == 4
    assert page.text() == Sketcher(content="body").text(text, is_html=False)


def test_marker_bytes_in_plain_text_are_plain_separators() -> None:
    page = split_blocks(clean_text("one\x1dtwo\x1cthree\x1efour\nfive", False, mode="auto").utf8)
    assert not page.link_chars.any()
    assert page.counts[page.counts > 0].tolist() == [4, 1]
    assert page.text() == b"one two three four five"
    # Also where a folded character follows the mark (it is folded with it) on a page folded piece by piece.
    ascii_words = " plain words" * 20
    text = f"one{ascii_words}\x1e“two”{ascii_words}\x1d—three\nfour"
    page = split_blocks(clean_text(text, False, mode="auto").utf8)
    assert int((page.counts > 0).sum()) == 2
    assert not page.link_chars.any()
    assert page.text() == Sketcher(content="body").text(text, is_html=False)


@pytest.mark.parametrize("mode", ["body", "main", "auto"])
def test_every_mode_reads_main_role_main_once(mode: str) -> None:
    words = " ".join(f"w{i}" for i in range(40))
    html = f'<body><nav><a href=/>home</a></nav><main role="main"><p>{words}</p></main></body>'
    text = Sketcher(content=mode).text(html).decode()
    assert text.count("w39") == 1


# Passages of prose: what an article page says, without the widgets around it.
def _paragraph(tag: str, words: int = 40) -> str:
    return _block(" ".join(f"{tag}{i}" for i in range(words)))


def _gap() -> str:
    """More than PASSAGE_GAP words of link blocks that are no link list (tags, share buttons, each after a short
    line that breaks the run): no prose."""
    return "".join(_block(f"g{i} tag of the story", link=True) + _block("filed under")
                   for i in range(PASSAGE_GAP // 5 + 1))


def _prose(text: str) -> bytes:
    return own_text(_marked(text), None, PASSAGES_OF_PAGE)


def test_an_article_keeps_its_passage_without_dateline_share_block_and_comment_count() -> None:
    assert _marked(_paragraph("a")).chars.max() >= PROSE_CHARS
    article = _paragraph("a") + _block("a short subheading") + _paragraph("b") + _paragraph("c")
    page = (_block("updated november 3 2026") + _block("share on facebook share on twitter", link=True)
            + article + _block("17 comments", link=True) + _block("by jane doe photo by john roe"))
    assert _prose(page) == _prose(article)
    assert b"a short subheading" in _prose(page)
    # Read whole (a documentation page), everything but the link list stays.
    assert b"updated november" in own_text(_marked(page))


def test_short_lines_between_paragraphs_do_not_part_a_passage() -> None:
    """A guide's subheadings and list items, an agency story's one-sentence paragraphs: more than PASSAGE_GAP words
    of lines too short to be prose between two paragraphs, and no link among them. The lead before them is read
    with the larger section after them; links between them (tags, share buttons) do part it."""
    lead, section = _paragraph("a"), _paragraph("b") + _paragraph("c") + _paragraph("d")
    items = "".join(_block(f"l{i} one line of a list") for i in range(PASSAGE_GAP // 6 + 1))
    share = _block("share this story", link=True)
    read = _prose(share + lead + items + section).split()
    assert b"a0" in read and b"l0" in read and b"d39" in read and b"share" not in read
    assert _prose(share + lead + _gap() + section) == _prose(section)
    # A menu (a link list, which is not the page's own text) between the article and a footer's blurb parts them too.
    menu = "".join(_block(f"m{i} section of the site", link=True) for i in range(PASSAGE_GAP // 5 + 1))
    footer = _block("about us") + _paragraph("f")
    assert _prose(share + section + menu + footer) == _prose(section)


def test_a_print_page_of_a_guide_is_read_whole_but_its_print_chrome() -> None:
    """Through the sketcher: a print version (headings, a list and paragraphs, nothing marked) is read from its lead
    to its last paragraph, the list between them included; its print and close links are not."""
    lead = " ".join(f"lead{i}" for i in range(40))
    items = "".join(f"<p>{i}. A pick of the guide for item {i}</p>" for i in range(8))
    sections = "".join(f"<h2>Section {s}</h2><p>{' '.join(f'{s}x{i}' for i in range(60))}</p>" for s in "abc")
    html = (f"<html><body><div><a href='javascript:print()'>Print this page</a> <a href=#>Close window</a></div>"
            f"<h1>The best picks of the year</h1><p>{lead}</p>{items}{sections}</body></html>")
    text = Sketcher().text(html).decode()
    assert "lead0" in text and "pick of the guide for item 7" in text and "section c" in text and "cx59" in text
    assert "print this page" not in text and "close window" not in text


def test_a_page_with_prose_read_whole_leaves_out_its_link_blocks() -> None:
    """A short article (one paragraph: no passage to trust) is read whole, but without its print bar, share
    buttons and "next post" link, wherever they lie; a page with little prose (an index: an intro line, then entries
    that are mostly links) and a page read without passages keep theirs."""
    story = _paragraph("a", 60)
    assert MIN_PASSAGE_WORDS <= 60 < 100  # one paragraph under LONE_PROSE_WORDS: no passage
    chrome = (_block("print this page close window", link=True) + _block("a headline") + _block("share on facebook",
              link=True) + story + _block("next post", link=True) + _block("all rights reserved"))
    assert passages(_marked(chrome), _marked(chrome).counts > 0) is None
    assert _prose(chrome) == b"a headline " + _prose(story) + b" all rights reserved"
    assert b"print this page" in own_text(_marked(chrome))  # read whole, the passages not asked for
    entries = (_block("here is a list of all class members") + _block("v")
               + _block(f"value {_LS}log4cplus logger{_LE}") + _block(f"verbose {_LS}log4cplus appender{_LE}"))
    assert link_blocks(_marked(entries))[_marked(entries).counts > 0].tolist() == [False, False, True, True]
    assert _prose(entries) == own_text(_marked(entries)) == (
        b"here is a list of all class members v value log4cplus logger verbose log4cplus appender")
    # Whole, by way of the sketcher: the print version of a short story read as the story itself.
    body = " ".join(f"s{i}" for i in range(60))
    printed = (f"<html><body><div><a href='javascript:print()'>Print this page</a> <a href=#>Close window</a></div>"
               f"<p>{body}</p><div><a href=/next>Next story</a></div></body></html>")
    assert Sketcher().text(printed) == Sketcher().text(f"<html><body><p>{body}</p></body></html>") == body.encode()


def test_teasers_are_not_the_passage_and_trailing_teasers_go() -> None:
    teasers = "".join(_block(f"headline {i} of another story", link=True) + _paragraph(f"t{i}x", 62) for i in range(2))
    article = _paragraph("a") + _paragraph("b") + _paragraph("c")
    # A list of teasers with more prose than the article is not chosen over it ...
    assert _prose(teasers + _gap() + article) == _prose(article)
    # ... and teasers right after the article do not stretch its passage.
    assert _prose(article + teasers) == _prose(article)
    # As many teasers after a shorter article as it has paragraphs: the passage is measured once the teasers are
    # cut off, so the article is not taken for a list of teasers (the page would be read whole).
    short = _paragraph("a") + _paragraph("b")
    assert _prose(short + teasers) == _prose(short) == own_text(_marked(short))


def test_passages_of_comparable_size_are_all_kept_a_small_far_one_is_not() -> None:
    gap = _gap()
    article = _paragraph("a") + _paragraph("b") + _paragraph("c")
    comments = _paragraph("x") + _paragraph("y") + _block("reply", link=True)
    kept = _prose(article + gap + comments).split()
    assert b"a0" in kept and b"x0" in kept and b"g0" not in kept
    promo = _paragraph("p") + _block("subscribe", link=True)
    assert _prose(article + gap + promo) == _prose(article)


def test_short_prose_tables_and_plain_text_are_read_whole() -> None:
    # Too little prose for a passage: a short post keeps everything it says.
    assert MIN_PASSAGE_WORDS > 40  # _paragraph's words
    short = _block("posted by jane") + _paragraph("a") + _block("2 comments", link=False)
    assert _prose(short) == own_text(_marked(short))
    # A table page whose only prose is a sidebar's: the passage would hold too little of the page.
    cells = "".join(_block(f"row{i} cell value") for i in range(60))
    table = cells + _block("about us", link=True) + _paragraph("s", 60)
    assert passages(_marked(table), _marked(table).counts > 0) is None
    assert _prose(table) == own_text(_marked(cells + _paragraph("s", 60)))
    # Plain text (no link marks): every line is what the text says.
    plain = split_blocks(clean_text("a title\n" + " ".join(f"w{i}" for i in range(80)) + "\nfooter", False,
                                    mode="auto").utf8)
    assert passages(plain, plain.counts > 0) is None


def test_which_pages_are_read_for_their_prose_and_how_much_it_must_be() -> None:
    empty, learned = np.zeros(0, dtype=np.uint64), np.array([7], dtype=np.uint64)
    # A page's marked main content (a documentation page, a post in <main>): cut only when nearly all prose.
    assert prose_share(False, True, None) == prose_share(False, True, learned) == PASSAGES_OF_MAIN
    # Nothing else says what is the page's own: the passages need only be a good part of it.
    assert prose_share(True, True, None) == prose_share(True, False, None) == PASSAGES_OF_PAGE  # article pages
    assert prose_share(False, False, None) == prose_share(False, False, empty) == PASSAGES_OF_PAGE  # a print copy
    # What the host's template leaves is the page's own: the passages must be most of it.
    assert prose_share(False, False, learned) == prose_share(True, False, learned) == PASSAGES_UNDER_TEMPLATE
    assert PASSAGES_OF_PAGE < PASSAGES_UNDER_TEMPLATE < PASSAGES_OF_MAIN


def test_under_a_host_template_the_passages_must_be_most_of_the_page() -> None:
    """A page whose passages hold about half its own words (a reference page: a class's description, then its
    members' table) keeps its passages only when no host template is known; under one, it is read whole."""
    article = _paragraph("a") + _paragraph("b") + _paragraph("c")
    cells = "".join(_block(f"row{i} cell value") for i in range(30))
    page = _marked(article + _gap() + cells + _block("home", link=True))
    keep = page.counts > 0
    chosen = passages(page, keep)
    assert chosen is not None
    share = page.counts[chosen].sum() / page.counts[keep].sum()
    assert PASSAGES_OF_PAGE <= share < PASSAGES_UNDER_TEMPLATE
    template = np.array([7], dtype=np.uint64)  # known, and none of this page's blocks
    assert own_text(page, None, PASSAGES_OF_PAGE) == _prose(article) == own_text(_marked(article))
    # Read whole, without its link blocks (it has prose: the gap's tags and the "home" link are its chrome).
    lines = "".join(_block("filed under") for _ in range(PASSAGE_GAP // 5 + 1))  # what the gap says besides tags
    whole = own_text(_marked(article + lines + cells))
    assert own_text(page, template, PASSAGES_UNDER_TEMPLATE) == whole
    assert own_text(page, template) == own_text(page) != whole
    # A post with a teaser block of its own after it (no two pages share it): the post alone, template or not.
    teasers = "".join(_block(f"headline {i} of another story", link=True) + _paragraph(f"t{i}x", 20) for i in range(3))
    post = _marked(article + teasers)
    assert own_text(post, template, PASSAGES_UNDER_TEMPLATE) == own_text(post, None, PASSAGES_OF_PAGE)
    assert own_text(post, template, PASSAGES_UNDER_TEMPLATE) == _prose(article)
    assert b"t0x0" in own_text(post, template)


def test_a_blog_post_under_its_sites_template_is_read_without_the_teasers_added_to_it() -> None:
    """Through the sketcher, as ``neardup dedupe`` runs it: posts of one site that mark nothing, the template
    learned from them; a post served again with a "related stories" block of headlines and teasers reads as
    itself. A reference page of the same site, whose prose is half of what it says, keeps its members' table."""
    sketcher = Sketcher()

    def page(body: str) -> str:
        return (f"<html><body><div><a href=/>Home</a> <a href=/blog>Blog</a> <a href=/about>About</a></div>"
                f"<div>{body}</div><div><p>Copyright the example project</p></div></body></html>")

    def post(n: int, words: int = 30) -> str:
        return page(f"<h1>Post {n}</h1>" + "".join(
            f"<p>{' '.join(f'n{n}p{i}w{j}' for j in range(words))}</p>" for i in range(3)))

    posts = [post(n) for n in range(8)]
    template = learn_template([h for h in sketcher.block_hashes(posts) if h is not None]).hashes
    assert template.size
    related = "".join(f"<li><a href=/p{i}>Another story {i}</a><p>{' '.join(f'r{i}w{j}' for j in range(20))}</p></li>"
                      for i in range(3))
    again = posts[0].replace("</div><div><p>Copyright", f"<h3>Related stories</h3><ul>{related}</ul></div>"
                             "<div><p>Copyright")
    assert sketcher.text(again, template=template) == sketcher.text(posts[0], template=template)
    members = "".join(f"<tr><td><code>method_{i}(x)</code></td><td>returns {i}</td></tr>" for i in range(20))
    description = "".join(f"<p>{' '.join(f'd{i}w{j}' for j in range(40))}</p>" for i in range(2))
    reference = page(f"<h1>Class C</h1>{description}<table>{members}</table>")
    assert b"method_19" in sketcher.text(reference, template=template)


def test_a_post_in_main_reads_as_its_print_copy_a_reference_page_in_main_whole() -> None:
    """Through the sketcher: a blog post in ``<main>`` loses its title, byline, date and "next / previous" links
    (its print copy has none of them but the title); a reference page in ``<main>``, whose prose is its
    description, keeps its members' table, which it would lose if it marked nothing."""
    sketcher = Sketcher()
    paragraphs = "".join(f"<p>{' '.join(f'p{i}w{j}' for j in range(30))}</p>" for i in range(4))
    post = (f"<html><body><nav><a href=/>home</a></nav><main><h1>A post</h1><p>Jane Doe</p><p>3 March 2024</p>"
            f"{paragraphs}<p><a href=/next>Next article: another post</a></p>"
            f"<p><a href=/prev>Previous article: an older post</a></p></main></body></html>")
    printed = f"<html><body><h1>A post</h1>{paragraphs}<p><a href=/>example.org</a></p></body></html>"
    assert sketcher.text(post) == sketcher.text(printed)
    # Not nearly all prose (a byline of 22 short words: 82% of its words in passages): read whole.
    assert b"jane doe" in sketcher.text(post.replace("</p><p>3 March", " " + "x " * 20 + "</p><p>3 March"))
    # Its description (80 words) is half its words: enough for passages on a page that marks nothing, not in <main>.
    members = "".join(f"<tr><td><code>method_{i}(x)</code></td><td>returns {i}</td></tr>" for i in range(20))
    description = "".join(f"<p>{' '.join(f'd{i}w{j}' for j in range(40))}</p>" for i in range(2))
    reference = (f"<html><body><main><h1>Class C</h1>{description}<table>{members}</table>"
                 f"<p><a href=/up>up</a></p></main></body></html>")
    assert b"method_19" in sketcher.text(reference)
    assert b"method_19" not in sketcher.text(reference.replace("main>", "div>"))
