"""Real crawls over HTTP on 127.0.0.1 with the pipeline enabled (each in its own process, see conftest)."""

from __future__ import annotations

import csv
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from neardup_testkit import (
    CrawlResult,
    NearDupSite,
    Page,
    article_words,
    burst_items,
    check_burst_precondition,
    check_kinds_outcome,
    check_one_kept_per_group,
    html_page,
    kinds_site,
    path_of,
    run_scrapy_command,
)

from scrapy_neardup.store.embedded import STATE_FILE

RunCrawl = Callable[..., CrawlResult]


@pytest.mark.parametrize("item_type", ["dict", "item", "dataclass"])
def test_drops_every_kind_of_near_duplicate(item_type: str, run_crawl: RunCrawl, serve_kinds_site: Any) -> None:
    site = kinds_site()
    server = serve_kinds_site(site)
    result = run_crawl(settings={"LOG_LEVEL": "DEBUG"}, spider={"start_url": server.url + "/",
                                                                "item_type": item_type})
    assert result.returncode == 0, result.log[-3000:]
    check_kinds_outcome(result, site, server)

    n_pages, n_drops = len(site.pages) + len(site.soft_404), len(result.dropped)
    assert result.stat("neardup/checked") == n_pages == len(result.scraped) + n_drops
    assert result.stat("neardup/kept") == len(result.scraped)
    assert result.stat("neardup/dropped") == n_drops == len(site.original_of) + len(site.soft_404) - 1
    assert result.stat("item_dropped_reasons_count/NearDuplicateDropped") == n_drops
    # Exact: the copies whose article is word for word the original's (the default sketches the article a page
    # marks: a mirror's navigation, a printer title, a syndicated footer are not in it), and the second and third
    # soft 404s.
    exact = sum(not copy.startswith("/edited/") for copy in site.original_of) + len(site.soft_404) - 1
    assert result.stat("neardup/exact_duplicates") == sum(d["exact"] for d in result.dropped) == exact
    assert result.stats["finish_reason"] == "finished"

    # One DEBUG line per drop (Scrapy's, with the item) naming the kept URL and the resemblance, and an INFO
    # summary at close.
    for drop in result.dropped:
        line = f"DEBUG: Dropped: near-duplicate of {drop['duplicate_of']} (resemblance {drop['resemblance']:.3f}"
        assert line in result.log
    assert result.log.count("DEBUG: Dropped") == n_drops and "Dropped near-duplicate" not in result.log
    assert (f"INFO: Near-duplicates: checked {n_pages} items, kept {len(result.scraped)}, "
            f"dropped {n_drops} ({exact} exact)") in result.log


@pytest.mark.parametrize("item_type", ["dict", "item", "dataclass"])
def test_mark_keeps_items_and_records_the_kept_page(
    item_type: str, run_crawl: RunCrawl, serve_kinds_site: Any
) -> None:
    site = kinds_site(articles=2, soft_404s=2)
    server = serve_kinds_site(site)
    result = run_crawl(settings={"NEARDUP_ACTION": "mark"}, spider={"start_url": server.url + "/",
                                                                    "item_type": item_type})
    assert result.returncode == 0, result.log[-3000:]
    assert result.dropped == []
    by_path = {path_of(item["url"]): item for item in result.scraped}
    assert set(by_path) == set(site.pages) | set(site.soft_404)
    min_resemblance = 107 / 128
    for copy, original in site.original_of.items():
        mark = by_path[copy]["neardup"]
        assert mark["duplicate_of"] == server.url + original
        assert min_resemblance <= mark["resemblance"] <= 1
        assert mark["exact"] is not copy.startswith("/edited/")  # the others copy the article word for word
    for path in site.distinct:
        assert not by_path[path].get("neardup")  # absent (dict, Item) or None (dataclass default)
    marked_404 = [p for p in site.soft_404 if by_path[p].get("neardup")]
    assert len(marked_404) == len(site.soft_404) - 1
    assert result.stat("neardup/marked") == len(site.original_of) + len(marked_404)
    assert result.stat("neardup/dropped") == 0 and result.stat("item_dropped_count") == 0


