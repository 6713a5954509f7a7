"""The pipeline with NEARDUP_BACKEND="elasticsearch" against a real local node (fixture ``es_url``).

Needs ``es_integration.backend.ElasticsearchBackend`` and the session fixture ``es_url`` (tests/conftest.py).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from neardup_testkit import (
    Page,
    article_words,
    burst_items,
    check_kinds_outcome,
    check_one_kept_per_group,
    html_page,
    kinds_site,
    path_of,
    soft_404_page,
    template_site,
)

pytestmark = pytest.mark.es


def index_name() -> str:
    return f"neardup-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def es_index(es_client: Any) -> Iterator[str]:
    name = index_name()
    yield name
    es_client.indices.delete(index=name, ignore_unavailable=True)


def es_settings(es_url: str, index: str, **extra: Any) -> dict[str, Any]:
    return {"NEARDUP_BACKEND": "elasticsearch", "NEARDUP_ES_URL": es_url, "NEARDUP_ES_INDEX": index, **extra}


def test_drops_every_kind_of_near_duplicate(
    es_url: str, es_index: str, run_crawl: Any, serve_kinds_site: Any
) -> None:
    site = kinds_site()
    server = serve_kinds_site(site)
    result = run_crawl(settings=es_settings(es_url, es_index), spider={"start_url": server.url + "/"})
    assert result.returncode == 0, result.log[-3000:]
    check_kinds_outcome(result, site, server)
    assert result.stat("neardup/backend_errors") == 0


def test_index_is_shared_between_crawler_processes(
    es_url: str, es_index: str, run_crawl: Any, serve_kinds_site: Any
) -> None:
    """A second crawl (another process) of the same content under other URLs drops every page, naming the
    pages the first crawl kept."""
    site = kinds_site(articles=2, soft_404s=2)
    first_server, second_server = serve_kinds_site(site), serve_kinds_site(site)
    first = run_crawl(settings=es_settings(es_url, es_index), spider={"start_url": first_server.url + "/"},
                      name="first")
    assert first.returncode == 0, first.log[-3000:]
    second = run_crawl(settings=es_settings(es_url, es_index), spider={"start_url": second_server.url + "/"},
                       name="second")
    assert second.returncode == 0, second.log[-3000:]
    assert second.scraped == []
    kept_first = set(first.kept_urls)
    for drop in second.dropped:
        assert drop["duplicate_of"] in kept_first
    # Each page of the second crawl names the same page of the first one when that page was kept.
    for url, drop in second.drops_by_url().items():
        twin = first_server.url + path_of(url)
        if twin in kept_first:
            assert drop["duplicate_of"] == twin


def test_concurrent_near_duplicates_keep_exactly_one(
    es_url: str, es_index: str, run_crawl: Any, serve_site: Any
) -> None:
    items, group_of = burst_items()
    server = serve_site({"/": Page(html_page("Burst", article_words(1, 20)))}, fallback=soft_404_page())
    result = run_crawl(settings=es_settings(es_url, es_index, CONCURRENT_ITEMS=500),
                       spider={"start_url": server.url + "/", "burst": items})
    assert result.returncode == 0, result.log[-3000:]
    check_one_kept_per_group(result, group_of, groups=3)
    assert result.stat("neardup/backend_errors") == 0


@pytest.mark.parametrize("auth", ["password", "api_key"])
def test_secured_node_with_tls_and_credentials(
    auth: str, secure_es_node: Any, run_crawl: Any, serve_kinds_site: Any
) -> None:
    """NEARDUP_ES_USERNAME/PASSWORD or NEARDUP_ES_API_KEY, and NEARDUP_ES_CA_CERTS, reach the backend."""
    site = kinds_site(articles=2, soft_404s=2)
    server = serve_kinds_site(site)
    credentials = (
        {"NEARDUP_ES_USERNAME": secure_es_node.username, "NEARDUP_ES_PASSWORD": secure_es_node.password}
        if auth == "password"
        else {"NEARDUP_ES_API_KEY": secure_es_node.create_api_key(f"neardup-{auth}")["encoded"]}
    )
    index = index_name()
    settings = es_settings(secure_es_node.url, index, NEARDUP_ES_CA_CERTS=str(secure_es_node.ca_certs),
                           **credentials)
    assert secure_es_node.url.startswith("https://")
    result = run_crawl(settings=settings, spider={"start_url": server.url + "/"})
    assert result.returncode == 0, result.log[-3000:]
    check_kinds_outcome(result, site, server)
    client = secure_es_node.client()
    try:
        client.indices.delete(index=index, ignore_unavailable=True)
    finally:
        client.close()


def test_unreachable_node_stops_the_crawl_at_start(run_crawl: Any, serve_site: Any) -> None:
    server = serve_site({"/": Page(html_page("Home", article_words(3, 50)))})
    # Port 9 (discard) on 127.0.0.1: nothing listens there.
    result = run_crawl(settings=es_settings("http://127.0.0.1:9", "neardup-unreachable", NEARDUP_ES_TIMEOUT=2),
                       spider={"start_url": server.url + "/"})
    assert result.returncode == 1
    error = result.data["crawl_error"]
    assert error is not None and error["type"] not in ("ModuleNotFoundError", "ImportError"), error
    assert server.requests == []


def test_template_heavy_site_on_elasticsearch_shares_the_hosts_template(
    es_url: str, es_index: str, es_client: Any, run_crawl: Any, serve_site: Any,
) -> None:
    """The default on a site whose template is most of each page, with the Elasticsearch backend: only copies are
    dropped; the host's template is saved in ``<index>-templates`` and a later crawl (another process) uses it."""
    site = template_site()
    server = serve_site(site.pages)
    first = run_crawl(settings=es_settings(es_url, es_index), spider={"start_url": server.url + "/"}, name="first")
    assert first.returncode == 0, first.log[-3000:]
    pairs = {frozenset(pair) for pair in site.original_of.items()}
    drops = {path_of(url): path_of(drop["duplicate_of"]) for url, drop in first.drops_by_url().items()}
    assert len(drops) == len(pairs) and all(frozenset(drop) in pairs for drop in drops.items())
    assert first.stat("neardup/templates_learned") == 1
    es_client.indices.refresh(index=f"{es_index}-templates")  # searches see what a refresh made visible
    saved = es_client.search(index=f"{es_index}-templates", query={"match_all": {}})["hits"]["hits"]
    assert [hit["_source"]["host"] for hit in saved] == [server.url]
    second = run_crawl(settings=es_settings(es_url, es_index), spider={"start_url": server.url + "/"}, name="second")
    assert second.returncode == 0, second.log[-3000:]
    assert second.stat("neardup/templates_loaded") == 1 and second.stat("neardup/template_pages_held") == 0
    es_client.indices.delete(index=f"{es_index}-templates", ignore_unavailable=True)


