#!/usr/bin/env python
"""A small search page over a crawled index, near-duplicates collapsed: each result says how many similar pages
it hides, and a link lists them, each with why it was grouped: the evidence of the crawl's decision (the rule,
the signature positions it shares with the group's kept page, the 95% interval of their resemblance) and a link
to the two pages side by side (the page ``neardup explain --html`` writes).

    python example_project/search_page.py --es-url http://127.0.0.1:9200 --index neardup-demo-pages

The index is one a crawl wrote with ``NEARDUP_SEARCH_INDEX`` (``run_demo.py --search`` does it all). Standard
library only (http.server), plus :func:`es_integration.collapse.search_with_collapse` for the search itself.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from es_integration.client import ConnectionSettings, make_client
from es_integration.collapse import search_with_collapse
from es_integration.mapping import stored_sketched
from scrapy_neardup.cli.explain import Side, explain, render_html
from scrapy_neardup.core.evidence import describe_evidence, evidence, sides
from scrapy_neardup.core.params import SketchParams
from scrapy_neardup.core.sketch import Sketcher

STYLE = ("body{font-family:sans-serif;max-width:46em;margin:2em auto}li{margin:1em 0}.url{color:#060;font-size:90%}"
         "mark{background:#ff6}.similar{font-size:90%}.why{font-size:85%;color:#555}")

#: What a group's page shows of each page's ``neardup`` fields: the crawl's decision and what it rests on.
EVIDENCE_SOURCE = ["neardup.status", "neardup.shared", "neardup.tag", "neardup.fingerprint", "neardup.sketched",
                   "neardup.words", "neardup.page_words"]


def search_body(q: str, group: str | None = None) -> dict[str, Any]:
    """The request: all words, in the title or the text, with a highlighted snippet; one group's pages only
    when ``group`` is given (its kept page first)."""
    query: dict[str, Any] = {"simple_query_string": {"query": q, "fields": ["title^2", "text"],
                                                     "default_operator": "and"}}
    body: dict[str, Any] = {"size": 10, "_source": ["url", "title"], "highlight": {
        "encoder": "html", "pre_tags": ["<mark>"], "post_tags": ["</mark>"],
        "fields": {"text": {"fragment_size": 180, "number_of_fragments": 1}}}}
    if group is None:
        return {**body, "query": query}
    return {**body, "size": 100, "sort": [{"neardup.status": "desc"}, "_score"],
            "_source": ["url", "title", *EVIDENCE_SOURCE],
            "query": {"bool": {"must": [query], "filter": [{"term": {"neardup.group": group}}]}}}


def why_grouped(page: dict[str, Any], kept: dict[str, Any] | None) -> dict[str, Any] | None:
    """The evidence of a duplicate's grouping from its ``neardup`` fields (``page`` and the group's ``kept`` page
    ``_source``): the positions of ``k`` it shared with the kept page when the crawl decided (``neardup.shared``),
    the rule (``exact`` for equal fingerprints), and what of each page was sketched (``sketched``, ``words``,
    ``removed``, and the same of the kept page) where the index holds it. None for the kept page."""
    fields = page.get("neardup") or {}
    if fields.get("status") != "duplicate" or not isinstance(fields.get("shared"), int):
        return None
    kept_fields = (kept or {}).get("neardup") or {}
    num_perm = SketchParams.from_tag(str(fields.get("tag"))).num_perm
    exact = kept is not None and kept_fields.get("fingerprint") == fields.get("fingerprint")
    found = evidence(fields["shared"], num_perm, "exact" if exact else "near_duplicate")
    return {**found, **sides(stored_sketched(fields), stored_sketched(kept_fields))}


def _kept_page(client: Any, index: str, group: str, hits: list[Any]) -> tuple[str | None, dict[str, Any] | None]:
    """The ``_id`` and ``_source`` of a group's kept page: among the hits when it matched the query, else read."""
    for hit in hits:
        if (hit.source or {}).get("neardup", {}).get("status") == "kept":
            return hit.id, hit.source
    doc = client.mget(index=index, ids=[group], source=EVIDENCE_SOURCE)["docs"][0]
    return (group, doc.get("_source") or {}) if doc.get("found") else (None, None)


