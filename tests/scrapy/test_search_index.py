"""A crawl writing its items into a search index (NEARDUP_SEARCH_INDEX) on a real node, then searched collapsed.

Real crawls over 127.0.0.1 (``crawl_runner.py``, each in its own process) with the add-on, against the session's
node (fixture ``es_url``); the search index gets three primary shards from an index template of the test's own,
as a user's cluster would give it.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from neardup_testkit import Page, article_words, html_page, kinds_site

from es_integration.backend import doc_id_of
from es_integration.collapse import search_with_collapse

pytestmark = pytest.mark.es

ADDON = {"scrapy_neardup.NearDuplicateAddon": 0}


@pytest.fixture
def search_index(es_client: Any) -> Iterator[str]:
    """A fresh index name under an index template giving it three primaries and a mapping of the items' fields."""
    prefix = f"search-test-{uuid.uuid4().hex[:10]}"
    es_client.indices.put_index_template(
        name=prefix, index_patterns=[f"{prefix}-*"], priority=500,
        template={"settings": {"number_of_shards": 3, "number_of_replicas": 0},
                  "mappings": {"properties": {"url": {"type": "keyword"}, "title": {"type": "text"},
                                              "text": {"type": "text"}}}},
    )
    name = f"{prefix}-pages"
    yield name
    es_client.indices.delete(index=name, ignore_unavailable=True)
    es_client.indices.delete_index_template(name=prefix)


def drop_crawler_index(es_client: Any, index: str) -> None:
    """The crawler backend's index and its siblings (hosts' mirror counts, host templates)."""
    for each in (index, f"{index}-hosts", f"{index}-templates"):
        es_client.indices.delete(index=each, ignore_unavailable=True)


def search_settings(es_url: str, index: str, **extra: Any) -> dict[str, Any]:
    return {"ADDONS": ADDON, "NEARDUP_ES_URL": es_url, "NEARDUP_SEARCH_INDEX": index,
            "NEARDUP_SEARCH_DUPLICATES": "index", **extra}


def documents(es_client: Any, index: str) -> dict[str, dict[str, Any]]:
    """Every document of ``index`` by ``_id`` (with ``_version``)."""
    es_client.indices.refresh(index=index)
    hits = es_client.search(index=index, query={"match_all": {}}, size=1000, version=True)["hits"]["hits"]
    return {hit["_id"]: hit for hit in hits}


def near_duplicate_drops(result: Any) -> dict[str, str]:
    """Dropped near-duplicate URL -> the kept URL it names."""
    return {d["item"]["url"]: d["duplicate_of"] for d in result.dropped if d["reason"] == "NearDuplicateDropped"}


@pytest.mark.parametrize("backend", ["embedded", "elasticsearch"])
def test_a_crawl_fills_a_multi_shard_index_that_a_collapsed_search_shows_once_per_group(
    backend: str, es_url: str, es_client: Any, search_index: str, run_crawl: Any, serve_kinds_site: Any,
) -> None:
    site = kinds_site()
    server = serve_kinds_site(site)
    settings = search_settings(es_url, search_index)
    crawler_index = f"neardup-test-{uuid.uuid4().hex[:10]}"
    if backend == "elasticsearch":
        settings.update(NEARDUP_BACKEND="elasticsearch", NEARDUP_ES_INDEX=crawler_index)
    result = run_crawl(settings=settings, spider={"start_url": server.url + "/"})
    assert result.returncode == 0, result.log[-3000:]
    drop_crawler_index(es_client, crawler_index)
    kept, drops = set(result.kept_urls), near_duplicate_drops(result)
    assert len(kept) == len(site.distinct) and len(drops) == len(site.original_of)  # the control: copies dropped

    index_settings = es_client.indices.get_settings(index=search_index)[search_index]["settings"]["index"]
    assert index_settings["number_of_shards"] == "3"  # the cluster's template decided, not the writer
    docs = documents(es_client, search_index)
    assert set(docs) == {doc_id_of(url) for url in kept | set(drops)}  # soft 404s are not written
    for doc in docs.values():
        source = doc["_source"]
        url, neardup = source["url"], source["neardup"]
        assert doc["_id"] == doc_id_of(url) and neardup["key"] == url
        assert source["title"] and source["text"] and neardup["tag"] and len(neardup["positions"]) == 128
        assert "<" not in source["text"] and "</" not in source["text"]  # the crawl's items carry the HTML
        if url in drops:
            assert neardup["status"] == "duplicate"
            assert neardup["group"] == neardup["duplicate_of"] == doc_id_of(drops[url])
            assert neardup["shared"] >= 107
        else:
            assert neardup["status"] == "kept" and neardup["group"] == doc["_id"]
    assert result.stat("neardup/search_indexed") == len(docs) and result.stat("neardup/search_failed") == 0
    assert f"Search index {search_index}: {len(docs)} documents written, 0 removed, 0 items not written" in result.log

    # Collapsed: each group once, the kept page, hiding its copies; the counts are exact across the 3 shards.
    found = search_with_collapse(es_client, search_index, {"query": {"match_all": {}}, "size": 100})
    copies = Counter(drops.values())
    assert sorted(h.source["url"] for h in found.hits) == sorted(kept)
    assert {h.source["url"]: h.omitted for h in found.hits} == {url: copies.get(url, 0) for url in kept}
    assert found.total == len(docs)
    # A query of the user's own (a word of one article's text): that article once, with its 4 copies omitted.
    original = site.distinct[0]
    word = next(w for w in article_words(1001) if len(w) > 6)
    hits = search_with_collapse(es_client, search_index, {"query": {"match": {"text": word}}}).hits
    assert [(h.source["url"], h.omitted) for h in hits] == [(server.url + original, 4)]
    assert "positions" not in hits[0].source["neardup"]  # the sketch fields stay out of the sources
    assert word in hits[0].source["text"].split()
    # Words of the markup (tag and attribute names) are not in the searchable text.
    assert search_with_collapse(es_client, search_index, {"query": {"match": {"text": "href"}}}).hits == []
    # Without collapse every page comes back, duplicates too.
    plain = search_with_collapse(es_client, search_index, {"query": {"match": {"text": word}}}, collapse=False)
    assert len(plain.hits) == 5 and {h.omitted for h in plain.hits} == {0}
    assert {h.group for h in plain.hits} == {doc_id_of(server.url + original)}


