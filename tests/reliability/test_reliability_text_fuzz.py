"""Hostile input to the text path: ``normalize``, ``clean_text``, ``html_to_text`` and ``Sketcher.sketch`` /
``sketch_many`` on arbitrary Unicode (lone surrogates, NUL, controls, 18-fold NFKC expansions), bytes and
generated markup: they never raise, are deterministic, and a batch gives what single calls give. Plus the
binary-content detector and the caps' own invariants.
"""

from __future__ import annotations

import gzip
import io
import random
import unicodedata
import zipfile
import zlib
from collections.abc import Callable
from typing import Any
from unittest import mock

import numpy as np
import pytest
from fuzzing import EXAMPLES, content, hostile_text, markup
from hypothesis import given, settings
from hypothesis import strategies as st
from reliability_kit import Ledger

from scrapy_neardup.core import normalize as normalize_module
from scrapy_neardup.core import tag_scan
from scrapy_neardup.core import text as text_module
from scrapy_neardup.core.html import html_to_text
from scrapy_neardup.core.normalize import normalize
from scrapy_neardup.core.sketch import Sketch, Sketcher
from scrapy_neardup.core.text import clean_text, looks_binary

SKETCHERS = [Sketcher(), Sketcher(shingle="char", num_perm=64, seed=7)]
_COUNTS: dict[str, int] = {}


def counted(name: str) -> None:
    _COUNTS[name] = _COUNTS.get(name, 0) + 1


def same(a: Sketch, b: Sketch) -> bool:
    return a == b and a.num_shingles == b.num_shingles and a.truncated == b.truncated


def _is_clean(normalized: str) -> bool:
    return (
        normalized == normalized.strip() and "  " not in normalized
        and normalized.encode("utf-8", errors="strict") is not None  # no lone surrogate survives
        and not any(unicodedata.category(c) == "Cc" for c in normalized.replace(" ", ""))
    )


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.one_of(hostile_text, markup))
def test_fuzz_normalize_never_raises_and_gives_clean_words(text: str) -> None:
    counted("normalize")
    out = normalize(text)
    assert out == normalize(text) and _is_clean(out)


@settings(max_examples=EXAMPLES, deadline=None)
@given(content, st.sampled_from([None, True, False]), st.one_of(st.none(), st.integers(1, 400)))
def test_fuzz_clean_text_never_raises_and_caps_are_exact(raw: Any, is_html: bool | None, cap: int | None) -> None:
    counted("clean_text")
    default = clean_text(raw, is_html)
    assert default == clean_text(raw, is_html)
    assert _is_clean(default.text)
    if cap is None:
        return
    capped = clean_text(raw, is_html, max_chars=cap)
    assert _is_clean(capped.text)
    size = len(raw) if isinstance(raw, str) else len(bytes(raw))
    if isinstance(raw, str) and size > cap or not isinstance(raw, str) and size > 4 * cap:
        assert capped.truncated
    if not capped.truncated:  # no cap applied: exactly what the default cap gives
        assert capped == default


@settings(max_examples=EXAMPLES, deadline=None)
@given(markup)
def test_fuzz_html_to_text_never_raises(document: str) -> None:
    counted("html_to_text")
    for mode in ("body", "main"):
        out = html_to_text(document, mode)
        assert isinstance(out, str) and out == html_to_text(document, mode)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(content, min_size=1, max_size=6), st.sampled_from([None, True, False]), st.sampled_from(SKETCHERS))
def test_fuzz_sketch_never_raises_deterministic_and_batch_equals_single(
    pages: list[Any], is_html: bool | None, sketcher: Sketcher
) -> None:
    counted("sketch")
    batch = sketcher.sketch_many(pages, is_html=is_html)
    single = [sketcher.sketch(page, is_html=is_html) for page in pages]
    again = sketcher.sketch_many(pages, is_html=is_html)
    assert len(batch) == len(pages)
    for a, b, c in zip(batch, single, again, strict=True):
        assert same(a, b) and same(a, c)
        assert a.signature.shape == (sketcher.num_perm,) and a.tag == sketcher.tag
        assert a.empty == (a.num_shingles == 0)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.text(st.sampled_from(["a", "é", "\u0301", "\ufdfa", "ﬁ", "\u1100", "\u1161", "Å", "\u212b",
                                        "\uff21", "\u0338", "="]), max_size=8), max_size=40))
