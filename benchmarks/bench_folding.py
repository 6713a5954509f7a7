"""Copies altered character by character: lookalike letters, accents, soft hyphens, zero-width characters.

Real pages of Debian documentation packages in Greek, Russian, German, Japanese, Vietnamese and Chinese (the
sources and the tricks are described in ``tests/accuracy/folding.py``), each copied with one trick family at a
realistic and at a spammy rate; the product decides as ``neardup dedupe`` does, with the default settings. Prints,
per source, family and rate, the copies found (dropped naming their original) and the false pairs (a drop naming a
page whose text is not a near-duplicate), then the share found per family over every source, and the estimated
resemblance of the capybara pair of the lecture in ``shared/seeds/000_*.txt`` (its two versions of one text).
Writes ``benchmarks/results/folding.json``.

    python benchmarks/bench_folding.py [--pages N] [--source NAME ...] [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "accuracy"))

from folding import RATES, SOURCES, TRICKS, load_pages, measure  # noqa: E402

from scrapy_neardup.core.sketch import Sketcher  # noqa: E402

_CAPYBARA = "cyclowiki.org/wiki/Капиbara"
_CAPYBARA_END = "перепонки."


def capybara_pair(seeds: Path) -> dict[str, object] | None:
    """The lecture's own two versions of its capybara article (each from its ``cyclowiki.org`` line to the end of
    its "Внешний вид" section): one has stress marks, the other other Latin letters in Cyrillic words and typos."""
    found = sorted(seeds.glob("000_*.txt"))
    if not found:
        return None
    text = found[0].read_text(encoding="utf-8")
    versions = []
    start = text.find(_CAPYBARA)
    while start >= 0 and len(versions) < 2:
        end = text.find(_CAPYBARA_END, start)
        versions.append(text[start : end + len(_CAPYBARA_END) if end > 0 else len(text)])
        start = text.find(_CAPYBARA, start + len(_CAPYBARA))
    if len(versions) < 2:
        return None
    sketcher = Sketcher()
    one, two = (sketcher.sketch(version) for version in versions)
    return {"words": [len(version.split()) for version in versions], "resemblance": one.resemblance(two),
            "shared": int((one.signature == two.signature).sum()), "k": sketcher.num_perm}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=120, help="pages per source (default 120)")
    parser.add_argument("--source", action="append", choices=[source.name for source in SOURCES])
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "folding.json")
    args = parser.parse_args()
    sources = [source for source in SOURCES if not args.source or source.name in args.source]
    rows = []
    print(f"{'source':<11} {'script':<19} {'family':<12} {'rate':<10} {'copies':>6} {'found':>6} {'share':>6} "
          f"{'false':>5}")
    for source in sources:
        pages = load_pages(source, args.pages)
        for family in TRICKS:
            for rate in RATES:
                outcome = measure(source, pages, family, rate)
                rows.append(asdict(outcome))
                print(f"{source.name:<11} {source.script:<19} {family:<12} {rate:<10} {outcome.copies:>6} "
                      f"{outcome.found:>6} {outcome.found_share:>6.3f} {outcome.false_pairs:>5}", flush=True)
    totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for row in rows:
        total = totals[row["family"], row["rate"]]
        total[0] += row["copies"]
        total[1] += row["found"]
        total[2] += row["false_pairs"]
    print("\nevery source:")
    for (family, rate), (copies, found, false) in totals.items():
        print(f"  {family:<12} {rate:<10} {found}/{copies} found ({found / copies:.3f}), {false} false pairs")
    capybara = capybara_pair(ROOT.parent / "shared" / "seeds")
    if capybara is not None:
        print(f"\ncapybara pair of the lecture ({capybara['words']} words): {capybara['shared']}/{capybara['k']} "
              f"positions shared, estimated resemblance {capybara['resemblance']:.3f}")
    args.output.write_text(json.dumps({"pages_per_source": args.pages, "rows": rows, "capybara": capybara,
                                       "totals": {f"{f}/{r}": v for (f, r), v in totals.items()}}, indent=1))


if __name__ == "__main__":
    main()
