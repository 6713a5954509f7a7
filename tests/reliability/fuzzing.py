"""Hypothesis strategies for hostile page content, shared by the fuzz tests.

``NEARDUP_FUZZ_EXAMPLES`` (default 200) sets the examples per property; raise it for a longer hunt, e.g.
``NEARDUP_FUZZ_EXAMPLES=5000 python -m pytest tests/reliability -k fuzz``.
"""

from __future__ import annotations

import html
import os
from typing import Any

from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("NEARDUP_FUZZ_EXAMPLES", "200"))

# Characters that broke or could break text tools: NUL and other controls, lone surrogates, noncharacters,
# BOMs, bidi overrides, line separators, an 18-character NFKC expansion (U+FDFA), combining marks, case-folding
# expansions, astral characters, markup syntax.
HOSTILE_CHARS = [
    "\x00", "\x01", "\x07", "\x1b", "\x7f", "\x85", "\x9f", "\u00a0", "\u00ad", "\u200b", "\u200d", "\u200e",
    "\u202e", "\u2028", "\u2029", "\ufeff", "\ufffd", "\ufffe", "\uffff", "\ud800", "\udbff", "\udc00", "\udfff",
    "\ufdfa", "\u0301", "\u0338", "\u1100", "\u1161", "ß", "İ", "ﬁ", "Σ", "ς", "\U0001f600", "\U0010ffff",
    "<", ">", "&", ";", '"', "'", "/", "=", "\t", "\n", "\r", " ", "a", "Z", "7", "_",
]

characters = st.one_of(st.characters(codec=None, exclude_categories=()), st.sampled_from(HOSTILE_CHARS))
hostile_text = st.text(characters, max_size=300)

TAGS = [
    "html", "head", "body", "title", "p", "div", "span", "a", "b", "br", "hr", "img", "script", "style", "noscript",
    "template", "svg", "math", "iframe", "object", "table", "tr", "td", "ul", "li", "pre", "h1", "article", "nav",
    "textarea", "xmp", "plaintext", "frameset", "x-custom", "main", "header", "footer", "aside",
]
FRAGMENTS = [
    "<!doctype html>", "<?xml version='1.0' encoding='latin-1'?>", '<meta charset="utf-16">', "<!--", "-->",
    "<![CDATA[", "]]>", "</", "<", ">", "&amp;", "&#0;", "&#xD800;", "&#1114112;", "&#x110000;", "&nbsp;", "&bogus;",
    "<script>", "</script>", "<style>", "</p>", "<p", "=", '"', "'", "\x00", "\ud800",
]


def _element(tag: str, attrs: list[tuple[str, str]], children: list[str], closed: bool) -> str:
    attributes = "".join(f' {name}="{html.escape(value)}"' for name, value in attrs)
    return f"<{tag}{attributes}>" + "".join(children) + (f"</{tag}>" if closed else "")


_roles = st.sampled_from(["navigation", "banner", "contentinfo", "complementary", "main"])
_attrs = st.lists(st.one_of(st.tuples(st.sampled_from(["class", "id", "href", "style", "on-click", "x"]), hostile_text),
                            st.tuples(st.just("role"), _roles)),  # the roles "main" content mode reads
                  max_size=2)


def _wrap(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.builds(_element, st.sampled_from(TAGS), _attrs, st.lists(children, max_size=4), st.booleans()),
        st.lists(children, max_size=4).map("".join),
    )


#: Documents: nested elements (closed or not) around hostile text, and loose fragments of markup syntax.
markup = st.one_of(
    st.recursive(st.one_of(hostile_text, st.sampled_from(FRAGMENTS)), _wrap, max_leaves=25),
    st.lists(st.one_of(hostile_text, st.sampled_from(FRAGMENTS)), max_size=20).map("".join),
)

#: Anything a text field may hold that the text path accepts: text, markup, bytes of either or of anything.
content = st.one_of(
    hostile_text,
    markup,
    st.binary(max_size=1500),
    markup.map(lambda s: s.encode("utf-8", errors="surrogatepass")),
    st.binary(max_size=300).map(bytearray),
    st.binary(max_size=300).map(lambda data: memoryview(data)),
)

#: JSON-compatible values of any shape (no NaN: it is not JSON), strings with lone surrogates included.
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), hostile_text),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(hostile_text, inner, max_size=3)),
    max_leaves=8,
)

#: Values a spider may put into an item's text field: anything at all.
field_values: st.SearchStrategy[Any] = st.one_of(
    content, json_values, st.sets(st.integers(), max_size=3), st.builds(object), st.just(b""), st.just(""),
    st.complex_numbers(allow_nan=False), st.tuples(hostile_text),
)
