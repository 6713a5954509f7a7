"""A real crawl over HTTP on 127.0.0.1: a copy altered character by character (lookalike letters, stress marks,
soft hyphens, zero-width spaces) is dropped as a near-duplicate of its original by the pipeline's defaults."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from neardup_testkit import CrawlResult, Page, html_page


def _words(text: str) -> list[str]:
    return text.split()


RUSSIAN = _words(
    "Капибара крупнейший из современных грызунов обитает по берегам рек озёр и болот в тропической и "
    "умеренной зоне Южной Америки держится группами по десять двадцать животных питается травой "
    "водными растениями корой и фруктами хорошо плавает и ныряет может оставаться под водой до пяти "
    "минут"
)
OTHER = _words(
    "Морская свинка одомашненный грызун родом из Анд её держат дома как питомца она не умеет плавать "
    "живёт в клетке ест сено овощи и витамин С который её организм не вырабатывает сам и любит "
    "общество"
)


def _altered(words: list[str]) -> list[str]:
    tricks = [lambda w: w.replace("а", "a").replace("о", "o"), lambda w: w[:1] + "\u0301" + w[1:],
              lambda w: w[: len(w) // 2] + "\u00ad" + w[len(w) // 2 :], lambda w: w[:1] + "\u200b" + w[1:]]
    return [tricks[i % 8 // 2](w) if i % 2 else w for i, w in enumerate(words)]


def test_an_altered_copy_is_dropped_in_a_crawl(run_crawl: Callable[..., CrawlResult], serve_site: Any) -> None:
    article, other = RUSSIAN * 4, OTHER * 4
    server = serve_site({
        "/": Page(html_page("Home", ["start"] * 10, links=["/a", "/b", "/c"])),
        "/a": Page(html_page("Капибара", article)),
        "/b": Page(html_page("Капибара", _altered(article))),
        "/c": Page(html_page("Морская свинка", other)),
    })
    result = run_crawl(spider={"start_url": server.url + "/"})
    assert result.returncode == 0, result.log[-3000:]
    dropped = {d["item"]["url"].rsplit("/", 1)[1]: d["duplicate_of"].rsplit("/", 1)[1] for d in result.dropped}
    assert dropped in ({"b": "a"}, {"a": "b"})
    assert {item["url"].rsplit("/", 1)[1] for item in result.scraped} >= {"c"}