def test_items_replaced_by_a_pipeline_in_between_keep_their_near_duplicate_fields(
    es_url: str, es_client: Any, search_index: str, run_crawl: Any, serve_kinds_site: Any,
) -> None:
    """A pipeline between the near-duplicate pipeline (300) and the search writer (900) hands on a copy of each
    item: every document still carries the decision taken of its page, found by the item's URL."""
    site = kinds_site()
    server = serve_kinds_site(site)
    settings = search_settings(es_url, search_index, ITEM_PIPELINES={"neardup_testkit.CopyingPipeline": 500})
    result = run_crawl(settings=settings, spider={"start_url": server.url + "/"})
    assert result.returncode == 0, result.log[-3000:]
    kept, drops = set(result.kept_urls), near_duplicate_drops(result)
    assert len(kept) == len(site.distinct) and len(drops) == len(site.original_of)
    docs = documents(es_client, search_index)
    assert set(docs) == {doc_id_of(url) for url in kept | set(drops)}
    status = {doc["_source"]["url"]: doc["_source"].get("neardup", {}).get("status") for doc in docs.values()}
    assert status == {url: "duplicate" if url in drops else "kept" for url in kept | set(drops)}
    # with their sketches: a page written without its decision would have no tag
    assert all(doc["_source"]["neardup"].get("tag") for doc in docs.values())
    assert "found neither their item" not in result.log and result.stat("neardup/search_unmatched_decisions") == 0


def test_a_recrawl_updates_changed_pages_in_place_and_skip_leaves_duplicates_out(
    es_url: str, es_client: Any, search_index: str, run_crawl: Any, serve_kinds_site: Any, tmp_path: Path,
) -> None:
    site = kinds_site(articles=2, soft_404s=1)
    server = serve_kinds_site(site)
    state = {"NEARDUP_STATE_DIR": str(tmp_path / "state")}
    first = run_crawl(settings=search_settings(es_url, search_index, **state), spider={"start_url": server.url + "/"},
                      name="first")
    assert first.returncode == 0, first.log[-3000:]
    before = documents(es_client, search_index)
    home = doc_id_of(server.url + "/")
    assert before[home]["_version"] == 1

    site.pages["/"] = Page(site.pages["/"].body.replace("</article>", "<p>" + " ".join(article_words(77, 40))
                                                        + "</p></article>"))
    second = run_crawl(settings=search_settings(es_url, search_index, **state), spider={"start_url": server.url + "/"},
                       name="second")
    assert second.returncode == 0, second.log[-3000:]
    assert second.stat("neardup/changed") == 1 and second.stat("neardup/revisited") == len(first.kept_urls) - 1
    after = documents(es_client, search_index)
    assert set(after) == set(before)  # the same documents, replaced in place: one per page
    assert after[home]["_version"] == 2 and article_words(77, 40)[0] in after[home]["_source"]["text"]
    assert after[home]["_source"]["neardup"]["fingerprint"] != before[home]["_source"]["neardup"]["fingerprint"]

    # "skip": a third crawl removes the duplicates' documents (written by the crawls before) and writes no new one.
    third = run_crawl(settings=search_settings(es_url, search_index, NEARDUP_SEARCH_DUPLICATES="skip", **state),
                      spider={"start_url": server.url + "/"}, name="third")
    assert third.returncode == 0, third.log[-3000:]
    left = documents(es_client, search_index)
    assert {doc["_source"]["url"] for doc in left.values()} == set(first.kept_urls)
    assert third.stat("neardup/search_removed") == len(near_duplicate_drops(third)) > 0
    # Again: the duplicates have no document left to remove, and the summary says none was.
    fourth = run_crawl(settings=search_settings(es_url, search_index, NEARDUP_SEARCH_DUPLICATES="skip", **state),
                       spider={"start_url": server.url + "/"}, name="fourth")
    assert fourth.returncode == 0 and len(near_duplicate_drops(fourth)) > 0, fourth.log[-3000:]
    assert not fourth.stat("neardup/search_removed")
    assert " 0 removed, 0 items not written" in fourth.log


