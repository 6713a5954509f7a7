"""Real crawls of a site whose template is most of each short page: the default sketches what each page says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from neardup_testkit import CrawlResult, NearDupSite, check_kinds_outcome, kinds_site, path_of, template_site


def _outcome(result: CrawlResult) -> tuple[set[str], dict[str, str]]:
    kept = {path_of(url) for url in result.kept_urls}
    dropped = {path_of(url): path_of(drop["duplicate_of"]) for url, drop in result.drops_by_url().items()}
    return kept, dropped


def _wrong_drops(site: NearDupSite, dropped: dict[str, str]) -> dict[str, str]:
    """Drops that do not name the other page of a copy pair (whichever of the two arrived first is kept)."""
    pairs = {frozenset(pair) for pair in site.original_of.items()}
    return {page: of for page, of in dropped.items() if frozenset((page, of)) not in pairs}


def test_template_heavy_site_body_drops_distinct_pages_auto_drops_only_copies(
    tmp_path: Path, serve_site: Any, run_crawl: Any,
) -> None:
    site = template_site()
    server = serve_site(site.pages)
    body = run_crawl(settings={"NEARDUP_CONTENT": "body"}, spider={"start_url": server.url + "/"}, name="body")
    assert body.returncode == 0, body.log[-3000:]
    # The site shows the problem: on the whole body, distinct API stubs look like near-duplicates.
    assert _wrong_drops(site, _outcome(body)[1])

    auto = run_crawl(spider={"start_url": server.url + "/"}, settings={"NEARDUP_STATE_DIR": str(tmp_path / "s")},
                     name="auto")
    assert auto.returncode == 0, auto.log[-3000:]
    kept, dropped = _outcome(auto)
    assert _wrong_drops(site, dropped) == {}
    assert len(dropped) == len(site.original_of)  # one page of every copy pair is dropped, naming the other
    assert len(kept) == len(site.distinct)
    assert auto.stat("neardup/templates_learned") == 1
    # The site has fewer pages than a sample: every page waited until the crawl brought no more.
    assert auto.stat("neardup/template_pages_held") == len(site.pages)

    # The next crawl of the same store reads the template back: every page is recognized as itself.
    again = run_crawl(spider={"start_url": server.url + "/"}, settings={"NEARDUP_STATE_DIR": str(tmp_path / "s")},
                      name="again")
    assert again.returncode == 0, again.log[-3000:]
    assert again.stat("neardup/templates_loaded") == 1
    assert again.stat("neardup/template_pages_held") == 0
    assert again.stat("neardup/revisited") == len(site.distinct)
    assert _outcome(again)[1] == dropped


def test_pages_are_decided_in_arrival_order_when_template_loads_answer_out_of_order(
    serve_kinds_site: Any, run_crawl: Any,
) -> None:
    """A backend whose first template loads answer late (a cold node) must not let a copy, found through its
    original's links and asking later, be decided before the original: every original is kept, every copy
    dropped naming it, and the backend is asked for the host's template once."""
    site = kinds_site(articles=2, soft_404s=2)
    server = serve_kinds_site(site)
    result = run_crawl(settings={"NEARDUP_BACKEND": "neardup_testkit.ColdTemplateLoadBackend",
                                 "NEARDUP_TEST_SLOW_LOADS": 3, "NEARDUP_TEST_LOAD_DELAY": 2.0},
                       spider={"start_url": server.url + "/"})
    assert result.returncode == 0, result.log[-3000:]
    check_kinds_outcome(result, site, server)
    assert result.stat("neardup/test_template_loads") == 1
