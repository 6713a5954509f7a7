"""How close a reading of an article page comes to the reading of its print copy: the limit that extraction sets on
finding print copies by resemblance.

A print copy (``bench_openweb.print_copy``) holds the gold article text alone, in a print page's chrome. It is found
when the reading of the original and the reading of the copy have a word 5-shingle resemblance of about the
threshold or more (0.9 by default: t = 107 of k = 128 positions, so a pair of resemblance 0.85 is found about 7
times in 10). For each page of a data set (the layouts of ``bench_openweb.py``), as served and with its semantic markup
removed, this prints how many originals reach each resemblance with their print copy, the exact resemblance of the
product's own shingles (normalized words, 5-shingles), when both pages are read by:

* ``auto``: the defaults (host templates learned over the originals, as ``bench_openweb.py`` learns them);
* ``trafilatura``: trafilatura's extraction (defaults), the peer's reading;
* ``resiliparse``: Resiliparse's ``extract_plain_text(main_content=True)`` on the whole page;
* ``best of three``: per page, the best of the three, chosen with hindsight (no reader can choose so);
* ``gold``: the gold text itself against the default's reading of the print copy (an extraction of the original as
  good as the human's).

Run: ``python benchmarks/bench_readings.py --dir ~/.cache/scrapy-neardup/openweb/wcxb [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_openweb import (  # noqa: E402
    DEFAULT_DIR,
    Article,
    Page,
    host_of,
    host_templates,
    load_articles,
    print_copy,
    stripped,
)

from scrapy_neardup.core.sketch import Sketcher  # noqa: E402

RESEMBLANCES = (0.9, 0.85, 0.8)
READERS = ("auto", "trafilatura", "resiliparse")


def _trafilatura(html: bytes) -> bytes:
    import trafilatura  # the bench extra

    return (trafilatura.extract(html) or "").encode()


def _resiliparse(html: bytes) -> bytes:
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    return extract_plain_text(HTMLTree.parse_from_bytes(html), main_content=True).encode()


def resemblances(articles: list[Article], variant: str) -> dict[str, list[float]]:
    """Per reader (and ``best of three``, ``gold``), each article's resemblance with its print copy."""
    sketcher = Sketcher()
    originals = [Page(a.url, i, "original", a.html) for i, a in enumerate(articles)]
    copies = [Page(f"https://{host_of(a.url)}/print/{a.key}", i, "print", print_copy(a))
              for i, a in enumerate(articles)]
    if variant == "stripped":
        originals, copies = stripped(originals), stripped(copies)
    templates = host_templates(originals, sketcher.block_hashes([p.html for p in originals]))

    def auto(page: Page) -> bytes:
        return sketcher.text(page.html, template=templates.get(host_of(page.key) or ""))

    readers: dict[str, Callable[[Page], bytes]] = {
        "auto": auto, "trafilatura": lambda p: _trafilatura(p.html), "resiliparse": lambda p: _resiliparse(p.html)}
    out: dict[str, list[float]] = {name: [] for name in (*READERS, "best of three", "gold")}
    for article, original, copy in zip(articles, originals, copies, strict=True):
        for name, read in readers.items():
            out[name].append(sketcher.jaccard(read(original), read(copy), is_html=False))
        out["best of three"].append(max(out[name][-1] for name in READERS))
        out["gold"].append(sketcher.jaccard(article.gold.encode(), auto(copy), is_html=False))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=Path(os.environ.get("NEARDUP_OPENWEB_DIR", DEFAULT_DIR)))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    try:
        articles = load_articles(args.dir)
    except FileNotFoundError as error:
        parser.exit(2, f"bench_readings: {error}\n")
    rows: list[dict[str, Any]] = []
    for variant in ("served", "stripped"):
        start = time.perf_counter()
        found = resemblances(articles, variant)
        for name, values in found.items():
            reached = {str(r): int(sum(v >= r for v in values)) for r in RESEMBLANCES}
            rows.append({"variant": variant, "reader": name, "pages": len(values), "at_least": reached})
            shares = "  ".join(f">= {r}: {n:4d} ({n / max(1, len(values)):.3f})" for r, n in reached.items())
            print(f"{variant:9s} {name:14s} pages {len(values):5d}  {shares}")
        print(f"{variant}: {time.perf_counter() - start:.0f} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"dir": args.dir.name, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