def test_fuzz_nfkc_in_pieces_equals_nfkc_of_the_whole(words: list[str]) -> None:
    """Pieces end before an ASCII character, so they normalize exactly as the whole text (tiny pieces here:
    8 characters, as long as the longest run without ASCII, so that no piece has to be cut elsewhere)."""
    counted("nfkc_pieces")
    text = " ".join(words)
    with mock.patch.object(normalize_module, "_NFKC_PIECE", 8):
        out, cut = normalize_module._nfkc(text, max_chars=10**9)
    assert not cut and out == unicodedata.normalize("NFKC", text)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.text(st.sampled_from(["<", "a", " ", ">", "é"]), max_size=200), st.integers(1, 30))
def test_fuzz_tag_cap_keeps_a_prefix_with_at_most_max_tags(document: str, max_tags: int) -> None:
    counted("tag_cap")
    data = document.encode("utf-8")
    out, tags, cut = text_module._cap_tags(data, max_tags)
    assert data.startswith(out) and out.count(b"<") <= max_tags
    assert tags.tolist() == [i for i, byte in enumerate(out) if byte == ord("<")]
    assert cut == (document.count("<") > max_tags)
    if cut:
        assert data[len(out)] == ord("<") and out.count(b"<") == max_tags
    out.decode("utf-8")  # never a character cut in two


# -- markup past the parser's limits -----------------------------------------------------------------------------

HEADER = "<html><body><p>Welcome to the example forum where people talk about things every day</p>"


