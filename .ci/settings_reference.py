"""Write (or check) docs/settings.md, the settings reference, from the settings registry
(scrapy_neardup/store/settings_registry.py): every ``NEARDUP_*`` setting with its type, default, bounds and meaning.

    python .ci/settings_reference.py            # rewrite the page
    python .ci/settings_reference.py --check    # exit 1 if the committed page differs from what the registry gives
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scrapy_neardup.store.settings_registry import reference_page, write_reference

TARGET = Path(__file__).resolve().parent.parent / "docs" / "settings.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is not what the registry gives")
    args = parser.parse_args(argv)
    if args.check:
        same = TARGET.exists() and TARGET.read_text(encoding="utf-8") == reference_page()
        if not same:
            print(f"{TARGET} differs from the registry: run python .ci/settings_reference.py", file=sys.stderr)
        return 0 if same else 1
    changed = write_reference(TARGET)
    print(f"{TARGET}: {'written' if changed else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
