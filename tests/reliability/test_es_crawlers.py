"""Issue 6, item 2: several crawlers, one index.

Four crawler processes (real Scrapy crawls, started together) share one Elasticsearch index (the session node,
``es_url``) over a site of ``GROUPS`` groups of near-duplicates; each group has one member under each crawler's
start URL, in the same order, so members of a group are checked by the four processes at about the same time.

Afterwards, from the four crawls' outputs and from the index:

* no item is lost (each is kept, or dropped naming a page some crawler kept);
* no group loses all its members (at least one kept page per group);
* at least 99% of groups (with 40 groups: all of them) end with exactly one kept page;
* the index agrees: one document with status ``kept`` per group, none left ``pending``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import neardup_testkit
import pytest
from neardup_testkit import CrawlResult, Page, SiteServer, article_words, edit_words, html_page, run_crawl_process

pytestmark = pytest.mark.es

CRAWLERS = 4
GROUPS = 40


def shared_site(crawlers: int = CRAWLERS, changes: int = 3) -> tuple[dict[str, Page], dict[str, int]]:
    """Pages and path -> group. Crawler ``c`` starts at ``/c{c}/``, which links to ``/c{c}/g{g}`` for every
    group ``g``: a light edit (3 words of 300) of group ``g``'s article, different in each crawler."""
    pages: dict[str, Page] = {}
    group_of: dict[str, int] = {}
    for c in range(crawlers):
        links = []
        for g in range(GROUPS):
            path = f"/c{c}/g{g}"
            words = edit_words(article_words(2000 + g, 300), changes=changes, seed=100 * g + c)
            pages[path] = Page(html_page(f"Story {g}", words))
            group_of[path] = g
            links.append(path)
        pages[f"/c{c}/"] = Page(html_page(f"Crawler {c} index", article_words(3000 + c, 200), links=links))
    return pages, group_of


@pytest.fixture
def es_index(es_client: Any) -> Iterator[str]:
    name = f"neardup-rel-crawlers-{uuid.uuid4().hex[:8]}"
    yield name
    es_client.indices.delete(index=f"{name},{name}-order", ignore_unavailable=True)


@pytest.mark.parametrize("shards", [1, 3])
def test_four_crawlers_share_one_index(es_url: str, es_client: Any, es_index: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch, shards: int) -> None:
    monkeypatch.setattr(neardup_testkit, "CRAWL_TIMEOUT", 110)
    pages, group_of = shared_site()
    server = SiteServer(pages).start()
    results: dict[int, CrawlResult] = {}
    errors: dict[int, BaseException] = {}

    def crawl(c: int) -> None:
        try:
            results[c] = run_crawl_process(
                tmp_path,
                settings={"NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": es_url, "NEARDUP_ES_INDEX": es_index,
                          "NEARDUP_ES_SHARDS": shards, "CONCURRENT_REQUESTS": 8},
                spider={"start_url": f"{server.url}/c{c}/"}, name=f"crawler{c}",
            )
        except BaseException as exc:  # reported below
            errors[c] = exc

    # Started together: the four processes also race to create the index (the backend tolerates it).
    started = time.monotonic()
    threads = [threading.Thread(target=crawl, args=(c,)) for c in range(CRAWLERS)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        server.stop()
    elapsed = time.monotonic() - started
    assert not errors, errors
    assert sorted(results) == list(range(CRAWLERS))
    for c, result in results.items():
        assert result.returncode == 0, (c, result.log[-3000:])
        assert result.data["item_errors"] == [], c
        assert result.stat("neardup/backend_errors") == 0, c

    base = server.url
    kept = [item["url"] for r in results.values() for item in r.scraped]
    dropped = {d["item"]["url"]: d["duplicate_of"] for r in results.values() for d in r.dropped}
    assert len(kept) == len(set(kept))
    kept_set = set(kept)
    # Nothing lost: every page is kept, or dropped naming a page that some crawler kept.
    lost = {base + path for path in pages} - kept_set - set(dropped)
    assert lost == set()
    assert {url: t for url, t in dropped.items() if t not in kept_set} == {}
    # Duplicates name a page of their own group.
    for url, target in dropped.items():
        path, target_path = url[len(base):], target[len(base):]
        if path in group_of:
            assert group_of.get(target_path) == group_of[path], (url, target)

    # The processes did contend: many pages were dropped naming a page another process kept.
    crawler_of = {item["url"]: c for c, r in results.items() for item in r.scraped}
    cross = sum(1 for c, r in results.items() for d in r.dropped if crawler_of.get(d["duplicate_of"]) != c)
    assert cross >= GROUPS, cross

    kept_per_group = [0] * GROUPS
    for url in kept_set:
        g = group_of.get(url[len(base):])
        if g is not None:
            kept_per_group[g] += 1
    exactly_one = sum(1 for n in kept_per_group if n == 1)
    share = exactly_one / GROUPS
    print(
        f"\n{CRAWLERS} crawlers, one index: {len(pages)} pages, {len(kept_set)} kept, {len(dropped)} dropped, "
        f"({cross} naming another process's page), lost {len(lost)}; "
        f"groups with no kept page: {kept_per_group.count(0)}; exactly one kept: "
        f"{exactly_one}/{GROUPS} ({share:.1%}); {elapsed:.1f}s"
    )
    assert kept_per_group.count(0) == 0, kept_per_group
    assert share >= 0.99, kept_per_group

    # The index agrees with the crawls: the kept documents are the kept pages; nothing left pending.
    es_client.indices.refresh(index=es_index)
    response = es_client.search(index=es_index, size=1000, query={"match_all": {}}, source=["neardup.key",
                                                                                             "neardup.status"])
    docs = [hit["_source"]["neardup"] for hit in response["hits"]["hits"]]
    assert [d for d in docs if d["status"] == "pending"] == []
    assert {d["key"] for d in docs if d["status"] == "kept"} == kept_set
    settings = es_client.indices.get_settings(index=es_index)[es_index]["settings"]["index"]
    assert int(settings["number_of_shards"]) == shards
