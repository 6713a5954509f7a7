"""A page's words in blocks, and what of it is the page's own: link lists and its host's template taken out, and
on pages with prose, the passages of prose (the article, not the widgets around it).

:func:`split_blocks` reads a batch of ``"auto"`` texts (their block and link marks) with numpy passes over their
words; :func:`own_words` keeps what a page says itself.

Design notes: docs/architecture.md#scrapy_neardupcoreblocks
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeGuard

import numpy as np

from .hashing import fmix64_inplace
from .marks import BLOCK, LINK_START, MARKS
from .shingles import join_texts, word_hashes

#: A block whose link characters are at least this share of its characters is a link block (an index entry such as
#: "name: a link to its class", about half link text, is not: it is what an index page says).
LINK_SHARE = 0.7
#: At least this many link blocks in a row (blocks without words between them do not break a run) form a link
#: list, which is not the page's own text.
LINK_RUN = 3
#: Fewer words than this left after taking template and link lists out: link lists are put back (step 2).
MIN_OWN_WORDS = 10
#: A block of at least this many word bytes, less than :data:`PROSE_LINK_SHARE` of them link text, is prose (a
#: paragraph, not a byline, a caption, a button or a headline).
PROSE_CHARS = 100
PROSE_LINK_SHARE = 0.3
#: Prose blocks with at most this many words of link blocks (link lists included) between them belong to one
#: passage. Lines that are not links (a subheading, a list item, a one-line paragraph, a byline) do not part them: a
#: guide's lists and an agency story's one-sentence paragraphs lie between its paragraphs, while what parts an
#: article from a comment thread or a footer is links (share buttons, tags, related headlines, navigation).
PASSAGE_GAP = 40
#: Passages of fewer prose blocks than this in all, and fewer than :data:`LONE_PROSE_WORDS` words, are not trusted:
#: one paragraph may be a sidebar's blurb, longer than a short post's lines.
MIN_PROSE_BLOCKS = 2
LONE_PROSE_WORDS = 100
#: A page whose passages hold fewer words of prose than this keeps all its own words (a short post, a table).
MIN_PASSAGE_WORDS = 50
#: Passages whose prose holds at least this share of the largest one's are kept with it (an article and a comment
#: thread of its size: both, rather than the wrong one).
PASSAGE_SHARE = 0.5
#: The passages kept must hold at least this share of the page's own words (link blocks and the blocks right after
#: them aside); else the page keeps them all (its content is a table or a list, and its prose a sidebar's).
PASSAGES_OF_PAGE = 0.4
#: The same share for a page that marks nothing, read under its host's template (a blog's post without ``<main>``,
#: a reference page of a documentation site stripped of it): what the template leaves is the page's own, and the
#: passages must be most of it. A post is its prose; a class page's description is a small part of what the page
#: says (its members' tables).
PASSAGES_UNDER_TEMPLATE = 0.6
#: The same share in the main content a page marks without declaring itself an article (a documentation page, a
#: blog's post in ``<main>``): only a part that is nearly all prose loses what lies around its passages (a post's
#: title, byline and links to its neighbours); a reference page's signatures, tables and lists are read whole.
PASSAGES_OF_MAIN = 0.9
#: A passage of which at least this share of the prose blocks follow a link block is a list of teasers (headline,
#: then excerpt), not the page's text.
TEASER_SHARE = 0.5
# Bytes that separate words in normalized text (spaces and the marks).
_SEPARATOR = 32
_MARKS_TO_SPACES = bytes(32 if b in MARKS else b for b in range(256))
# Mix a word's rank in its block, and whether it is link text, into its hash (arbitrary odd constants).
_RANK = np.uint64(0x9E3779B97F4A7C15)
_LINK = np.uint64(0xC2B2AE3D27D4EB4F)


@dataclass(frozen=True, eq=False)
class Blocks:
    """The words and blocks of one page's normalized, marked text.

    Attributes:
        utf8: the normalized text with its marks.
        starts, lengths: ``int64[w]``: where each word is in ``utf8``.
        words: ``uint64[w]``: the word hashes (:func:`scrapy_neardup.core.shingles.word_hashes`).
        block: ``int64[w]``: each word's block, ``0 .. n - 1``.
        hashes: ``uint64[n]``: each block's hash (0 for a block without words).
        counts: ``int64[n]``: words per block.
        chars: ``int64[n]``: word bytes per block.
        link_chars: ``int64[n]``: word bytes inside links per block.
    """

    utf8: bytes
    starts: np.ndarray
    lengths: np.ndarray
    words: np.ndarray
    block: np.ndarray
    hashes: np.ndarray
    counts: np.ndarray
    chars: np.ndarray
    link_chars: np.ndarray

    @property
    def distinct_hashes(self) -> np.ndarray:
        """The sorted distinct hashes of the blocks that have words: what a host template is learned from."""
        hashes = np.sort(self.hashes[self.counts > 0])
        if hashes.size < 2:
            return hashes
        distinct: np.ndarray = hashes[np.concatenate(([True], hashes[1:] != hashes[:-1]))]
        return distinct

    def text(self, keep: np.ndarray | None = None) -> bytes:
        """The plain normalized text of the words ``keep`` selects (``bool[w]``; all when None)."""
        if keep is None:
            return b" ".join(self.utf8.translate(_MARKS_TO_SPACES).split())
        # Runs of kept words, each cut out of the text in one slice (marks and spaces between them normalized).
        edges = np.flatnonzero(np.diff(keep.astype(np.int8), prepend=0, append=0))
        firsts, lasts = edges[::2], edges[1::2] - 1
        begin = self.starts[firsts].tolist()
        end = (self.starts[lasts] + self.lengths[lasts]).tolist()
        utf8 = self.utf8
        raw = b" ".join([utf8[a:b] for a, b in zip(begin, end, strict=True)])
        return b" ".join(raw.translate(_MARKS_TO_SPACES).split())


def split_blocks(utf8: bytes) -> Blocks:
    """The blocks of one normalized text that kept its marks (see the module doc)."""
    return split_blocks_many([utf8])[0]


def split_blocks_many(texts: Sequence[bytes]) -> list[Blocks]:
    """The blocks of many normalized texts that kept their marks, read together (see the module doc)."""
    if not texts:
        return []
    buffer, ends = join_texts(texts)
    starts, lengths, block, in_link, boundaries = _read_marks(buffer, ends)
    text_starts = np.concatenate(([0], ends[:-1] + 1))
    # Global block numbers: a text's first block follows the previous text's last one.
    first_block = np.searchsorted(boundaries, text_starts) + np.arange(len(texts))
    total = boundaries.size + len(texts)  # a text's blocks: its boundaries + 1
    hashes = word_hashes(buffer, starts, lengths)
    counts = np.bincount(block, minlength=total)
    chars = np.bincount(block, weights=lengths, minlength=total).astype(np.int64)
    if in_link.any():
        link_chars = np.bincount(block[in_link], weights=lengths[in_link], minlength=total).astype(np.int64)
    else:
        link_chars = np.zeros(total, dtype=np.int64)
    block_hashes = _block_hashes(hashes, in_link, block, counts)
    words_before = np.searchsorted(starts, ends)
    out = []
    for i, text in enumerate(texts):
        lo, hi = (int(words_before[i - 1]) if i else 0), int(words_before[i])
        b_lo = int(first_block[i])
        b_hi = int(first_block[i + 1]) if i + 1 < len(texts) else total
        offset = int(text_starts[i])
        out.append(Blocks(
            text, starts[lo:hi] - offset, lengths[lo:hi], hashes[lo:hi], block[lo:hi] - b_lo,
            block_hashes[b_lo:b_hi], counts[b_lo:b_hi], chars[b_lo:b_hi], link_chars[b_lo:b_hi],
        ))
    return out


def _read_marks(
    buffer: bytes, ends: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The words of a :func:`~scrapy_neardup.core.shingles.join_texts` buffer (starts, lengths), each word's global
    block, whether it is link text, and where the block boundaries are: two numpy passes over the bytes find the
    words (where runs of word bytes start and end) and the marks, and the rest works on those (the runs of spaces
    of a text sketched in ``"auto"`` mode are not collapsed, so it holds several separators a word, which cost
    nothing beyond the first pass).

    A word's block is the number of block boundaries and text ends before it; it is link text when the latest
    mark before it is :data:`LINK_START` rather than :data:`LINK_END`, a block boundary or a text end (a link
    never runs past its block).
    """
    data = np.frombuffer(buffer, dtype=np.uint8, count=int(ends[-1]) + 1)
    word = data > _SEPARATOR
    # Where runs of word bytes start and end, alternately (the last byte is a text's closing space: every word
    # that starts ends before it).
    edges = np.flatnonzero(word[1:] != word[:-1]) + 1
    if word[0]:
        edges = np.concatenate(([0], edges))
    starts = edges[::2]
    lengths = edges[1::2] - starts
    marks = np.flatnonzero(data < _SEPARATOR)
    codes = data[marks]
    is_boundary = codes == BLOCK
    boundaries = marks[is_boundary]
    # The first word after each mark and after each text end.
    mark_after = np.searchsorted(starts, marks)
    end_after = np.searchsorted(starts, ends)
    # Each boundary and text end steps the block number up at the first word after it.
    steps = np.bincount(np.concatenate((mark_after[is_boundary], end_after)), minlength=starts.size + 1)
    block = np.cumsum(steps[: starts.size])
    opens = codes == LINK_START
    if opens.any():
        # What the marks and text ends before each word say, carried forward over the words after none: the last
        # mark before a word says link text when it opens a link and no text end lies between them (the first
        # end after it comes before a later word); a text end alone says not.
        next_end = np.searchsorted(ends, marks)
        says = opens & (end_after[next_end] > mark_after)
        last = np.ones(marks.size, dtype=bool)
        np.not_equal(mark_after[1:], mark_after[:-1], out=last[:-1])
        said = np.full(starts.size + 1, -1, dtype=np.int8)
        said[end_after] = 0
        said[mark_after[last]] = says[last]
        at = np.where(said >= 0, np.arange(starts.size + 1), 0)
        np.maximum.accumulate(at, out=at)
        in_link = said[at[: starts.size]] == 1
    else:
        in_link = np.zeros(starts.size, dtype=bool)
    return starts, lengths, block, in_link, boundaries