@settings(max_examples=max(20, EXAMPLES // 4), deadline=None)
@given(st.integers(200, 3000), st.sampled_from(["font", "b", "span", "div", "i", "a"]), st.integers(0, 10**6))
def test_fuzz_deep_nesting_loses_no_text(depth: int, tag: str, seed: int) -> None:
    """Unclosed elements nested deeper than libxml2's limits (256 by default, 2048 with huge_tree) used to end
    the document silently: the text after them was lost, and pages differing only there became duplicates."""
    counted("deep_nesting")
    tail = f"unique tail words {seed} alpha beta gamma delta"
    document = HEADER + f"<{tag}>" * depth + f"<p>{tail}</p><script>var hidden = 1;</script>"
    text = normalize(html_to_text(document))
    assert text.endswith(normalize(tail)) and "hidden" not in text


@pytest.mark.parametrize("depth", [300, 3000])
def test_pages_differing_after_deep_nesting_are_not_duplicates(depth: int) -> None:
    a = HEADER + "<font>" * depth + "<p>first page: alpha beta gamma delta epsilon zeta eta theta</p>"
    b = HEADER + "<font>" * depth + "<p>second page: one two three four five six seven eight nine</p>"
    x, y = Sketcher().sketch_many([a, b])
    assert x.fingerprint != y.fingerprint and x.shared_positions(y) < 107


# HTML5 tree building is quadratic on such markup: without the scan these take minutes and gigabytes.
QUADRATIC_MARKUP = {
    "nested divs": lambda n: "<div>" * n,
    "nested lists": lambda n: "<ul><li>" * n,
    "distinct fonts": lambda n: "".join(f"<font id={i}>" for i in range(n)),
    "re-opened bold": lambda n: "".join(f"<p><b id={i}>x" for i in range(n)),
    "made-up void-like names": lambda n: "<brx>" * n + "<div>" * n,
    # End tags of another name close nothing: every span stays open, and each </div> searches the whole stack.
    "stray end tags of another name": lambda n: "<span></div>" * n,
    "re-opened bold behind stray end tags": lambda n: "".join(f"<p><b id={i}></i>x" for i in range(n)),
    # Self-closing tags open nothing in SVG, but they do once the parser reads HTML again (after a name that breaks
    # out of foreign content, inside an integration point, after an end tag that closes the svg's parent): these
    # nest 20,000 deep, as "<div>" * n does; in a foreignObject, parse time grows 16-fold for 4 times the tags.
    # (The stray "</svg>" lets the tag stripper, which drops an svg's content, read the tail.)
    "self-closing tags after a paragraph breaks out of svg": lambda n: "<svg><p>" + "<x-y/>" * n + "</svg>",
    "self-closing tags in a foreignObject": lambda n: "<svg><foreignObject>" + "<div/>" * n + "</svg>",
    "self-closing tags after the svg's parent closed": lambda n: "<div><svg></div>" + "<x-y/>" * n + "</svg>",
    # A "/" that ends an unquoted attribute value, or a "/>" inside a quoted one, closes nothing in SVG either.
    "slashes ending unquoted values in svg": lambda n: "<svg>" + "<g a=/>" * n + "<g a= />" * n + "</svg>",
    "slashes inside quoted values in svg": lambda n: "<svg>" + "<g a=\"/>\">" * n + "<g b='x/>'>" * n + "</svg>",
    "self-closing svg roots": lambda n: "<svg/>" + "<x-y/>" * n + "</svg>",
    "an svg in a comment": lambda n: "<!-- <svg> -->" + "<x-y/>" * n,
    "an svg in a script": lambda n: "<script>var s = '<svg>';</script>" + "<x-y/>" * n,
    "a self-closing svg root with both quotes": lambda n: "<svg a='\"'/>" + "<x-y/>" * n + "</svg>",
    "an HTML element named like svg": lambda n: "<svg:x>" + "<x-y/>" * n + "</svg>",
}


@pytest.mark.parametrize("kind", list(QUADRATIC_MARKUP))
def test_markup_quadratic_for_html5_parsers_takes_the_tag_stripper(kind: str) -> None:
    document = QUADRATIC_MARKUP[kind](20_000) + "<p>unique tail words alpha beta</p><script>var hidden = 1;</script>"
    assert _hazard(document)
    cleaned = clean_text(document, is_html=True)
    assert cleaned.text.endswith("unique tail words alpha beta") and "hidden" not in cleaned.text


@pytest.mark.parametrize("markup_", ["<div>x</div>" * 20_000, "<p>x<br><img src=a.png>" * 20_000,
                                     "<ul><li>a<li>b</ul>" * 5000, "<b>bold</b> <i>it</i> " * 20_000,
                                     "<svg><g>" + '<rect x="1" y="2" width="3" height="4"/>' * 20_000 + "</g></svg>",
                                     "<math>" + "<mspace width='1em' />" * 20_000 + "</math>"])
def test_ordinary_markup_is_parsed(markup_: str) -> None:
    assert not _hazard(markup_)


def test_a_page_with_an_inline_chart_is_read_for_its_main_content() -> None:
    """A chart of a thousand self-closing SVG bars inside ``<main>`` (the Go blog's survey results) is an ordinary
    page: its main content is read, without the menu (the scan once took every ``<rect/>`` for an open element and
    sent the page to the tag stripper, menu and all)."""
    bars = "".join(f'<rect x="{i}" y="0" width="1" height="{i % 7}"/>' for i in range(1500))
    document = ("<html><body><nav><a href=/>home</a> <a href=/blog>blog</a> menuword</nav><main><h1>Survey results"
                "</h1><p>Most respondents use the language at work and at home.</p><svg><style>.b{fill:red}</style>"
                f"<g>{bars}</g><text x=1 y=2>chart label</text></svg><p>Closing words of the post.</p></main>"
                "</body></html>")
    assert not _hazard(document)
    for mode in ("main", "auto"):
        cleaned = clean_text(document, is_html=True, mode=mode)
        assert "menuword" not in cleaned.text and "closing words of the post" in cleaned.text, mode
        assert "chart label" not in cleaned.text, mode
    assert clean_text(document, is_html=True, mode="auto").marked


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["div", "span", "b", "x-y", "table"]), st.booleans()), max_size=80))
def test_fuzz_open_element_bound_is_the_sum_of_each_names_reflected_walk(tags: list[tuple[str, bool]]) -> None:
    """The scan's bound, against its definition walked tag by tag: an end tag closes only its own name."""
    open_by_name: dict[str, int] = {}
    expected = 0
    for name, closing in tags:
        open_by_name[name] = max(0, open_by_name.get(name, 0) + (-1 if closing else 1))
        expected = max(expected, sum(open_by_name.values()))
    keys = np.array([tag_scan.name_key(name) for name, _ in tags], dtype=np.uint64)
    closing_ = np.array([closing for _, closing in tags], dtype=bool)
    assert tag_scan.open_max(keys, closing_) == expected


def _hazard(document: str) -> bool:
    raw = document.encode()
    tags = text_module._cap_tags(raw, 10**6)[1]
    scan = tag_scan.TagScan.of(raw, tags) if tags.size > tag_scan.SAFE_TAGS else None
    return tag_scan.parse_hazard(scan, raw, tags)[0]


