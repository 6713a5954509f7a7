"""Canonical links: a page that names another URL its canonical one is a copy of it.

Design notes: docs/architecture.md#scrapy_neardupcrawlcanonical
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit, urlunsplit

from scrapy.exceptions import DropItem
from scrapy.http import HtmlResponse
from scrapy.http.request import NO_CALLBACK
from selectolax.lexbor import LexborHTMLParser
from w3lib.url import safe_url_string

from ..errors import NearDupError
from .context import CrawlContext
from .soft404 import PROBE_META
from .startup import component_startup

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

_DEFAULT_PORTS = {"http": "80", "https": "443"}
#: Characters of a page looked at for its ``<head>`` (a canonical link further down is not one).
HEAD_LIMIT = 256 * 1024
#: One ``<url>; params`` element of a ``Link`` header; params may hold quoted commas.
_LINK = re.compile(r'<([^>]*)>((?:\s*;\s*[^;,="]+(?:=(?:"[^"]*"|[^;,]*))?)*)')
_REL = re.compile(r'(?:^|;)\s*rel\s*=\s*(?:"([^"]*)"|([^;,\s]*))', re.IGNORECASE)


class CanonicalDropped(DropItem, NearDupError):
    """An item dropped because its page names as canonical URL a page checked earlier in the crawl.

    Raised with ``log_level="DEBUG"``; counted as ``item_dropped_reasons_count/CanonicalDropped``.

    Attributes:
        url: the dropped page's key.
        canonical: the canonical URL it named (normalized).
        duplicate_of: the kept page holding that URL's content (the canonical page itself, when it was kept).
    """

    def __init__(self, url: str, canonical: str, duplicate_of: str) -> None:
        via = "" if canonical == normalize_url(duplicate_of) else f", a copy of {duplicate_of}"
        super().__init__(f"canonical link to {canonical}{via}", log_level="DEBUG")
        self.url = url
        self.canonical = canonical
        self.duplicate_of = duplicate_of


# -- reading a canonical URL -------------------------------------------------------------------------------------


def normalize_url(url: str) -> str | None:
    """``url`` as canonical URLs and keys are compared: an http(s) URL with scheme and host in lower case, the
    default port and the fragment dropped, an empty path made ``/``, and percent-encoding as in Scrapy's request
    URLs (``w3lib``'s ``safe_url_string``); ``None`` for anything else."""
    try:
        parts = urlsplit(safe_url_string(url.strip()))
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    netloc = parts.hostname.lower()
    if ":" in netloc:  # IPv6
        netloc = f"[{netloc}]"
    if port is not None and str(port) != _DEFAULT_PORTS[scheme]:
        netloc += f":{port}"
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))


def canonical_from_header(values: list[bytes] | list[str], base: str) -> list[str]:
    """The URLs the ``Link`` header ``values`` name with ``rel="canonical"``, resolved against ``base``."""
    found = []
    for value in values:
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        for target, params in _LINK.findall(text):
            for quoted, bare in _REL.findall(params):
                if "canonical" in (quoted or bare).lower().split():
                    found.append(urljoin(base, target.strip()))
    return found


def canonical_from_html(text: str, base: str) -> list[str]:
    """The ``href`` of each ``<link rel="canonical">`` in the ``<head>`` of ``text``, resolved against ``base``
    (and against the page's ``<base href>`` when it has one)."""
    head = text[:HEAD_LIMIT]
    lowered = head.lower()
    if "canonical" not in lowered:
        return []
    for end_tag in ("</head", "<body"):
        end = lowered.find(end_tag)
        if end >= 0:
            head = head[:end]
            break
    tree = LexborHTMLParser(head)
    base_tag = tree.css_first("base[href]")
    if base_tag is not None:
        base = urljoin(base, base_tag.attributes.get("href") or "")
    found = []
    for node in tree.css("link[href]"):
        rel = (node.attributes.get("rel") or "").lower().split()
        if "canonical" in rel:
            found.append(urljoin(base, (node.attributes.get("href") or "").strip()))
    return found