def test_an_index_of_whole_body_sketches_is_refused_at_start(
    es_url: str, es_index: str, run_crawl: Any, serve_site: Any,
) -> None:
    """An index written by an earlier version (whole-body sketches) and the new default: one line, no crawl."""
    server = serve_site({"/": Page(html_page("Home", article_words(3, 80)))})
    old = run_crawl(settings=es_settings(es_url, es_index, NEARDUP_CONTENT="body"),
                    spider={"start_url": server.url + "/"}, name="old")
    assert old.returncode == 0, old.log[-3000:]
    new = run_crawl(settings=es_settings(es_url, es_index), spider={"start_url": server.url + "/"}, name="new")
    assert new.returncode == 1
    message = new.data["crawl_error"]["message"]
    assert "whole body (mh11-k128-word5-s1)" in message
    assert "neardup es backfill --force" in message and "NEARDUP_CONTENT='body'" in message


def test_the_same_page_twice_in_one_crawl_is_emitted_once(
    es_url: str, es_index: str, run_crawl: Any, serve_site: Any, tmp_path: Any
) -> None:
    """A start URL linked again, and fetched again after a kill -9 and a resume of the same JOBDIR: one crawl,
    so a repeat (dropped); a later crawl emits every page again as a revisit, once."""
    from test_scrapy_repeats import SLOW, START, emitted, loop_site

    site = loop_site(16)
    server = serve_site(site)
    spider = {"start_url": server.url + "/", **START}
    settings = es_settings(es_url, es_index, **SLOW, JOBDIR=str(tmp_path / "job"))
    killed = run_crawl(settings=settings, spider=spider, kill_after_items=4, name="killed")
    assert killed.returncode == -9 and 4 <= len(killed.passed_on) < len(site), killed.log[-3000:]
    resumed = run_crawl(settings=settings, spider=spider, name="resumed")
    assert resumed.returncode == 0, resumed.log[-3000:]
    passed_on = Counter(path_of(url) for url in killed.passed_on) + emitted(resumed)
    assert max(passed_on.values()) == 1, passed_on
    repeats = {path_of(d["item"]["url"]) for d in resumed.dropped if d["reason"] == "RepeatDropped"}
    assert "/" in repeats
    # A page missing was inside the pipeline at the kill: decided (with the pages ready with it, in one batch) and
    # written to the index, not yet passed on. The resumed crawl knows the killed run met it: a repeat.
    assert set(site) - set(passed_on) <= repeats
    later = run_crawl(settings={**settings, "JOBDIR": str(tmp_path / "job-2")}, spider=spider, name="later")
    assert later.returncode == 0, later.log[-3000:]
    assert emitted(later) == Counter(list(site)) and later.stat("neardup/revisited") == len(site)
    assert later.stat("neardup/repeats") >= 1
