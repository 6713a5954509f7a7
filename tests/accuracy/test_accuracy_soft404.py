"""Soft 404s under real templates: the probe's "not found" page against every real page of the site.

A soft-404 template is what a host answers with status 200 for a URL that cannot exist: its template around a
"not found" message. The soft-404 middleware compares each page with it as the pipeline compares pages
(``Sketcher()`` defaults, ``t`` of ``k``), page by page, without a host template (the verdict comes before the
spider sees the page). Here the "not found" page of each site is made from one of its real pages, the main content
replaced by a message naming the requested URL; it must match the not-found pages of other URLs (each side sketched
without the words of its own URL, as the middleware does), and no real page, short API stubs included, as served and
with the semantic markup stripped.
"""

from __future__ import annotations

import copy

import lxml.html
import pytest
from corpora import VARIANTS, Corpus, Variant, parse, serialize, strip_semantics
from labels import main_elements

from scrapy_neardup.core.sketch import Sketcher
from scrapy_neardup.core.soft404_templates import url_words
from scrapy_neardup.core.theory import min_shared_for

MESSAGE = ("Page not found. Sorry, the page {url} does not exist on this site: it may have moved, or the address "
           "may be mistyped. Go back to the home page or search the documentation.")
SITES = ("commons-lang3", "pydicom", "groonga", "rust-std", "log4cplus")


def not_found_page(corpus: Corpus, url: str, variant: Variant) -> bytes:
    """The site's template (from its first page) around the "not found" message for ``url``."""
    root = parse(corpus.pages[0].served)
    (main, *others) = main_elements(root, corpus.generator)
    for other in others:
        other.drop_tree()
    for child in list(main):
        main.remove(child)
    main.text = None
    message = lxml.html.fromstring(f"<p>{MESSAGE.format(url=url)}</p>")
    main.append(message)
    if variant == "stripped":
        root = copy.deepcopy(root)
        strip_semantics(root)
    return serialize(root)


@pytest.mark.parametrize("variant", VARIANTS)
def test_soft_404_template_matches_not_found_pages_and_no_real_page(
    variant: Variant, corpora: dict[str, Corpus],
) -> None:
    sketcher = Sketcher()
    t = min_shared_for(0.9, sketcher.num_perm)
    for name in SITES:
        corpus = corpora[name]
        probe_url = "http://site.test/neardup-soft404-probe-8f3a27c1d04e9b65"
        probe = sketcher.sketch(not_found_page(corpus, probe_url, variant), leave_out=url_words(probe_url))
        urls = ("http://site.test/old/page.html", "http://site.test/api/missing-thing.html?v=2", "http://site.test/x")
        others = sketcher.sketch_many([not_found_page(corpus, url, variant) for url in urls],
                                      leave_out=[url_words(url) for url in urls])
        assert all(other.shared_positions(probe) >= t for other in others), name
        pages = corpus.html(variant)
        sketches = sketcher.sketch_many([html for _, html in pages], leave_out=[url_words(key) for key, _ in pages])
        flagged = [key for (key, _), sketch in zip(pages, sketches, strict=True)
                   if not sketch.empty and sketch.shared_positions(probe) >= t]
        assert flagged == [], f"{name} {variant}: {len(flagged)} real pages look like the not-found page: {flagged[:3]}"
