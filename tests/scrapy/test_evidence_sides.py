"""Both sides of a drop's evidence in a real crawl over 127.0.0.1: what of the dropped page and of the kept page was
sketched (``sketched``/``words``/``removed``, ``kept_sketched``/``kept_words``/``kept_removed``), with the embedded
store (also in a later crawl on its saved state) and with the Elasticsearch backend on a real node, whose search
index then gives the same sides in a collapsed search's evidence.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from neardup_testkit import Page

from es_integration.collapse import search_with_collapse
from scrapy_neardup.core.sketch import Sketcher

ADDON = {"scrapy_neardup.NearDuplicateAddon": 0}
WORDS = [f"word{i}x" for i in range(300)]
OTHER = [f"other{i}y" for i in range(300)]
#: The kept page's template: a list of 40 links of 3 words each (120 words), left out of what is sketched.
LINKS = 40
#: A page marking its main content, around it a header of 9 words, a footer of 6 and a link of 1 (16 words left
#: out); its copy without marks and a <nav> of 10 words.
HEADER, FOOTER, NAV = "The Daily Example news site for all readers today", "Copyright the example all rights here", (
    "home world sport weather arts science business travel food contact")


def _paragraphs(words: list[str]) -> str:
    return "".join(f"<p>{' '.join(words[i : i + 30])}</p>" for i in range(0, len(words), 30))


def site() -> dict[str, Page]:
    """``/`` -> ``/kept.html`` (the article and a list of 40 links, one of them to the copy) -> ``/copy.html``
    (the same article alone: nothing to remove)."""
    links = "".join(f'<li><a href="/{"copy.html" if i == 0 else f"gone{i}.html"}">related story {i}</a></li>'
                    for i in range(LINKS))
    return {
        "/": Page('<html><body><p>start here</p><a href="/kept.html">the article</a>'
                  '<a href="/marked.html">the other</a></body></html>'),
        "/kept.html": Page(f"<html><body><ul>{links}</ul>{_paragraphs(WORDS)}</body></html>"),
        "/copy.html": Page(f"<html><body>{_paragraphs(WORDS)}</body></html>"),
        "/marked.html": Page(f'<html><body><header>{HEADER}</header><main>{_paragraphs(OTHER)}</main>'
                             f'<footer>{FOOTER}</footer><a href="/marked-copy.html">x</a></body></html>'),
        "/marked-copy.html": Page(f"<html><body><nav>{NAV}</nav>{_paragraphs(OTHER)}</body></html>"),
    }


def check_marked_sides(fields: dict[str, Any], pages: dict[str, Page]) -> None:
    """The copy: its own text, 300 of 310 words (its <nav> removed: 0.03); the kept page: its main content, 300 of
    316 words (header, footer and link: 0.05); as sketching the served pages gives."""
    kept, copy = Sketcher().sketch_many([pages["/marked.html"].body, pages["/marked-copy.html"].body])
    assert (kept.sketched, kept.words, kept.page_words) == ("main content", 300, 316)
    assert (copy.sketched, copy.words, copy.page_words) == ("own text", 300, 310)
    assert (fields["sketched"], fields["words"], fields["removed"]) == ("own text", 300, round(1 - 300 / 310, 2))
    assert (fields["kept_sketched"], fields["kept_words"], fields["kept_removed"]) == (
        "main content", 300, round(1 - 300 / 316, 2))


def drops_by_url(dropped: list[dict[str, Any]], base: str) -> dict[str, dict[str, Any]]:
    """Each near-duplicate drop by its path, checked to name its kept page."""
    drops = {d["item"]["url"][len(base):]: d for d in dropped if d["reason"] == "NearDuplicateDropped"}
    assert {path: d["duplicate_of"][len(base):] for path, d in drops.items()} == {
        "/copy.html": "/kept.html", "/marked-copy.html": "/marked.html"}
    return drops


def check_sides(fields: dict[str, Any], pages: dict[str, Page]) -> None:
    """The sides named are what the pages are: the copy's 300 words whole; the kept page's 300 of its 420 words
    (the link list removed: 120 of 420 = 0.29); and the same as sketching the served pages gives."""
    kept, copy = Sketcher().sketch_many([pages["/kept.html"].body, pages["/copy.html"].body])
    assert (kept.words, kept.page_words, copy.words, copy.page_words) == (300, 300 + 3 * LINKS, 300, 300)
    assert fields["sketched"] == "own text" and fields["words"] == 300 and fields["removed"] == 0.0
    assert fields["kept_sketched"] == "own text" and fields["kept_words"] == 300
    assert fields["kept_removed"] == round(1 - 300 / (300 + 3 * LINKS), 2) == 0.29


def test_a_drop_names_both_sides_with_the_embedded_store(run_crawl: Any, serve_site: Any, tmp_path: Any) -> None:
    pages = site()
    server = serve_site(pages)
    state = {"NEARDUP_STATE_DIR": str(tmp_path / "state")}
    result = run_crawl(settings={"ADDONS": ADDON, **state}, spider={"start_url": server.url + "/"})
    assert result.returncode == 0, result.log[-3000:]
    drops = drops_by_url(result.dropped, server.url)
    check_sides(drops["/copy.html"]["evidence"], pages)
    check_marked_sides(drops["/marked-copy.html"]["evidence"], pages)
    assert "kept: own text, 300 words, 29% removed" in drops["/copy.html"]["message"]
    # A later crawl on the saved state: the kept page's side comes from the store's files (mark mode, the field).
    again = run_crawl(settings={"ADDONS": ADDON, **state, "NEARDUP_ACTION": "mark"},
                      spider={"start_url": server.url + "/"}, name="again")
    assert again.returncode == 0, again.log[-3000:]
    marks = {i["url"][len(server.url):]: i["neardup"] for i in again.scraped if (i.get("neardup") or {}).get("rule")}
    assert set(marks) == {"/copy.html", "/marked-copy.html"}
    check_sides(marks["/copy.html"], pages)
    check_marked_sides(marks["/marked-copy.html"], pages)


@pytest.mark.es
def test_a_drop_names_both_sides_with_the_elasticsearch_backend(
    run_crawl: Any, serve_site: Any, es_url: str, es_client: Any,
) -> None:
    pages = site()
    server = serve_site(pages)
    crawler_index, search_index = (f"neardup-test-{uuid.uuid4().hex[:10]}" for _ in range(2))
    settings = {"ADDONS": ADDON, "NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": es_url,
                "NEARDUP_ES_INDEX": crawler_index, "NEARDUP_SEARCH_INDEX": search_index,
                "NEARDUP_SEARCH_DUPLICATES": "index"}
    try:
        result = run_crawl(settings=settings, spider={"start_url": server.url + "/"})
        assert result.returncode == 0, result.log[-3000:]
        drops = drops_by_url(result.dropped, server.url)
        check_sides(drops["/copy.html"]["evidence"], pages)
        check_marked_sides(drops["/marked-copy.html"]["evidence"], pages)
        # The kept page's document holds what was sketched of it.
        es_client.indices.refresh(index=crawler_index)
        (doc,) = es_client.search(index=crawler_index, query={"term": {"neardup.key": server.url + "/kept.html"}},
                                  size=1)["hits"]["hits"]
        assert {k: doc["_source"]["neardup"].get(k) for k in ("sketched", "words", "page_words")} == {
            "sketched": "own text", "words": 300, "page_words": 300 + 3 * LINKS}
        # A collapsed search of the search index names the hidden copy with both sides, from the stored fields.
        es_client.indices.refresh(index=search_index)
        found = search_with_collapse(es_client, search_index, {"query": {"match": {"text": "word7x"}}}, hidden=5)
        (hit,) = found.hits
        assert hit.source is not None and hit.source["url"] == server.url + "/kept.html"
        (fields,) = hit.evidence.values()
        check_sides(fields, pages)
    finally:
        for each in (crawler_index, f"{crawler_index}-hosts", f"{crawler_index}-templates", search_index):
            es_client.indices.delete(index=each, ignore_unavailable=True)
