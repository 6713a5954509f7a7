"""The Scrapy add-on: ``ADDONS = {"scrapy_neardup.NearDuplicateAddon": 0}`` alone enables the pipeline."""

from __future__ import annotations

from typing import Any

from neardup_testkit import check_kinds_outcome, kinds_site, path_of
from scrapy.settings import Settings
from scrapy.utils.misc import load_object

import scrapy_neardup
from scrapy_neardup.crawl.addon import PIPELINE_PRIORITY, NearDuplicateAddon
from scrapy_neardup.crawl.pipeline import NearDuplicatePipeline

ADDON = "scrapy_neardup.NearDuplicateAddon"


def test_addon_alone_drops_near_duplicates_in_a_real_crawl(run_crawl: Any, serve_kinds_site: Any) -> None:
    site = kinds_site()
    server = serve_kinds_site(site)
    # No ITEM_PIPELINES entry: the add-on is the only thing that enables the pipeline (and the middlewares).
    result = run_crawl(settings={"ITEM_PIPELINES": {}, "ADDONS": {ADDON: 0}}, spider={"start_url": server.url + "/"})
    assert result.returncode == 0, result.log[-3000:]
    assert "Enabled addons:" in result.log and "NearDuplicateAddon" in result.log
    assert "Soft404Middleware" in result.log and "MirrorHostsMiddleware" in result.log
    # Scrapy lists the enabled components by import path, ours as the others.
    assert "<class " not in result.log
    for path in ("'scrapy_neardup.crawl.pipeline.NearDuplicatePipeline'",
                 "'scrapy_neardup.crawl.mirrors.MirrorHostsMiddleware'",
                 "'scrapy_neardup.crawl.soft404.Soft404Middleware'",
                 "'scrapy_neardup.crawl.canonical.CanonicalLinkMiddleware'"):
        assert path in result.log, result.log[:4000]
    # What the threshold means, said once at start-up.
    rule = "Near-duplicates: t = 107 of k = 128: flags r >= 0.90 in 99% of cases, r = 0.83 in 50%"
    assert result.log.count(rule) == 1
    kept = {path_of(u) for u in result.kept_urls}
    drops = {path_of(u): d for u, d in result.drops_by_url().items()}
    assert kept == set(site.distinct)  # the soft-404 template is no page: the add-on's probe finds it
    for copy, original in site.original_of.items():
        assert drops[copy]["reason"] == "NearDuplicateDropped"
        assert drops[copy]["duplicate_of"] == server.url + original
    assert site.soft_404 and all(drops[path]["reason"] == "Soft404Dropped" for path in site.soft_404)
    assert result.stat("neardup/soft404") == len(site.soft_404)


def test_addon_with_soft404_off_keeps_one_template_page(run_crawl: Any, serve_kinds_site: Any) -> None:
    site = kinds_site()
    server = serve_kinds_site(site)
    settings = {"ITEM_PIPELINES": {}, "ADDONS": {ADDON: 0}, "NEARDUP_SOFT404_ENABLED": False}
    result = run_crawl(settings=settings, spider={"start_url": server.url + "/"})
    assert result.returncode == 0, result.log[-3000:]
    check_kinds_outcome(result, site, server)
    assert result.stat("neardup/dropped") == len(result.dropped) > 0


def test_addon_keeps_a_users_own_pipeline_entry() -> None:
    assert load_object(ADDON) is NearDuplicateAddon is scrapy_neardup.NearDuplicateAddon
    fresh = Settings({"ITEM_PIPELINES": {"scrapy.pipelines.files.FilesPipeline": 800}})
    NearDuplicateAddon().update_settings(fresh)
    # Added by import path, so that Scrapy's "Enabled item pipelines" line names it (a class prints as <class ...>).
    assert fresh.getdict("ITEM_PIPELINES") == {"scrapy.pipelines.files.FilesPipeline": 800,
                                               "scrapy_neardup.crawl.pipeline.NearDuplicatePipeline": 300}
    assert PIPELINE_PRIORITY == 300
    # Listed already (under any import path): its priority stands and it is not added twice.
    for listed in ("scrapy_neardup.NearDuplicatePipeline", "scrapy_neardup.crawl.pipeline.NearDuplicatePipeline",
                   NearDuplicatePipeline):
        own = Settings({"ITEM_PIPELINES": {listed: 120}})
        NearDuplicateAddon().update_settings(own)
        assert own.getdict("ITEM_PIPELINES") == {listed: 120}


def test_addon_leaves_scrapys_room_for_responses_as_it_is() -> None:
    """Waiting pages make room for themselves while they wait (crawl.scraper_room): no crawl pays for it up front."""
    fresh = Settings()
    NearDuplicateAddon().update_settings(fresh)
    assert fresh.getint("SCRAPER_SLOT_MAX_ACTIVE_SIZE") == Settings().getint("SCRAPER_SLOT_MAX_ACTIVE_SIZE")
    own = Settings({"SCRAPER_SLOT_MAX_ACTIVE_SIZE": 2_000_000}, priority="project")
    NearDuplicateAddon().update_settings(own)
    assert own.getint("SCRAPER_SLOT_MAX_ACTIVE_SIZE") == 2_000_000  # the project's own value stands


def test_addon_registers_the_csv_exporter_of_mark_mode_unless_the_project_has_one() -> None:
    from scrapy_neardup.crawl.exporters import CSV_EXPORTER

    fresh = Settings()
    NearDuplicateAddon().update_settings(fresh)
    assert fresh.getwithbase("FEED_EXPORTERS")["csv"] == CSV_EXPORTER == "scrapy_neardup.CsvItemExporter"
    assert load_object(CSV_EXPORTER) is scrapy_neardup.CsvItemExporter
    # The project's other formats stay, and its own csv exporter stands.
    other = Settings({"FEED_EXPORTERS": {"xlsx": "project.XlsxExporter"}}, priority="project")
    NearDuplicateAddon().update_settings(other)
    assert other.getdict("FEED_EXPORTERS") == {"xlsx": "project.XlsxExporter", "csv": CSV_EXPORTER}
    own = Settings({"FEED_EXPORTERS": {"csv": "project.CsvExporter"}}, priority="project")
    NearDuplicateAddon().update_settings(own)
    assert own.getwithbase("FEED_EXPORTERS")["csv"] == "project.CsvExporter"