def render_why(client: Any, index: str, a: str, b: str, back: str) -> str:
    """The two pages side by side as they are sketched (``neardup explain --html``), from their indexed text."""
    docs = client.mget(index=index, ids=[a, b], source=["url", "text", "neardup.tag"])["docs"]
    if not all(d.get("found") and isinstance((d.get("_source") or {}).get("text"), str) for d in docs):
        return "<!doctype html><p>no such pages in the index</p>"
    params = SketchParams.from_tag(str(docs[0]["_source"]["neardup"]["tag"]))
    sides = [Side(str(d["_source"].get("url", d["_id"])), d["_source"]["text"]) for d in docs]
    page = render_html(explain(Sketcher.from_params(params), params.min_shared, sides))
    back = back if back.startswith("/?") else "/"  # only a page of this site
    note = ("<p>The indexed text of each page, sketched again here; the crawl decided on the pages it fetched, "
            "with the evidence the group lists.</p>")
    return page.replace("<body>", f'<body><p><a class="back" href="{html.escape(back)}">back to the group</a></p>'
                        + note, 1)


def render(client: Any, index: str, q: str, group: str | None) -> str:
    """The page: the form, then the results (collapsed), or the pages of one group, each with why it is there."""
    body = ""
    if q:
        found = search_with_collapse(client, index, search_body(q, group), collapse=group is None)
        kept_id, kept_source = _kept_page(client, index, group, found.hits) if group else (None, None)
        items = []
        for hit in found.hits:
            source, url = hit.source or {}, html.escape(str((hit.source or {}).get("url", hit.id)))
            snippet = " ".join((hit.hit or {}).get("highlight", {}).get("text", []))
            similar = ""
            if hit.omitted:
                link = "/?" + urlencode({"q": q, "group": hit.group or ""})
                similar = (f'<a class="similar" href="{html.escape(link)}">{hit.omitted} similar '
                           f'page{"s" if hit.omitted != 1 else ""} omitted</a>')
            fields = why_grouped(source, kept_source) if group else None
            if fields and kept_id is not None:
                here = "/?" + urlencode({"q": q, "group": group or ""})
                link = "/why?" + urlencode({"a": kept_id, "b": hit.id, "back": here})
                similar = (f'<div class="why">grouped with the kept page: {html.escape(describe_evidence(fields))} '
                           f'&middot; <a class="why" href="{html.escape(link)}">why grouped</a></div>')
            items.append(f'<li class="hit"><a class="title" href="{url}">{html.escape(str(source.get("title", url)))}'
                         f'</a><div class="url">{url}</div><div class="snippet">{snippet}</div>{similar}</li>')
        back = f'<p><a class="back" href="/?{html.escape(urlencode({"q": q}))}">back to all results</a></p>'
        # A group's page names the same count its link did ("N similar pages omitted"): the pages it lists are
        # the result shown plus those N.
        others = len(found.hits) - 1
        heading = (f"the result shown and its {others} similar page{'s' if others != 1 else ''}" if group
                   else f"{found.total} pages match")
        body = (f'<p class="summary">{heading}</p>{back if group else ""}<ol class="results">{"".join(items)}</ol>'
                if items else '<p class="summary">no results</p>')
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>Search</title><style>{STYLE}</style></head>'
            f'<body><form action="/"><input name="q" value="{html.escape(q)}" size="40" autofocus> '
            f'<button type="submit">Search</button></form>{body}</body></html>')


def serve(client: Any, index: str, port: int = 0) -> ThreadingHTTPServer:
    """Serve the page on 127.0.0.1 (``port=0``: a free port) from a background thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            parts = urlsplit(self.path)
            params = parse_qs(parts.query)
            q, group = params.get("q", [""])[0].strip(), params.get("group", [None])[0]
            if parts.path == "/why":
                first = {name: values[0] for name, values in params.items()}
                page = render_why(client, index, first.get("a", ""), first.get("b", ""), first.get("back", "/"))
            else:
                page = render(client, index, q, group)
            data = page.encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="search-page", daemon=True).start()
    return server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--es-url", required=True, help="the node, e.g. http://127.0.0.1:9200")
    parser.add_argument("--index", default="neardup-demo-pages", help="the crawled index (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8001, help="port on 127.0.0.1 (default: %(default)s)")
    args = parser.parse_args()
    server = serve(make_client(ConnectionSettings.create(args.es_url)), args.index, args.port)
    print(f"Search page: http://127.0.0.1:{server.server_port}/ (Ctrl-C to stop)", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
