"""Save a locally served site's posts for ``bench_openweb.py``: the layout of a whole site (see its module doc).

The site is served on a loopback address by its own server (built from its repository); this script reads the
index page given, follows the links on it that match ``--links`` (paths on the same server), and writes each
page to ``<to>/pages/<last path segment>.html`` and ``<to>/site.json``. ``--host`` is sent as the ``Host``
header (with ``X-Forwarded-Proto: https``), for servers that route by host name. Only loopback addresses are
fetched.

    python benchmarks/fetch_site.py --from http://127.0.0.1:6060/blog/all --host go.dev \\
        --links '^/blog/[^/]+$' --url https://go.dev/blog/ --gold 'div.Article div.markdown' \\
        --to ~/.cache/scrapy-neardup/openweb/goblog
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import re
import socket
import urllib.request
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import lxml.html


def _loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    try:
        return all(ipaddress.ip_address(info[4][0]).is_loopback for info in socket.getaddrinfo(host, None))
    except (OSError, ValueError):
        return False


def _get(url: str, host: str | None) -> bytes:
    headers = {"Host": host, "X-Forwarded-Proto": "https"} if host else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as response:
        body: bytes = response.read()
        return body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="index", required=True, help="the index page, on a loopback address")
    parser.add_argument("--host", help="Host header to send")
    parser.add_argument("--links", required=True, help="regular expression the paths of the posts match")
    parser.add_argument("--url", required=True, help="the site's public base URL of the posts (for site.json)")
    parser.add_argument("--gold", required=True, help="CSS selector of a post's body (for site.json)")
    parser.add_argument("--to", type=Path, required=True)
    args = parser.parse_args()
    if not _loopback(args.index):
        parser.exit(2, f"fetch_site: {args.index} is not on a loopback address\n")
    root = lxml.html.fromstring(_get(args.index, args.host))
    pattern = re.compile(args.links)
    paths = sorted({urlsplit(href).path for href in root.xpath("//a/@href") if pattern.search(urlsplit(href).path)
                    and not urlsplit(href).netloc})
    pages = args.to / "pages"
    pages.mkdir(parents=True, exist_ok=True)
    for path in paths:
        name = path.rstrip("/").rsplit("/", 1)[-1]
        (pages / f"{name}.html").write_bytes(_get(urljoin(args.index, path), args.host))
    (args.to / "site.json").write_text(json.dumps({"url": args.url, "gold": args.gold}, indent=2) + "\n")
    print(f"fetch_site: {len(paths)} pages to {pages}")


if __name__ == "__main__":
    main()
