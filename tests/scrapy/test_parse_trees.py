"""The add-on's spider middleware that frees each response's parsed tree once the spider is done with it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from neardup_testkit import kinds_site
from scrapy.http import HtmlResponse
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from scrapy_neardup.crawl.addon import NearDuplicateAddon
from scrapy_neardup.crawl.parse_trees import ParseTreeRelease

ADDON = "scrapy_neardup.NearDuplicateAddon"
PATH = "scrapy_neardup.crawl.parse_trees.ParseTreeRelease"
PAGE = b"<html><body><p>one</p><a href='/two'>two</a></body></html>"


def parsed_response() -> HtmlResponse:
    response = HtmlResponse("http://127.0.0.1/one", body=PAGE, encoding="utf-8")
    assert response.css("a::attr(href)").get() == "/two"  # the spider's use: the tree is built and cached
    return response


def test_the_tree_goes_when_the_output_is_read_to_its_end_and_comes_back_on_use() -> None:
    crawler = get_crawler(settings_dict={})
    crawler.stats.open_spider()
    release = ParseTreeRelease(crawler.stats)
    response = parsed_response()
    tree = response.selector
    output = release.process_spider_output(response, iter([{"url": response.url}, {"url": "x"}]))
    assert next(output) == {"url": response.url}
    assert response.selector is tree  # still the spider's while its output is read
    assert list(output) == [{"url": "x"}]
    assert response._cached_selector is None and crawler.stats.get_value("neardup/parse_trees_freed") == 1
    assert response.css("p::text").get() == "one" and response.selector is not tree  # parsed again on use
    # A response whose tree was never built: nothing to free, nothing counted.
    plain = HtmlResponse("http://127.0.0.1/two", body=PAGE, encoding="utf-8")
    assert list(release.process_spider_output(plain, iter([1]))) == [1]
    assert crawler.stats.get_value("neardup/parse_trees_freed") == 1


def test_async_output_and_a_callback_that_fails_free_the_tree_too() -> None:
    release = ParseTreeRelease()

    async def output(fail: bool) -> AsyncIterator[Any]:
        yield {"n": 1}
        if fail:
            raise ValueError("the callback failed")

    async def read(response: HtmlResponse, fail: bool) -> list[Any]:
        got = []
        try:
            async for each in release.process_spider_output_async(response, output(fail)):
                got.append(each)
        except ValueError:
            got.append("failed")
        return got

    for fail in (False, True):
        response = parsed_response()
        assert asyncio.run(read(response, fail)) == ([{"n": 1}, "failed"] if fail else [{"n": 1}])
        assert response._cached_selector is None


def test_the_addon_installs_it_nearest_the_engine_unless_the_project_lists_it() -> None:
    fresh = Settings()
    NearDuplicateAddon().update_settings(fresh)
    assert fresh.getdict("SPIDER_MIDDLEWARES") == {PATH: 10}
    assert min(Settings().getdict("SPIDER_MIDDLEWARES_BASE").values()) > 10  # Scrapy's own see the output first
    own = Settings({"SPIDER_MIDDLEWARES": {"scrapy_neardup.crawl.parse_trees.ParseTreeRelease": 500}})
    NearDuplicateAddon().update_settings(own)
    assert own.getdict("SPIDER_MIDDLEWARES") == {PATH: 500}


def test_in_a_real_crawl_every_parsed_page_leaves_its_tree_and_the_setting_turns_it_off(
    run_crawl: Any, serve_kinds_site: Any,
) -> None:
    site = kinds_site()
    server = serve_kinds_site(site)
    result = run_crawl(settings={"ITEM_PIPELINES": {}, "ADDONS": {ADDON: 0}}, spider={"start_url": server.url + "/"})
    assert result.returncode == 0, result.log[-3000:]
    assert f"'{PATH}'" in result.log  # in Scrapy's "Enabled spider middlewares" line
    pages = len(result.scraped) + len(result.dropped)  # each page the spider parsed gave one item
    assert pages > 10 and result.stat("neardup/parse_trees_freed") == pages
    # Off: not enabled, nothing freed, the same decisions.
    off = run_crawl(settings={"ITEM_PIPELINES": {}, "ADDONS": {ADDON: 0}, "NEARDUP_FREE_PARSE_TREES": False},
                    spider={"start_url": server.url + "/"})
    assert off.returncode == 0, off.log[-3000:]
    assert f"'{PATH}'" not in off.log and off.stat("neardup/parse_trees_freed") == 0
    assert sorted(off.kept_urls) == sorted(result.kept_urls)