def test_an_item_without_text_is_written_as_its_own_group(
    es_url: str, es_client: Any, search_index: str, run_crawl: Any, serve_site: Any,
) -> None:
    """Items the pipeline does not sketch (no text field) and items without a URL are written, never lost."""
    pages = {"/": Page(html_page("Home", article_words(3, 80), links=["/a.html", "/b.html"])),
             "/a.html": Page(html_page("A", article_words(4, 80))),
             "/b.html": Page(html_page("B", article_words(5, 80)))}
    server = serve_site(pages)
    overrides = {"/a.html": {"text": None}, "/b.html": {"__drop__": ["url"]}}
    result = run_crawl(settings=search_settings(es_url, search_index),
                       spider={"start_url": server.url + "/", "overrides": overrides})
    assert result.returncode == 0, result.log[-3000:]
    docs = {doc["_source"].get("title"): doc for doc in documents(es_client, search_index).values()}
    assert set(docs) == {"Home", "A", "B"}
    assert docs["A"]["_source"]["neardup"] == {**docs["A"]["_source"]["neardup"], "status": "kept", "empty": True,
                                               "group": docs["A"]["_id"], "key": server.url + "/a.html"}
    assert docs["B"]["_source"]["neardup"]["key"].startswith("no-url:")
    assert docs["B"]["_source"]["neardup"]["group"] == docs["B"]["_id"]


@pytest.mark.parametrize(("extra", "message"), [
    ({"NEARDUP_ES_INDEX": "same-index"},
     "NEARDUP_SEARCH_INDEX='same-index' is NEARDUP_ES_INDEX, the crawler backend's index of sketches"),
    ({"NEARDUP_ACTION": "mark"}, "NEARDUP_MARK_FIELD='neardup' is the object where NEARDUP_SEARCH_INDEX documents"),
    ({"NEARDUP_SEARCH_DUPLICATES": "keep"},
     "NEARDUP_SEARCH_DUPLICATES='keep' is not valid: expected one of 'skip', 'index'"),
    ({"NEARDUP_SEARCH_BATCH_SIZE": "0"}, "NEARDUP_SEARCH_BATCH_SIZE='0' is not valid"),
    ({"NEARDUP_ES_URL": None}, "NEARDUP_SEARCH_INDEX needs NEARDUP_ES_URL"),
    ({"NEARDUP_SEARCH_INDEX": "Pages"}, "NEARDUP_SEARCH_INDEX='Pages' is not valid: expected a lowercase"),
    # Pipelines listed by hand without the writer: the index would never be written.
    ({"ADDONS": {}, "ITEM_PIPELINES": {"scrapy_neardup.NearDuplicatePipeline": 300}},
     "NEARDUP_SEARCH_INDEX='same-index' is set but ITEM_PIPELINES has no scrapy_neardup.SearchIndexPipeline"),
])
def test_wrong_settings_stop_the_crawl_at_start_with_one_line(
    extra: dict[str, Any], message: str, run_crawl: Any, serve_site: Any,
) -> None:
    server = serve_site({"/": Page(html_page("Home", article_words(3, 50)))})
    settings = {**search_settings("http://127.0.0.1:9", "same-index"), **extra}
    result = run_crawl(settings={k: v for k, v in settings.items() if v is not None},
                       spider={"start_url": server.url + "/"})
    assert result.returncode == 1
    assert message in result.data["crawl_error"]["message"]
    critical = [line for line in result.log.splitlines() if "CRITICAL" in line]
    assert len(critical) == 1 and message in critical[0], result.log[-3000:]
    assert server.requests == []


def test_an_unreachable_node_at_start_is_one_line(run_crawl: Any, serve_site: Any) -> None:
    server = serve_site({"/": Page(html_page("Home", article_words(3, 50)))})
    result = run_crawl(settings=search_settings("http://127.0.0.1:9", "pages", NEARDUP_SEARCH_RETRIES=0),
                       spider={"start_url": server.url + "/"})
    assert result.returncode == 1
    critical = [line for line in result.log.splitlines() if "CRITICAL" in line]
    assert len(critical) == 1, result.log[-3000:]
    assert "search index pages: connecting: cannot connect to Elasticsearch at http://127.0.0.1:9" in critical[0]
    assert server.requests == []


