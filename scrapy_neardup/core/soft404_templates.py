"""Soft-404 templates: what a host answers, with status 200, for a path that cannot exist. No frameworks here;
the Scrapy layer probes hosts and feeds this (:mod:`scrapy_neardup.crawl.soft404`).

A probe asks for ``/<random>`` and, for each first path segment a host's pages live under, for
``/<segment>/<random>``: sites often answer unknown URLs of one section with that section's own "not found" page. A
page is compared with the root's template and its own segment's. A probe answered 200 gives a template: its sketch.
A page whose sketch agrees with one of its host's templates in at least ``t`` of ``k`` positions (the near-duplicate
rule of the whole package: ``P(flag) = P[Binomial(k, r) >= t]`` for resemblance ``r``) is a soft 404.

Many "not found" pages name the URL asked for ("The requested URL /a/b.html was not found"). In ``"auto"`` mode
the message is most of what a soft-404 page says (its template is left out), so both sides are sketched without
the words of their own URL (:func:`url_words`): a soft 404 then says exactly what the probe said, and a real page
still says what it says.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import numpy as np

from .normalize import normalize_utf8
from .shingles import join_texts, tokens, word_hashes
from .sketch import Sketch

#: Start of the last path segment of every probe URL: what a site owner finds in the server's logs (see
#: docs/addon.md), followed by 32 random hex digits.
PROBE_MARKER = "neardup-soft404-probe-"


def first_segment(url: str) -> str | None:
    """The first path segment of ``url`` when pages live under it (``/news/a.html`` -> ``"news"``); ``None``
    for pages at the root (``/about.html``, ``/``)."""
    path = urlsplit(url).path
    parts = path.split("/")
    # ["", "news", "a.html"]: a segment with something below it is a directory.
    if len(parts) >= 3 and parts[1]:
        return parts[1]
    return None


def probe_path(segment: str | None) -> str:
    """A path that cannot exist: 128 random bits, under ``segment`` when one is given."""
    name = PROBE_MARKER + secrets.token_hex(16)
    return f"/{segment}/{name}" if segment else f"/{name}"


def url_words(url: str) -> np.ndarray:
    """The word hashes (:func:`scrapy_neardup.core.shingles.word_hashes`) of the normalized path and query of
    ``url``: what a "not found" page that names the URL asked for says of it (see the module doc)."""
    parts = urlsplit(url)
    text = normalize_utf8(unquote(f"{parts.path} {parts.query}"))
    buffer, _ = join_texts([text])
    starts, lengths = tokens(buffer)
    return word_hashes(buffer, starts, lengths)


@dataclass(frozen=True, slots=True)
class Soft404Match:
    """A page near-duplicates the soft-404 template answered for ``probe_url``."""

    probe_url: str
    shared: int
    num_perm: int

    @property
    def resemblance(self) -> float:
        return self.shared / self.num_perm


class Soft404Templates:
    """The soft-404 templates of each host, by the first path segment their probe was sent under.

    A page is compared with its host's root template (the probe ``/<random>``, segment ``None``) and with the
    template of its own first path segment (``/news/<random>`` for ``/news/a.html``): what the host answers for
    a URL that cannot exist where the page lives. Which other sections were probed does not matter, so the
    verdict on a page is the same whatever order the crawl met the host's sections in.

    Args:
        min_shared: ``t``, positions a page must share with a template to be a soft 404 (the pipeline's ``t``).
    """

    def __init__(self, min_shared: int) -> None:
        self.min_shared = min_shared
        self._templates: dict[str, dict[str | None, tuple[str, Sketch]]] = {}

    def add(self, host: str, segment: str | None, probe_url: str, sketch: Sketch) -> None:
        """The probe of ``host`` under ``segment`` (``None``: the root) answered 200 with ``sketch``."""
        self._templates.setdefault(host, {})[segment] = (probe_url, sketch)

    def has_templates(self, host: str) -> bool:
        return host in self._templates

    def match(self, host: str, sketch: Sketch, segments: Iterable[str | None] | None = None) -> Soft404Match | None:
        """The template of ``host`` that ``sketch`` shares most positions with, if at least ``t``.

        Args:
            segments: the templates to compare with, by segment (``None``: the root's); by default every
                template of the host.
        """
        templates = self._templates.get(host, {})
        chosen = templates.values() if segments is None else [templates[s] for s in segments if s in templates]
        best: Soft404Match | None = None
        for probe_url, template in chosen:
            shared = template.shared_positions(sketch)
            if shared >= self.min_shared and (best is None or shared > best.shared):
                best = Soft404Match(probe_url, shared, sketch.num_perm)
        return best


