"""Mark mode in real feed exports: the mark is a parseable object in every format (JSON text in a CSV cell, a
nested object in JSON lines), from real crawls over HTTP on 127.0.0.1."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from neardup_testkit import CrawlResult, kinds_site, path_of, run_scrapy_command

from scrapy_neardup.crawl.exporters import CSV_EXPORTER

RunCrawl = Callable[..., CrawlResult]
ADDON = {"scrapy_neardup.NearDuplicateAddon": 0}


def feeds(tmp_path: Path) -> dict[str, Any]:
    return {str(tmp_path / "out.csv"): {"format": "csv"}, str(tmp_path / "out.jsonl"): {"format": "jsonlines"}}


def read_csv(path: Path) -> dict[str, str]:
    with open(path, newline="", encoding="utf-8") as handle:
        return {row["url"]: row["neardup"] for row in csv.DictReader(handle)}


def read_jsonl(path: Path) -> dict[str, Any]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return {record["url"]: record["neardup"] for record in map(json.loads, lines)}


def check_marks(csv_marks: dict[str, str], json_marks: dict[str, Any], server: Any) -> None:
    """The CSV cell is JSON text of the very object the JSON lines feed holds (empty for a kept page)."""
    assert set(csv_marks) == set(json_marks) and csv_marks
    for url, cell in csv_marks.items():
        assert (json.loads(cell) if cell else None) == json_marks[url], (url, cell)
    kinds = {tuple(sorted(mark)) for mark in json_marks.values() if mark is not None}
    evidence = ("interval", "k", "rule", "shared")  # docs/evidence.md
    # A near-duplicate's evidence also says what of it was sketched (its sketch was made in this crawl).
    # And of the kept page it names (docs/evidence.md: kept_sketched, kept_words, kept_removed).
    sides = {"duplicate_of", "exact", "resemblance", "sketched", "words", "kept_sketched", "kept_words", *evidence}
    assert any(sides <= set(kind) <= sides | {"removed", "kept_removed"} for kind in kinds), kinds
    assert tuple(sorted(("resemblance", "soft404", *evidence))) in kinds
    site = kinds_site()
    for copy, original in site.original_of.items():
        mark = json_marks[server.url + copy]
        assert mark["duplicate_of"] == server.url + original and 0.8 < mark["resemblance"] <= 1.0
    assert {path_of(u) for u, m in json_marks.items() if m is None} == set(site.distinct)


@pytest.mark.parametrize("item_type", ["dict", "item"])
def test_the_addon_writes_the_mark_as_json_in_csv_and_as_an_object_in_json_lines(
    run_crawl: RunCrawl, serve_kinds_site: Any, tmp_path: Path, item_type: str,
) -> None:
    server = serve_kinds_site(kinds_site())
    settings = {"ITEM_PIPELINES": {}, "ADDONS": ADDON, "NEARDUP_ACTION": "mark", "FEEDS": feeds(tmp_path)}
    result = run_crawl(settings=settings, spider={"start_url": server.url + "/", "item_type": item_type})
    assert result.returncode == 0, result.log[-3000:]
    csv_marks, json_marks = read_csv(tmp_path / "out.csv"), read_jsonl(tmp_path / "out.jsonl")
    check_marks(csv_marks, json_marks, server)
    assert not any(cell.startswith("{'") for cell in csv_marks.values())  # no Python repr
    assert "dict repr" not in result.log


def test_the_pipeline_alone_says_how_to_get_json_and_the_setting_gives_it(
    run_crawl: RunCrawl, serve_kinds_site: Any, tmp_path: Path,
) -> None:
    server = serve_kinds_site(kinds_site())
    spider = {"start_url": server.url + "/"}
    plain = tmp_path / "plain"
    result = run_crawl(settings={"NEARDUP_ACTION": "mark", "NEARDUP_SOFT404_ENABLED": False, "FEEDS": feeds(plain)},
                       spider=spider, name="plain")
    assert result.returncode == 0, result.log[-3000:]
    warning = (f"NEARDUP_ACTION='mark' with a CSV feed ({plain / 'out.csv'}): Scrapy's CSV exporter writes the "
               f"'neardup' mark as a Python dict repr; set FEED_EXPORTERS = {{'csv': '{CSV_EXPORTER}'}}")
    assert result.log.count(warning) == 1
    assert any(cell.startswith("{'") for cell in read_csv(plain / "out.csv").values())  # what it warns of

    set_by_hand = tmp_path / "by-hand"
    result = run_crawl(settings={"NEARDUP_ACTION": "mark", "FEEDS": feeds(set_by_hand),
                                 "FEED_EXPORTERS": {"csv": CSV_EXPORTER}, "ADDONS": ADDON, "ITEM_PIPELINES": {}},
                       spider=spider, name="by-hand")
    assert result.returncode == 0 and "dict repr" not in result.log, result.log[-3000:]
    check_marks(read_csv(set_by_hand / "out.csv"), read_jsonl(set_by_hand / "out.jsonl"), server)


def test_scrapy_crawl_o_csv_with_the_addon(serve_kinds_site: Any, tmp_path: Path) -> None:
    """``scrapy crawl ... -O out.csv`` as a user runs it, in a project enabling the add-on: a mark cell that
    a CSV reader and ``json.loads`` take as they are."""
    server = serve_kinds_site(kinds_site())
    out = tmp_path / "out.csv"
    proc = run_scrapy_command(
        tmp_path, "crawl", "neardup_test", "-a", f"start_url={server.url}/", "-O", str(out),
        settings={"ITEM_PIPELINES": {}, "ADDONS": ADDON, "NEARDUP_ACTION": "mark"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    marks = {url: json.loads(cell) if cell else None for url, cell in read_csv(out).items()}
    assert marks[server.url + "/print/1.html"]["duplicate_of"] == server.url + "/news/1.html"
    assert marks[server.url + "/news/1.html"] is None
