"""A spider that follows every link of one site and yields ``{url, title, text}`` per page."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import scrapy
from scrapy.http import Response, TextResponse

from neardup_demo.items import PageItem

# Text nodes that are not rendered as page text.
_VISIBLE_TEXT = ".//text()[not(ancestor::script or ancestor::style or ancestor::noscript)]"


def page_text(response: Response) -> str:
    """The page's main text: ``<main>``, else ``<article>``, else ``<body>``.

    Near-duplicate detection compares shingle sets, so boilerplate (menus, headers, footers) dilutes the
    resemblance of two copies of the same article; the main content is what should be compared.
    """
    for container in ("//main", "//article", "//body"):
        nodes = response.xpath(container)
        if nodes:
            return " ".join(part.strip() for part in nodes[0].xpath(_VISIBLE_TEXT).getall() if part.strip())
    return ""


class DemoSpider(scrapy.Spider):
    """Crawl one site from ``start_url`` (spider argument, or the ``DEMO_START_URL`` setting).

    Usage: ``scrapy crawl demo -a start_url=http://127.0.0.1:8000/ -O pages.jsonl``
    """

    name = "demo"
    allowed_domains: list[str] = []

    def __init__(self, start_url: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_url = start_url

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> DemoSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        spider.start_url = spider.start_url or crawler.settings.get("DEMO_START_URL")
        if not spider.start_url:
            raise ValueError("give the site to crawl: scrapy crawl demo -a start_url=http://127.0.0.1:8000/")
        # Stay on the start URL's host (OffsiteMiddleware reads allowed_domains when the spider opens).
        spider.allowed_domains = [urlsplit(spider.start_url).hostname or ""]
        return spider

    async def start(self) -> AsyncIterator[Any]:
        yield scrapy.Request(str(self.start_url), callback=self.parse)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        if not isinstance(response, TextResponse):  # an image, a PDF: nothing to read or follow
            return
        yield PageItem(
            url=response.url,
            title=(response.xpath("//title/text()").get() or "").strip(),
            text=page_text(response),
        )
        yield from response.follow_all(css="a", callback=self.parse)