def test_listings_name_pages_by_url_and_title_and_search_can_skip_the_collapse(
    es_url: str, es_client: Any, search_index: str, run_crawl: Any, serve_kinds_site: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`neardup es groups` on the crawler backend's index (documents holding only the `neardup` object, under
    hashed ids) and on the search index, and `neardup es search` with and without collapse: pages by URL."""
    from scrapy_neardup.cli.main import main

    site = kinds_site(articles=2, soft_404s=1)
    server = serve_kinds_site(site)
    crawler_index = f"neardup-test-{uuid.uuid4().hex[:10]}"
    settings = search_settings(es_url, search_index, NEARDUP_BACKEND="elasticsearch", NEARDUP_ES_INDEX=crawler_index)
    result = run_crawl(settings=settings, spider={"start_url": server.url + "/"})
    assert result.returncode == 0, result.log[-3000:]
    original = server.url + site.distinct[0]
    copies = sorted(server.url + path for path, of in site.original_of.items() if of == site.distinct[0])
    connection = ["--es-url", es_url]
    try:
        assert main(["es", "groups", *connection, "--index", crawler_index]) == 0
        out = capsys.readouterr().out
        header = f"group {doc_id_of(original)}: 5 pages, keep {original}"
        assert header in out.splitlines()
        lines = out.splitlines()
        start = lines.index(header)
        # Each duplicate line names the page, then its evidence against the kept page.
        assert sorted(line.split("  (")[0] for line in lines[start + 1 : start + 5]) == [
            f"  duplicate {url}" for url in copies]
        assert all(" positions shared, r in [" in line for line in lines[start + 1 : start + 5])
    finally:
        drop_crawler_index(es_client, crawler_index)

    assert main(["es", "groups", *connection, "--index", search_index, "--json"]) == 0
    groups = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    ours = next(g for g in groups if g["representative"] == doc_id_of(original))
    assert ours["pages"][0] == {"id": doc_id_of(original), "url": original, "title": "Article 1",
                                "resemblance": None, "evidence": None}  # the representative
    assert sorted(page["url"] for page in ours["pages"][1:]) == copies

    word = next(w for w in article_words(1001) if len(w) > 6)
    assert main(["es", "search", *connection, "--index", search_index, word]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(f"  1. Article 1 - {original}  score ") and line.endswith("(4 similar pages omitted)")
    assert main(["es", "search", *connection, "--index", search_index, word, "--no-collapse"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5 and sum(f"(near-duplicate of {original})" in line for line in lines) == 4
    assert main(["es", "search", *connection, "--index", search_index, word, "--no-collapse", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)["hits"]
    assert len(hits) == 5 and {h["group"] for h in hits} == {doc_id_of(original)}
    assert {h["omitted"] for h in hits} == {0}


def test_a_canonical_page_met_after_its_copy_becomes_its_groups_representative(
    es_url: str, es_client: Any, search_index: str, run_crawl: Any, serve_site: Any,
) -> None:
    """The copies (``/copy.html``, ``/copy-2.html``) are checked first and kept; the feed keeps them. Then their
    canonical pages arrive: in the index each becomes its group's representative (``kept``, its own group), its
    copy a duplicate of it, and a collapsed search shows the canonical page with its copy omitted."""
    from test_canonical import representative_site

    server = serve_site(representative_site())
    result = run_crawl(settings=search_settings(es_url, search_index),
                       spider={"start_url": server.url + "/", "item_type": "item"})
    assert result.returncode == 0, result.log[-3000:]
    base = server.url
    assert result.stat("neardup/canonical_representatives") == 2
    assert result.stat("neardup/search_regrouped") == 2, result.log[-3000:]
    docs = {hit["_source"]["url"][len(base):]: hit["_source"]["neardup"]
            for hit in documents(es_client, search_index).values()}
    for orig, copy in (("/orig.html", "/copy.html"), ("/orig-2.html", "/copy-2.html")):
        orig_id = doc_id_of(base + orig)
        assert (docs[orig]["status"], docs[orig]["group"]) == ("kept", orig_id), orig
        assert (docs[copy]["status"], docs[copy]["group"], docs[copy]["duplicate_of"]) == (
            "duplicate", orig_id, orig_id), copy
    found = search_with_collapse(es_client, search_index, {"query": {"match_all": {}}, "size": 20})
    shown = {hit.source["url"][len(base):]: hit.omitted for hit in found.hits}
    assert shown == {"/": 0, "/orig.html": 1, "/orig-2.html": 1}
