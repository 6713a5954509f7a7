"""The product's defaults on real template-heavy sites, as served and stripped of semantic markup.

Targets: no page dropped whose main content is <= 0.5 like the page it names; precision >= 0.99; >= 95% of the
real near-duplicate pairs not left whole. Measured two ways: ``neardup dedupe`` on the raw HTML (templates learned
over the whole input), and real crawls over HTTP on 127.0.0.1 with the pipeline's defaults (templates learned from
each host's first pages, which wait for it). The body-mode figures are asserted too, so that the corpora keep
showing the problem the default solves.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from corpora import VARIANTS, Corpus, Variant
from evaluate import Decision, Evaluation, evaluate
from labels import Labels

from scrapy_neardup.cli.main import main as neardup

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "scrapy"))

from neardup_testkit import Page, SiteServer, run_crawl_process  # noqa: E402

PRECISION = 0.99
RECALL = 0.95


def dedupe(corpus: Corpus, variant: Variant, tmp_path: Path, *options: str) -> dict[str, Decision]:
    """``neardup dedupe`` of the corpus' pages (raw HTML, crawl order, ``url`` and ``id`` = the page key)."""
    source = tmp_path / f"{corpus.name}-{variant}.jsonl"
    with source.open("w") as out:
        for key, html in corpus.html(variant):
            out.write(json.dumps({"id": key, "url": key, "text": html.decode("utf-8", "replace")}) + "\n")
    output = tmp_path / f"{corpus.name}-{variant}-out.jsonl"
    assert neardup(["dedupe", str(source), "-o", str(output), "--no-progress", *options]) == 0
    decisions: dict[str, Decision] = {}
    for line in output.read_text().splitlines():
        record = json.loads(line)
        of = record["duplicate_of"]
        decisions[record["id"]] = ("kept", None) if of is None else ("dropped", of)
    return decisions


def _describe(scores: Evaluation) -> str:
    worst = "; ".join(f"{d.dropped} -> {d.kept} (J={d.jaccard:.2f})" for d in scores.worst_false_drops[:3])
    return f"{scores.false_drops} false drops, precision {scores.precision:.3f}: {worst}"


@pytest.mark.parametrize("variant", VARIANTS)
def test_neardup_dedupe_defaults_drop_no_distinct_page(
    variant: Variant, corpora: dict[str, Corpus], labels: dict[str, Labels], tmp_path: Path,
) -> None:
    real = whole = 0
    for name, corpus in corpora.items():
        scores = evaluate(corpus, dedupe(corpus, variant, tmp_path), labels=labels[name])
        assert scores.false_drops == 0 and scores.precision >= PRECISION, f"{name} {variant}: {_describe(scores)}"
        real += scores.real_pairs
        whole += scores.whole
    assert real >= 700  # rustdoc's re-exports and the Python docs served twice
    assert 1 - whole / real >= RECALL, f"{whole} of {real} real pairs left whole"


def test_whole_body_sketches_drop_distinct_pages_on_these_sites(
    corpora: dict[str, Corpus], labels: dict[str, Labels], tmp_path: Path,
) -> None:
    """What the corpora are for: the old default (the whole body) loses distinct pages on the Sphinx sites."""
    false = {name: evaluate(corpora[name], dedupe(corpora[name], "served", tmp_path, "--content", "body"),
                            labels=labels[name]).false_drops for name in ("pydicom", "fonttools", "groonga")}
    assert all(count > 10 for count in false.values()), false


def _serve(corpus: Corpus, variant: Variant) -> tuple[list[SiteServer], Callable[[str], str]]:
    """Each host of the corpus served on its own loopback address, and the map from crawled URL to page key."""
    servers: list[SiteServer] = []
    key_of: dict[tuple[str, str], str] = {}
    for number, host in enumerate(corpus.hosts):
        pages = {urlsplit(page.key).path: Page(page.html(variant).decode("utf-8", "replace"))
                 for page in corpus.pages if page.host == host}
        server = SiteServer(pages, host=f"127.0.0.{number + 2}").start()
        servers.append(server)
        for page in corpus.pages:
            if page.host == host:
                key_of[(server.host, urlsplit(page.key).path)] = page.key

    def key(url: str) -> str:
        parts = urlsplit(url)
        return key_of[(parts.hostname or "", parts.path)]

    return servers, key


@pytest.mark.parametrize(("name", "variant"), [("pydicom", "stripped"), ("python-twice", "stripped")])
def test_a_crawl_with_the_default_settings_drops_no_distinct_page(
    name: str, variant: Variant, corpora: dict[str, Corpus], labels: dict[str, Labels], tmp_path: Path,
) -> None:
    """A real crawl of the site over HTTP, breadth-first, the pipeline on its defaults (the host's first pages wait
    for its template)."""
    corpus = corpora[name]
    servers, key_of = _serve(corpus, variant)
    try:
        starts = [server.url + urlsplit(corpus.pages[0].key).path for server in servers]
        # Scrapy's own room for responses: pages waiting for their host's template make room for themselves.
        settings: dict[str, Any] = {"DEPTH_PRIORITY": 1, "CONCURRENT_REQUESTS": 8,
                                    "SCHEDULER_DISK_QUEUE": "scrapy.squeues.PickleFifoDiskQueue",
                                    "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue"}
        spider = {"start_url": starts[0], "extra_starts": starts[1:], "start_hosts_only": True}
        result = run_crawl_process(tmp_path, settings=settings, spider=spider, name=f"{name}-{variant}", timeout=600)
    finally:
        for server in servers:
            server.stop()
    assert result.returncode == 0, result.log[-3000:]
    decisions: dict[str, Decision] = {key_of(item["url"]): ("kept", None) for item in result.scraped}
    for drop in result.dropped:
        decisions[key_of(drop["item"]["url"])] = ("dropped", key_of(drop["duplicate_of"]))
    # Pages the crawl did not reach (no link leads to them) are no decision of its.
    reached = {key: decision for key, decision in decisions.items()}
    missing = [key for key in corpus.keys if key not in reached]
    assert len(missing) <= len(corpus) - corpus.reached
    for key in missing:
        reached[key] = ("kept", None)
    scores = evaluate(corpus, reached, labels=labels[name])
    learned = {name: value for name, value in result.stats.items() if "template" in name}
    assert scores.false_drops == 0 and scores.precision >= PRECISION, f"{_describe(scores)}; {learned}"
    assert scores.recall >= RECALL, f"{scores.whole} of {scores.real_pairs} real pairs left whole; {learned}"
    assert result.stat("neardup/templates_learned") == len(corpus.hosts)