def _block_hashes(words: np.ndarray, in_link: np.ndarray, block: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each block's hash from its words' hashes and whether each is link text (see the module doc); ``block`` is
    non-decreasing, ``counts`` the words of each block."""
    total = counts.size
    hashes = np.zeros(total, dtype=np.uint64)
    if words.size == 0:
        return hashes
    first = np.cumsum(counts) - counts  # each block's first word (words of a block are contiguous)
    rank = np.arange(1, words.size + 1, dtype=np.int64) - first[block]
    key = rank.astype(np.uint64)
    key *= _RANK
    key ^= words
    if in_link.any():
        key ^= in_link.astype(np.uint64) * _LINK
    fmix64_inplace(key)
    running = np.cumsum(key, dtype=np.uint64)
    present = counts > 0
    last = first + counts - 1
    before = np.where(first > 0, running[np.maximum(first - 1, 0)], np.uint64(0))
    hashes[present] = running[last[present]] - before[present]
    return hashes


def link_blocks(blocks: Blocks) -> np.ndarray:
    """``bool[n]``: the link blocks, blocks with words of which at least :data:`LINK_SHARE` (in bytes) is link
    text."""
    is_link: np.ndarray = (blocks.counts > 0) & (blocks.link_chars >= LINK_SHARE * blocks.chars)
    return is_link


def link_lists(blocks: Blocks, is_link: np.ndarray | None = None) -> np.ndarray:
    """``bool[n]``: the blocks that belong to a link list (see the module doc): runs of at least
    :data:`LINK_RUN` link blocks, where blocks without words neither count nor break a run. ``is_link``: the
    page's :func:`link_blocks`, when known."""
    out = np.zeros(blocks.counts.size, dtype=bool)
    if not blocks.link_chars.any():  # no link text (plain text): no link block
        return out
    rows = np.flatnonzero(blocks.counts > 0)
    if rows.size == 0:
        return out
    runs = (link_blocks(blocks) if is_link is None else is_link)[rows]
    # Label each run of link blocks (among the blocks with words) and count its members.
    previous = np.zeros(runs.size, dtype=bool)
    previous[1:] = runs[:-1]
    run_of = np.cumsum(runs & ~previous)
    lengths = np.bincount(run_of[runs], minlength=int(run_of[-1]) + 1)
    out[rows[runs & (lengths[run_of] >= LINK_RUN)]] = True
    return out


def own_blocks(blocks: Blocks, template: np.ndarray | None = None, passage_share: float | None = None) -> np.ndarray:
    """``bool[n]``: the blocks of what the page says itself (see the module doc), its host's template being
    ``template`` (sorted uint64 block hashes; None: none known); with ``passage_share`` (:func:`prose_share`),
    only its :func:`passages` of prose when it has such passages holding that share of its words, else, when it
    has at least :data:`MIN_PASSAGE_WORDS` words of prose, all of it but its :func:`link_blocks` (None: read
    whole)."""
    return own_selection(blocks, template, passage_share)[0]


def prose_share(article: bool, marked: bool, template: np.ndarray | None) -> float:
    """The least share of a page's own words (link blocks and the blocks right after them aside) that its
    :func:`passages` of prose must hold for the page to be read for them alone.

    :data:`PASSAGES_OF_PAGE` on an article page and on a page that marks nothing and has no host template (a print
    version, a host of a few pages). :data:`PASSAGES_UNDER_TEMPLATE` on a page that marks nothing, read under its
    host's ``template`` (sorted uint64 block hashes; None or empty: none known). :data:`PASSAGES_OF_MAIN` in the
    main content a page marks without declaring itself an article (a documentation page, a post in ``<main>``):
    there, signatures, tables and lists are content, and only a part that is nearly all prose is cut."""
    if marked and not article:
        return PASSAGES_OF_MAIN
    return PASSAGES_UNDER_TEMPLATE if _known(template) else PASSAGES_OF_PAGE


def own_selection(blocks: Blocks, template: np.ndarray | None = None,
                  passage_share: float | None = None) -> tuple[np.ndarray, bool]:
    """:func:`own_blocks` and :func:`thin` in one pass."""
    has_words = blocks.counts > 0
    own = has_words & ~_in_template(blocks.hashes, template)
    is_link = link_blocks(blocks) if blocks.link_chars.any() else None  # None: no link text (plain text)
    keep = own & ~link_lists(blocks, is_link)
    words = int(blocks.counts[keep].sum())
    if words >= MIN_OWN_WORDS:
        if passage_share is None or is_link is None:
            return keep, False
        kept = passages(blocks, keep, is_link, passage_share)
        if kept is None and int(blocks.counts[_prose_blocks(blocks, keep)].sum()) >= MIN_PASSAGE_WORDS:
            # Read whole, a page with prose still leaves out its link blocks, as its passages would (a short
            # article's print bar and share buttons, a "next post" link): a lone link block is the page's chrome,
            # while a page's content made of links (an index) is a link list, or its text is not prose.
            kept = keep & ~is_link
        return (keep if kept is None else kept), False
    return (own if own.any() else has_words), words > 0


def passages(blocks: Blocks, keep: np.ndarray, is_link: np.ndarray | None = None,
             of_page: float = PASSAGES_OF_PAGE) -> np.ndarray | None:
    """``bool[n]``: the blocks of ``keep`` that lie in the page's passages of prose, or None when it has no
    passage to trust and is read whole (docs/content.md, "How auto reads a page", step 5; :func:`own_blocks` then
    still leaves out the link blocks of a page with prose).

    A prose block has at least :data:`PROSE_CHARS` word bytes, under :data:`PROSE_LINK_SHARE` of them in links.
    Prose blocks with at most :data:`PASSAGE_GAP` words of link blocks (in link lists or not) between them form a
    passage, which spans from its first prose block to its last, the blocks between them included (subheadings, list
    items, short paragraphs), link blocks excluded. A passage whose prose blocks mostly (:data:`TEASER_SHARE`)
    follow a link block is a list of teasers and counts for nothing, and a passage ends at its last prose block that
    does not follow a link block. The largest passage is kept with every passage of at least :data:`PASSAGE_SHARE`
    of its prose words. None when the prose is too little to trust: the largest passage under
    :data:`MIN_PASSAGE_WORDS` words; fewer than :data:`MIN_PROSE_BLOCKS` prose blocks kept and under
    :data:`LONE_PROSE_WORDS` words (a sidebar's blurb); the passages under ``of_page`` (:data:`PASSAGES_OF_PAGE`;
    see :func:`prose_share`) of the words of ``keep`` that are neither link blocks nor right after one (a table or a
    list, whose prose is a sidebar's); and on pages without link text (plain text: every line is what the text
    says). ``is_link``: the page's :func:`link_blocks`, when known.
    """
    counts = blocks.counts
    if not blocks.link_chars.any():
        return None
    prose = np.flatnonzero(_prose_blocks(blocks, keep))
    if prose.size == 0 or int(counts[prose].sum()) < MIN_PASSAGE_WORDS:
        return None
    link_block = link_blocks(blocks) if is_link is None else is_link
    worded = np.flatnonzero(counts > 0)
    after_link = np.zeros(counts.size, dtype=bool)
    after_link[worded[1:]] = link_block[worded[:-1]]
    # Words of the link blocks between two prose blocks, link lists included: a menu between an article and a footer's
    # blurb parts them, though it is no longer part of the page's own text.
    apart = np.cumsum(np.where(link_block, counts, 0))
    between = apart[prose[1:] - 1] - apart[prose[:-1]]
    cut = np.flatnonzero(between > PASSAGE_GAP) + 1
    first = np.concatenate(([0], cut))  # each passage's first prose block (an index into `prose`)
    # A passage ends at its last prose block that does not follow a link block: teasers after an article go
    # (before the passage is measured, so that a footer's teasers do not make the article before them a list).
    end = np.append(cut, prose.size) - 1
    plain = np.where(~after_link[prose], np.arange(prose.size), -1)
    last = np.maximum(np.maximum.accumulate(plain)[end], first)
    size = _sums(counts[prose], first, last)
    teasers = _sums(after_link[prose].astype(np.int64), first, last) >= TEASER_SHARE * (last - first + 1)
    size[teasers] = 0
    if int(size.max()) < MIN_PASSAGE_WORDS:
        return None
    chosen = size >= PASSAGE_SHARE * size.max()
    if int((last[chosen] - first[chosen] + 1).sum()) < MIN_PROSE_BLOCKS and size.max() < LONE_PROSE_WORDS:
        return None
    out: np.ndarray = keep & _spans(counts.size, prose[first[chosen]], prose[last[chosen]]) & ~link_block
    # The share is of what could be the page's text: link blocks and what follows them (teasers under their
    # headlines) are not.
    if counts[out].sum() < of_page * counts[keep & ~link_block & ~after_link].sum():
        return None
    return out


def _prose_blocks(blocks: Blocks, keep: np.ndarray) -> np.ndarray:
    """``bool[n]``: the prose blocks of ``keep``: at least :data:`PROSE_CHARS` word bytes, under
    :data:`PROSE_LINK_SHARE` of them link text."""
    chars = blocks.chars
    prose: np.ndarray = keep & (chars >= PROSE_CHARS) & (blocks.link_chars < PROSE_LINK_SHARE * chars)
    return prose


def _sums(values: np.ndarray, firsts: np.ndarray, lasts: np.ndarray) -> np.ndarray:
    """The sums of ``values[firsts[i] .. lasts[i]]`` (inclusive; ``lasts >= firsts``)."""
    running = np.concatenate(([0], np.cumsum(values)))
    sums: np.ndarray = running[lasts + 1] - running[firsts]
    return sums


def _spans(n: int, firsts: np.ndarray, lasts: np.ndarray) -> np.ndarray:
    """``bool[n]``: the union of the ranges ``firsts[i] .. lasts[i]`` (inclusive; empty where ``lasts[i] <
    firsts[i]``)."""
    valid = lasts >= firsts
    edges = np.zeros(n + 1, dtype=np.int64)
    np.add.at(edges, firsts[valid], 1)
    np.add.at(edges, lasts[valid] + 1, -1)
    inside: np.ndarray = np.cumsum(edges[:-1]) > 0
    return inside


def thin(blocks: Blocks, template: np.ndarray | None = None) -> bool:
    """Whether the page says fewer than :data:`MIN_OWN_WORDS` words of its own, but some: left without its
    host's template and its link lists, it holds 1 to ``MIN_OWN_WORDS - 1`` words (its link lists then come back
    into what it is sketched on)."""
    return own_selection(blocks, template)[1]


def own_words(blocks: Blocks, template: np.ndarray | None = None, passage_share: float | None = None) -> np.ndarray:
    """``bool[w]``: the words of the blocks :func:`own_blocks` keeps."""
    return own_blocks(blocks, template, passage_share)[blocks.block] if blocks.block.size else np.zeros(0, dtype=bool)


def own_text(blocks: Blocks, template: np.ndarray | None = None, passage_share: float | None = None) -> bytes:
    """The normalized text of what the page says itself (its words of :func:`own_words`, single spaces)."""
    return blocks.text(own_words(blocks, template, passage_share))


def _known(template: np.ndarray | None) -> TypeGuard[np.ndarray]:
    """Whether ``template`` holds any block (None and an empty array: no template known)."""
    return template is not None and template.size > 0


def _in_template(hashes: np.ndarray, template: np.ndarray | None) -> np.ndarray:
    if _known(template):
        at = np.minimum(np.searchsorted(template, hashes), template.size - 1)
        found: np.ndarray = template[at] == hashes
        return found
    return np.zeros(hashes.size, dtype=bool)