def resolve_canonical(url: str, named: list[str]) -> tuple[str | None, str | None]:
    """The canonical URL a page at ``url`` names (``named``: every URL it names so), normalized, when it names
    one other than itself; and why a named one is not used (``None``: nothing to say)."""
    canonicals = {c for c in map(normalize_url, named) if c is not None}
    if not canonicals:
        return None, "not an http(s) URL" if named else None
    if len(canonicals) > 1:
        return None, "several canonical URLs"
    (canonical,) = canonicals
    own = normalize_url(url)
    if canonical == own:
        return None, None
    if urlsplit(canonical).path == "/" and own is not None and urlsplit(own).path != "/":
        return None, "the home page named by another page"
    return canonical, None


# -- the downloader middleware -------------------------------------------------------------------------------


class CanonicalLinkMiddleware:
    """Downloader middleware: reads the canonical URL of every page's final response (``Link`` header and HTML
    ``<head>``) for the pipeline (module doc). At a number below 600 (``RedirectMiddleware``), so that it sees the
    final response; the add-on puts it at 75."""

    def __init__(self, crawler: Crawler) -> None:
        self.stats = crawler.stats
        self.hooks = CrawlContext.of(crawler).hooks
        self.hooks.reads_canonical_links = True

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> CanonicalLinkMiddleware:
        from scrapy.exceptions import NotConfigured

        with component_startup(crawler):
            context = CrawlContext.of(crawler)
            enabled, hosts = context.config.enabled, context.hosts
        if not enabled or not hosts.canonical:
            raise NotConfigured("NEARDUP_ENABLED or NEARDUP_CANONICAL is False")
        return cls(crawler)

    def process_response(self, request: Request, response: Response, spider: Any = None) -> Response:
        if request.callback is NO_CALLBACK or request.meta.get(PROBE_META) or response.status != 200:
            return response  # robots.txt, media, soft-404 probes; errors
        named = canonical_from_header(response.headers.getlist(b"Link"), response.url)
        if isinstance(response, HtmlResponse):
            named += canonical_from_html(response.text, response.url)
        if not named:
            return response
        canonical, ignored = resolve_canonical(response.url, named)
        if ignored is not None:
            self._inc("canonical_ignored")
            logger.debug("canonical link of %s ignored (%s): %s", response.url, ignored, named)
        if canonical is not None:
            self.hooks.add_canonical_link(response.url, canonical)
        return response

    def _inc(self, name: str) -> None:
        if self.stats is not None:
            self.stats.inc_value("neardup/" + name)


# -- what the crawl knows ----------------------------------------------------------------------------------------


class CanonicalLinks:
    """Which kept page holds the content of each URL checked in this crawl, and which kept pages named a canonical
    URL not checked yet (module doc). URLs are held as the hashes of their normalized form.

    Args:
        context: the crawl's context (its counters, and its hooks: canonical links read from responses).
    """

    def __init__(self, context: CrawlContext) -> None:
        self._count = context.count
        self._hooks = context.hooks
        self._holder: dict[int, str] = {}  # checked URL -> the kept page holding its content
        self._claims: dict[int, str] = {}  # canonical URL not checked yet -> the first kept page naming it

    def named(self, key: str, content: Any) -> str | None:
        """The canonical URL page ``key`` names, when another (normalized): read from its response by
        :class:`CanonicalLinkMiddleware`, else from the HTML in ``content`` (its item's text field)."""
        if self._hooks.reads_canonical_links:
            return self._hooks.canonical_link(key)
        if not isinstance(content, str) or normalize_url(key) is None:
            return None
        canonical, ignored = resolve_canonical(key, canonical_from_html(content, key))
        if ignored is not None:
            self._count("canonical_ignored", 1)
        return canonical

    def holder(self, canonical: str) -> str | None:
        """The kept page holding the content of the page at ``canonical`` (normalized), if one was checked."""
        return self._holder.get(hash(canonical))

    def checked(self, key: str, kept: str, canonical: str | None) -> None:
        """Page ``key`` was checked: kept (``kept == key``) or a copy of the kept page ``kept``; ``canonical``:
        the canonical URL it named, if another."""
        url = normalize_url(key)
        if url is None:
            return
        self._holder.setdefault(hash(url), kept)
        if canonical is not None and kept == key:
            self._claims.setdefault(hash(canonical), key)

    def claimed_by(self, key: str) -> str | None:
        """The kept page that named ``key`` its canonical URL before ``key`` was checked (once)."""
        url = normalize_url(key)
        return self._claims.pop(hash(url), None) if url is not None and self._claims else None