def test_mark_with_undeclared_field_stops_the_crawl_loses_no_item_and_exits_1(
    run_crawl: RunCrawl, serve_kinds_site: Any, tmp_path: Path,
) -> None:
    site = kinds_site(articles=3)
    server = serve_kinds_site(site)
    result = run_crawl(settings={"NEARDUP_ACTION": "mark"},
                       spider={"start_url": server.url + "/", "item_type": "item_without_mark"})
    assert result.returncode == 1 and result.data["bootstrap_failed"]
    assert result.data["item_errors"] == [] and result.dropped == []
    # Every item the spider yielded came out (unmarked), one per page fetched.
    assert result.scraped and len(result.scraped) == result.stat("downloader/response_count")
    assert result.stat("neardup/mark_field_missing") == len(result.scraped)
    assert result.stats["finish_reason"] == "neardup_mark_field_missing"
    assert "NEARDUP_MARK_FIELD='neardup'" in result.log and "neardup_testkit.PageItemWithoutMark" in result.log
    assert result.log.count("does not declare") == 1  # said once
    # The crawl stopped instead of fetching the whole site.
    assert result.stat("downloader/response_count") < len(site.pages)

    # The same through `scrapy crawl`, as a scheduler runs it: exit status 1, every item in the feed.
    out = tmp_path / "items.jsonl"
    proc = run_scrapy_command(
        tmp_path, "crawl", "neardup_test", "-a", f"start_url={server.url}/", "-a", "item_type=item_without_mark",
        "-O", str(out), settings={"NEARDUP_ACTION": "mark"},
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = out.read_text().splitlines()
    fetched = int(re.search(r"'downloader/response_count': (\d+)", proc.stderr).group(1))  # type: ignore[union-attr]
    assert lines and len(lines) == fetched
    assert "non-zero exit status" in proc.stderr


def test_mark_mode_csv_export_has_the_mark_column_on_every_row(serve_kinds_site: Any, tmp_path: Path) -> None:
    site = kinds_site(articles=2, soft_404s=2)
    server = serve_kinds_site(site)
    out = tmp_path / "items.csv"
    proc = run_scrapy_command(tmp_path, "crawl", "neardup_test", "-a", f"start_url={server.url}/", "-O", str(out),
                              settings={"NEARDUP_ACTION": "mark", "CONCURRENT_REQUESTS": 1})
    assert proc.returncode == 0, proc.stderr[-3000:]
    with out.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows and "neardup" in rows[0]  # the column is there although the first item was kept
    by_path = {path_of(row["url"]): row for row in rows}
    for path in site.distinct:
        assert by_path[path]["neardup"] == ""  # kept: the field is None
    for copy, original in site.original_of.items():
        assert f"'duplicate_of': '{server.url}{original}'" in by_path[copy]["neardup"]


def test_wrong_text_field_warns_after_20_items_and_in_the_summary(run_crawl: RunCrawl, serve_site: Any) -> None:
    paths = [f"/p{i}.html" for i in range(30)]
    pages = {p: Page(html_page(f"Page {i}", article_words(300 + i, 80))) for i, p in enumerate(paths)}
    server = serve_site({"/": Page(html_page("Home", article_words(299, 50), links=paths))} | pages)
    result = run_crawl(spider={"start_url": server.url + "/", "rename": {"text": "body"}})
    assert result.returncode == 0, result.log[-3000:]
    assert len(result.scraped) == 31 and result.stat("neardup/checked") == 0
    warning = ("WARNING: NEARDUP_TEXT_FIELD='text' is missing from the first 20 items, which have fields: "
               "body, title, url; nothing is being checked")
    assert result.log.count(warning) == 1
    assert ("WARNING: Near-duplicates: checked 0 items, kept 0, dropped 0 (0 exact), passed through 31 without "
            "usable text; NEARDUP_TEXT_FIELD='text' is missing from all 31 items, which have fields: body, "
            "title, url; nothing is being checked") in result.log

    # Control: with the right field there is no warning, and the summary is INFO.
    right = run_crawl(settings={"NEARDUP_TEXT_FIELD": "body"}, name="right",
                      spider={"start_url": server.url + "/", "rename": {"text": "body"}})
    assert right.stat("neardup/checked") == 31 and "is missing from" not in right.log
    assert "INFO: Near-duplicates: checked 31 items" in right.log


def test_items_without_usable_text_pass_through_and_are_counted(run_crawl: RunCrawl, serve_site: Any) -> None:
    words = article_words(77)
    page = Page(html_page("Same article", words))
    paths = ["/no-field", "/none", "/list", "/number", "/blank", "/no-url-1", "/no-url-2", "/ok"]
    server = serve_site({"/": Page(html_page("Home", article_words(78, 50), links=paths))}
                        | dict.fromkeys(paths, page))
    overrides = {
        "/no-field": {"__drop__": ["text"]},
        "/none": {"text": None},
        "/list": {"text": ["a list", "of strings"]},
        "/number": {"text": 12345},
        "/blank": {"text": "  \n\t <p> </p> "},
        "/no-url-1": {"__drop__": ["url"]},
        "/no-url-2": {"url": None},
    }
    result = run_crawl(spider={"start_url": server.url + "/", "overrides": overrides})
    assert result.returncode == 0, result.log[-3000:]
    skipped = {"/no-field", "/none", "/list", "/number", "/blank"}
    scraped = result.scraped
    # Items whose text cannot be sketched are never dropped; all of them are in the output.
    assert {path_of(i["url"]) for i in scraped if i.get("url")} >= skipped
    assert result.stat("neardup/skipped_no_text") == 2
    assert result.stat("neardup/skipped_bad_text") == 2
    assert result.stat("neardup/skipped_empty") == 1
    assert result.stat("neardup/missing_url") == 2
    # The three sketchable copies of one article: one kept, two dropped naming it (whatever the order).
    assert result.stat("neardup/checked") == 4 and result.stat("neardup/kept") == 2  # home + one copy
    assert len(result.dropped) == 2
    kept_key = {d["duplicate_of"] for d in result.dropped}
    assert len(kept_key) == 1
    (key,) = kept_key
    assert key == server.url + "/ok" or re.fullmatch(r"no-url:[0-9a-f]{16}", key)
    assert "passed through 5 without usable text" in result.log


# -- concurrency ------------------------------------------------------------------------------------------------


REACTOR_LOG_LINES = {
    "asyncio": "Using reactor: twisted.internet.asyncioreactor.AsyncioSelectorReactor",
    "select": "Using reactor: twisted.internet.selectreactor.SelectReactor",
    "none": "Not using a Twisted reactor",
}


@pytest.mark.parametrize(
    ("pipeline", "reactor"),
    [
        ("scrapy_neardup.NearDuplicatePipeline", "asyncio"),
        ("neardup_testkit.SlowBackendPipeline", "asyncio"),
        ("neardup_testkit.SlowBackendPipeline", "select"),
        ("neardup_testkit.SlowBackendPipeline", "none"),
    ],
    ids=["embedded-asyncio-reactor", "awaiting-backend-asyncio-reactor", "awaiting-backend-select-reactor",
         "awaiting-backend-no-reactor"],
)
def test_concurrent_near_duplicates_keep_exactly_one(
    pipeline: str, reactor: str, run_crawl: RunCrawl, serve_site: Any
) -> None:
    items, group_of = burst_items()
    check_burst_precondition(items, group_of)
    server = serve_site({"/": Page(html_page("Burst", article_words(1, 20)))})
    result = run_crawl(
        settings={"ITEM_PIPELINES": {pipeline: 300}, "CONCURRENT_ITEMS": 500, "LOG_LEVEL": "DEBUG"},
        spider={"start_url": server.url + "/", "burst": items}, reactor=reactor,
    )
    assert result.returncode == 0, result.log[-3000:]
    assert REACTOR_LOG_LINES[reactor] in result.log  # the crawl really ran in the intended mode
    check_one_kept_per_group(result, group_of, groups=3)
    assert result.stat("neardup/backend_errors") == 0


def test_without_the_lock_an_awaiting_backend_keeps_duplicates(run_crawl: RunCrawl, serve_site: Any) -> None:
    """Negative control: the race the lock prevents is real, so the test above can fail."""
    items, _ = burst_items()
    server = serve_site({"/": Page(html_page("Burst", article_words(1, 20)))})
    result = run_crawl(
        settings={"ITEM_PIPELINES": {"neardup_testkit.UnlockedSlowBackendPipeline": 300}, "CONCURRENT_ITEMS": 500},
        spider={"start_url": server.url + "/", "burst": items},
    )
    assert result.returncode == 0, result.log[-3000:]
    assert len(result.kept_urls) > 3


# -- persistence ------------------------------------------------------------------------------------------------


def resume_site() -> NearDupSite:
    """Home -> six originals -> one copy each (a mirror): crawled breadth-first, the originals come first."""
    site = NearDupSite()
    originals = [f"/news/{i}.html" for i in range(1, 7)]
    for i, path in enumerate(originals, start=1):
        words = article_words(2000 + i)
        copy = f"/mirror/{i}.html"
        site.pages[path] = Page(html_page(f"Story {i}", words, nav="Home News", links=[copy]))
        site.pages[copy] = Page(html_page(f"Story {i}", words, nav="Mirror of the news site"))
        site.original_of[copy] = path
        site.distinct.append(path)
    site.pages["/"] = Page(html_page("Home", article_words(1999, 80), links=originals))
    site.distinct.append("/")
    return site


BFS = {
    "DEPTH_PRIORITY": 1,
    "SCHEDULER_DISK_QUEUE": "scrapy.squeues.PickleFifoDiskQueue",
    "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue",
    "CONCURRENT_REQUESTS": 1,
}


def test_jobdir_resume_drops_copies_of_pages_kept_before_the_pause(
    run_crawl: RunCrawl, serve_site: Any, tmp_path: Path
) -> None:
    site = resume_site()
    server = serve_site(site.pages)
    jobdir = tmp_path / "job"
    spider = {"start_url": server.url + "/"}
    # In-process sketching: items then complete as their pages arrive, so the pause after 4 items comes before
    # the whole (tiny, local) site is fetched; the sketch worker's start-up would let the crawl fetch it all.
    settings = {**BFS, "JOBDIR": str(jobdir), "NEARDUP_WORKER": False}

    first = run_crawl(settings=settings, spider=spider, stop_after_items=4, name="first")
    assert first.returncode == 0, first.log[-3000:]
    assert first.stats["finish_reason"] == "shutdown"  # stopped by the (simulated) Ctrl-C
    assert "Received SIGINT, shutting down gracefully" in first.log
    assert (jobdir / "neardup" / STATE_FILE).is_file()
    control_jobdir = tmp_path / "control-job"
    shutil.copytree(jobdir, control_jobdir)

    second = run_crawl(settings=settings, spider=spider, name="second")
    assert second.returncode == 0, second.log[-3000:]
    assert second.stats["finish_reason"] == "finished"

    # Together the two runs saw every page exactly once (the resumed run continued where the first stopped).
    seen = [path_of(u) for r in (first, second) for u in r.kept_urls + list(r.drops_by_url())]
    runs = f"first kept {first.kept_urls}, dropped {list(first.drops_by_url())}; second kept " \
           f"{second.kept_urls}, dropped {list(second.drops_by_url())}"
    assert sorted(seen) == sorted(site.pages), runs
    kept_first = {path_of(u) for u in first.kept_urls}
    drops_second = {path_of(u): d for u, d in second.drops_by_url().items()}
    # Copies of pages kept before the pause, dropped after it, naming the page kept in the first run.
    resumed = [c for c, o in site.original_of.items() if o in kept_first and c in drops_second]
    assert resumed, f"the pause left no copy of an earlier-kept page for the resumed run: {runs}"
    for copy in resumed:
        assert drops_second[copy]["duplicate_of"] == server.url + site.original_of[copy]
    # Overall: every copy dropped, every original kept, across the two runs.
    kept_all = kept_first | {path_of(u) for u in second.kept_urls}
    assert kept_all == set(site.distinct), runs
    assert "loaded" in second.log and "kept sketches from" in second.log

    # Negative control: the same resume (a copy of the paused JOBDIR) with the saved sketches discarded keeps
    # those copies, so it is the saved state that made the resumed run drop them.
    control = run_crawl(settings={**settings, "JOBDIR": str(control_jobdir), "NEARDUP_RESET": True},
                        spider=spider, name="control")
    assert control.returncode == 0, control.log[-3000:]
    control_kept = {path_of(u) for u in control.kept_urls}
    assert set(resumed) <= control_kept, f"{runs}; control kept {control.kept_urls}"


def test_damaged_state_file_stops_the_crawl_and_is_left_untouched(
    run_crawl: RunCrawl, serve_site: Any, tmp_path: Path
) -> None:
    site = resume_site()
    server = serve_site(site.pages)
    state_dir = tmp_path / "state"
    settings = {"NEARDUP_STATE_DIR": str(state_dir)}
    spider = {"start_url": server.url + "/"}
    first = run_crawl(settings=settings, spider=spider, name="first")
    assert first.returncode == 0 and first.stat("neardup/kept") == len(site.distinct)
    state = state_dir / STATE_FILE
    damaged = state.read_bytes()[: state.stat().st_size // 2]
    state.write_bytes(damaged)
    requests_before = len(server.requests)

    second = run_crawl(settings=settings, spider=spider, name="second")
    assert second.returncode == 1
    assert second.data["crawl_error"]["type"] == "StateError"
    assert "StateError" in second.log and "damaged" in second.log and str(state) in second.log
    assert second.scraped == [] and second.dropped == []
    assert len(server.requests) == requests_before  # not a single page fetched with wrong state
    assert state.read_bytes() == damaged  # not overwritten by an empty index on close


def test_wrong_setting_stops_the_crawl_before_any_request(run_crawl: RunCrawl, serve_site: Any) -> None:
    server = serve_site({"/": Page(html_page("Home", article_words(3, 50)))})
    result = run_crawl(settings={"NEARDUP_THRESHOLD": "1.7"}, spider={"start_url": server.url + "/"})
    assert result.returncode == 1
    assert result.data["crawl_error"]["type"] == "NearDupSettingsError"
    assert "NEARDUP_THRESHOLD='1.7' is not valid" in result.log
    assert "CRITICAL" in result.log  # visible at Scrapy's default log level
    assert server.requests == []


def test_disabled_pipeline_lets_everything_through(run_crawl: RunCrawl, serve_kinds_site: Any) -> None:
    site = kinds_site(articles=1, soft_404s=2)
    server = serve_kinds_site(site)
    result = run_crawl(settings={"NEARDUP_ENABLED": "false"}, spider={"start_url": server.url + "/"})
    assert result.returncode == 0
    assert len(result.scraped) == len(site.pages) + len(site.soft_404) and result.dropped == []
    assert not [k for k in result.stats if k.startswith("neardup/")]
