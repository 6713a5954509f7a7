"""Normalization and HTML extraction."""

from __future__ import annotations

import pytest

from scrapy_neardup.core.html import html_to_text, looks_like_html
from scrapy_neardup.core.normalize import normalize
from scrapy_neardup.core.text import clean_text


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Hello,   World!", "hello world"),
        ("  tabs\tand\nnewlines\r\n ", "tabs and newlines"),
        ("ﬁne ① Straße", "fine 1 strasse"),  # NFKC ligature and circled digit; casefold ß
        ("ÅNGSTRÖM\u00a0unit", "angstrom unit"),  # NBSP is a space after NFKC; accents dropped
        # Cyrillic letters that look like Latin ones (in either case) fold to them; ё loses its diaeresis.
        ("Мама мыла раму — «ёлку»…", "mama mылa pamy eлky"),
        ("a\x00b\x07c\u2028d\x85e", "a b c d e"),  # controls and odd separators split words
        ("", ""),
        ("   \t\n ", ""),
    ],
)
def test_normalize(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


def test_normalize_survives_lone_surrogates() -> None:
    assert normalize("abc\ud800def\udfff") == "abc def"


def test_html_to_text_drops_scripts_styles_and_comments() -> None:
    html = """<!doctype html><html><head><title>T</title><style>.x{color:red}</style>
    <script>var secret = "do not index";</script></head>
    <body><p>first</p><p>second<!-- hidden --></p><noscript>enable js</noscript>
    <div>third<br>fourth</div></body></html>"""
    text = normalize(html_to_text(html))
    assert text == "t first second third fourth"


# Every way a dropped element's start tag can be spelled that the tokenizer still reads as that element.
DROPPED_SPELLINGS = [
    "<script>var hidden_a = 1;</script>", "<SCRIPT type=x>hidden_b()</SCRIPT>", "<Style\n>hidden_c{}</style>",
    "<noscript\t>hidden_d</noscript>", "<template>hidden_e</template>", "<svg/><svg><text>hidden_f</text></svg>",
    "<math><mi>hidden_g</mi></math>", "<iframe src=x>hidden_h</iframe>", "<object\r>hidden_i</object>",
    "<select name=country><option>hidden_j</option><OPTION selected>hidden_k</select>",
]


@pytest.mark.parametrize("spelling", [*DROPPED_SPELLINGS, "".join(DROPPED_SPELLINGS)])
@pytest.mark.parametrize("tags", [3, 400])  # below and above the size under which the tag scan is skipped
def test_dropped_elements_are_removed_on_small_and_scanned_pages(spelling: str, tags: int) -> None:
    html = "<html><body>" + "<p>keep words</p>" * tags + spelling + "<div>tail</div></body></html>"
    text = normalize(html_to_text(html))
    assert "hidden" not in text and text.endswith("keep words tail")
    main = normalize(html_to_text(html, mode="main"))
    assert "hidden" not in main and main.endswith("keep words tail")


def test_a_page_without_dropped_elements_keeps_all_its_text() -> None:
    html = ("<html><body>" + "<p>keep <b>words</b></p>" * 400
            + "<scripts>kept</scripts><svgx>too</svgx><selection>also</selection></body></html>")
    assert normalize(html_to_text(html)) == "keep words " * 400 + "kept too also"


def test_html_detection_and_bytes() -> None:
    assert looks_like_html("<html><body>x</body></html>")
    assert looks_like_html("  <P>paragraph</P>")
    assert not looks_like_html("a < b and c > d")
    cleaned = clean_text("<p>Caf\u00e9 au lait</p>".encode(), is_html=None)
    assert cleaned.text == "cafe au lait"
    assert clean_text(b"\xff\xfeinvalid utf8 \xc3(", is_html=False).text == "invalid utf8"


def test_clean_text_caps_and_flags_long_content() -> None:
    cleaned = clean_text("word " * 100, max_chars=50)
    assert cleaned.truncated
    assert cleaned.text == " ".join(["word"] * 10)
    assert not clean_text("short").truncated


def test_broken_html_does_not_raise() -> None:
    for html in ["<html><body><p>unclosed <b>bold", "<html>\x00<body>nul</body></html>", "<html></html>", "<p>"]:
        assert isinstance(clean_text(html, is_html=True).text, str)


PAGE = """<html><head><title>Site - Story</title></head><body>
<header><a href="/">Site</a> <nav><a href="/news">News</a> <a href="/sport">Sport</a></nav></header>
<div role="navigation">Breadcrumbs here</div>
<main><h1>The story</h1><p>First para<b>graph</b>.</p><aside>Related links</aside><p>Second.</p></main>
<footer>Copyright the site</footer></body></html>"""


def test_block_elements_separate_words_and_markup_never_glues_them() -> None:
    assert normalize(html_to_text("a</p><p>b")) == "a b"
    assert normalize(html_to_text("<ul><li>one</li><li>two</li></ul><table><tr><td>x</td><td>y</td></tr></table>")) == (
        "one two x y"
    )
    # Every element boundary separates, inline ones too (documented): extraction stays in C.
    assert normalize(html_to_text("<p>First para<b>graph</b></p>")) == "first para graph"


def test_content_modes() -> None:
    assert normalize(html_to_text(PAGE)) == (
        "site story site news sport breadcrumbs here the story first para graph related links second "
        "copyright the site"
    )
    assert normalize(html_to_text(PAGE, "main")) == "the story first para graph second"
    article = "<body><nav>menu</nav><article><p>one</p><article><p>two</p></article></article><p>rest</p></body>"
    assert normalize(html_to_text(article, "main")) == "one two"  # the outermost article, read once
    assert normalize(html_to_text("<body><nav>menu</nav><main> </main><p>body text</p></body>", "main")) == "body text"
    assert normalize(html_to_text("<frameset><frame src=a></frameset>", "main")) == ""
    # A boilerplate role on the root: the root stays (lexbor cannot remove it), the rest of the rule applies.
    rooted = "<html role=navigation><body><nav>menu</nav><main>hello world</main></body></html>"
    assert normalize(html_to_text(rooted, "main")) == "hello world"
    banner = "<html role=banner><body><aside>x</aside><p>only</p></body></html>"
    assert normalize(html_to_text(banner, "main")) == "only"
    assert clean_text(PAGE, mode="main").text == "the story first para graph second"
    assert clean_text("plain text, nav and all", mode="main").text == "plain text nav and all"