def test_a_text_node_over_10_mb_is_kept_whole() -> None:
    """libxml2 drops a text node over 10 MB without huge_tree: a 6M-character Cyrillic paragraph is 12 MB."""
    document = "<html><body><p>" + "слово " * 1_000_000 + "конец</p></body></html>"
    assert normalize(html_to_text(document)).endswith(normalize("слово конец"))


# -- binary content -----------------------------------------------------------------------------------------------


def _png() -> bytes:
    import struct

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rng = random.Random(1)
    pixels = b"".join(b"\x00" + rng.randbytes(3 * 64) for _ in range(64))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 64, 64, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(pixels)) + chunk(b"IEND", b""))


def _pdf() -> bytes:
    stream = zlib.compress(b"BT /F1 12 Tf 72 712 Td (" + b"Hello near-duplicate world " * 200 + b") Tj ET")
    return (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n"
            b"4 0 obj\n<< /Length " + str(len(stream)).encode() + b" /Filter /FlateDecode >>\nstream\n"
            + stream + b"\nendstream\nendobj\ntrailer\n<< /Root 1 0 R >>\n%%EOF\n")


def _zip() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("word/document.xml", "<w:document>" + "text " * 500 + "</w:document>")
    return out.getvalue()


ARTICLE = ("The harbour bridge reopened on Monday after two years of repairs, and commuters crossed it before "
           "dawn. ") * 40
FRENCH = "Le pont du port a rouvert lundi après deux années de travaux; les habitués étaient là dès l'aube. " * 40
BINARY_SAMPLES: dict[str, Callable[[], bytes]] = {
    "pdf": _pdf,
    "png": _png,
    "gzip": lambda: gzip.compress(ARTICLE.encode()),
    "zip/docx": _zip,
    "jpeg header": lambda: b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + random.Random(2).randbytes(4000),
    "gif": lambda: b"GIF89a\x40\x00\x40\x00\xf7\x00\x00" + random.Random(3).randbytes(4000),
    "random bytes": lambda: random.Random(4).randbytes(20000),
    "utf-16 text": lambda: ARTICLE.encode("utf-16"),
    "elf": lambda: b"\x7fELF\x02\x01\x01" + bytes(9) + random.Random(5).randbytes(3000),
}
TEXT_SAMPLES: dict[str, Any] = {
    "ascii": ARTICLE,
    "utf-8 bytes": ("Мост в гавани снова открыт после двух лет ремонта. 港の橋が再開した。" * 50).encode(),
    "html": f"<html><body><p>{ARTICLE}</p></body></html>",
    "latin-1 bytes (a few undecodable)": FRENCH.encode("latin-1"),
    "text with one NUL and a surrogate": "lone \ud800 and NUL \x00 " + ARTICLE,
    "empty": "",
    "empty bytes": b"",
    "emoji": "😀 " * 100,
}


@pytest.mark.parametrize("name", list(BINARY_SAMPLES))
def test_binary_formats_are_recognized(name: str) -> None:
    data = BINARY_SAMPLES[name]()
    assert looks_binary(data)
    assert looks_binary(bytearray(data)) and looks_binary(memoryview(data))
    # The same bytes decoded by a spider (response.text of a mislabelled body) are recognized too.
    assert looks_binary(data.decode("utf-8", errors="replace"))
    assert looks_binary(data.decode("latin-1"))
    assert looks_binary(data.decode("cp1252", errors="replace"))


@pytest.mark.parametrize("name", list(TEXT_SAMPLES))
def test_text_is_not_taken_for_binary(name: str) -> None:
    assert not looks_binary(TEXT_SAMPLES[name])


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.text(st.characters(categories=["L", "M", "N", "P", "S", "Zs"], exclude_characters="\ufffd"), max_size=3000))
def test_fuzz_printable_text_is_never_binary(text: str) -> None:
    counted("printable_not_binary")
    assert not looks_binary(text) and not looks_binary(text.encode("utf-8", errors="surrogatepass"))


@settings(max_examples=EXAMPLES, deadline=None)
@given(content)
def test_fuzz_binary_detection_never_raises(raw: Any) -> None:
    counted("looks_binary")
    assert looks_binary(raw) in (True, False)


def test_text_fuzz_tally(ledger: Ledger) -> None:
    if not _COUNTS:
        pytest.skip("the fuzz tests did not run")
    total = sum(_COUNTS.values())
    ledger.record(f"{total} generated inputs through the text path ("
                  + ", ".join(f"{k}: {v}" for k, v in _COUNTS.items()) + ")", lost=0,
                  notes="no exception, deterministic, batch == single")
