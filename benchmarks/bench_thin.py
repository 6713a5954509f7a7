"""Thin pages: Javadoc's "Uses of Class X" pages, most of which say only "No usage of X", decided by the defaults.

Data: every page (but the source listings) of Debian's ``libcommons-lang3-java-doc`` (Javadoc 17, ``<main>``) and
``libcommons-io-java-doc`` (Javadoc 11), fetched and unpacked by the accuracy corpora's own code
(``tests/accuracy/corpora.py``), each read as served and with its semantic markup removed (``strip_semantics``:
no ``<main>``, neutral class names). Every page is decided as ``neardup dedupe`` decides it (its host's template
learned over all the pages of its variant, the first seen kept).

Labels come from the independent labeller (``tests/accuracy/labels.py``: lxml, Javadoc's main-content selectors, a
tokenizer of its own): two pages are distinct when the Jaccard of their main contents' word 5-shingles is at most
0.5 (pages of fewer than five words compare their word sets). A drop naming a distinct page is a false drop.

Run: ``python benchmarks/bench_thin.py [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "accuracy"))

from corpora import fetch_package, parse, serialize, strip_semantics  # noqa: E402
from labels import main_text, set_jaccard, shingles, words  # noqa: E402

from scrapy_neardup.core.blocks import split_blocks, thin  # noqa: E402
from scrapy_neardup.core.dedupe import Deduper  # noqa: E402
from scrapy_neardup.core.host_template import learn_template  # noqa: E402
from scrapy_neardup.core.sketch import Sketcher  # noqa: E402
from scrapy_neardup.core.text import clean_text  # noqa: E402

PACKAGES = (("libcommons-lang3-java-doc", "usr/share/doc/libcommons-lang3-java/api"),
            ("libcommons-io-java-doc", "usr/share/doc/libcommons-io-java/api"))
DISTINCT_AT_MOST = 0.5


def load() -> list[tuple[str, bytes]]:
    pages = []
    for package, folder in PACKAGES:
        tree, _ = fetch_package(package)
        for path in sorted((tree / folder).rglob("*.html")):
            if "src-html" in path.parts:
                continue
            pages.append((f"http://{package}.test/{path.relative_to(tree / folder)}", path.read_bytes()))
    return pages


def label_sets(pages: list[tuple[str, bytes]]) -> dict[str, set[str]]:
    out = {}
    for key, html in pages:
        tokens = words(main_text(html, "javadoc"))
        out[key] = shingles(tokens) if len(tokens) >= 5 else set(tokens)
    return out


def decide(pages: list[tuple[str, bytes]]) -> tuple[dict[str, str | None], int]:
    sketcher = Sketcher()
    htmls = [html for _, html in pages]
    blocks = sketcher.block_hashes(htmls)
    by_host: dict[str, list] = {}
    for (key, _), hashes in zip(pages, blocks, strict=True):
        if hashes is not None:
            by_host.setdefault(key.split("/")[2], []).append(hashes)
    learned = {host: learn_template(sample).hashes for host, sample in by_host.items()}
    templates = [learned.get(key.split("/")[2]) for key, _ in pages]
    thin_pages = 0
    for html, template in zip(htmls, templates, strict=True):
        cleaned = clean_text(html, True, sketcher.max_chars, "auto")
        thin_pages += thin(split_blocks(cleaned.utf8), None if cleaned.marked else template)
    verdicts = Deduper(sketcher).check_many([k for k, _ in pages], htmls, templates=templates)
    return {key: None if v.match is None else v.match.key for (key, _), v in zip(pages, verdicts, strict=True)}, \
        thin_pages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    served = load()
    stripped = []
    for key, html in served:
        root = parse(html)
        strip_semantics(root)
        stripped.append((key, serialize(root)))
    labels = label_sets(served)
    stubs = sum(1 for key in labels if "/class-use/" in key)
    rows = []
    for variant, pages in (("served", served), ("stripped", stripped)):
        start = time.process_time()
        decisions, thin_pages = decide(pages)
        cpu = time.process_time() - start
        dropped = [(k, m) for k, m in decisions.items() if m is not None]
        false = [(k, m) for k, m in dropped if set_jaccard(labels[k], labels[m]) <= DISTINCT_AT_MOST]
        row = {"variant": variant, "pages": len(pages), "label_stubs": stubs, "thin": thin_pages,
               "dropped": len(dropped), "false_drops": len(false), "examples": false[:5], "cpu_s": round(cpu, 2)}
        rows.append(row)
        print(f"{variant:9} pages {len(pages)}  thin {thin_pages}  dropped {len(dropped)}  false drops {len(false)}"
              f"  cpu {cpu:.1f} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
