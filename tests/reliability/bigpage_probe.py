"""Measure sketching 50 MB pages in a fresh process: time and peak resident memory above the page itself.

    python bigpage_probe.py OUT.json

For each page kind: build the page (50 MB of UTF-8; ``page_len`` in characters, or bytes for bytes), then
reset the kernel's peak-RSS mark (``/proc/self/clear_refs``, Linux) and time ``Sketcher.sketch(page)``, then
the same through ``NearDuplicatePipeline.process_item``. ``peak_mb``: the peak RSS during the call minus the
RSS before it.
Hostile kinds (a page of nothing but tags, an NFKC bomb) go through ``Sketcher.sketch`` only.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import resource
import sys
import time
from pathlib import Path
from typing import Any

SIZE = 50_000_000


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) // 1024
    return 0


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _words(kind: str) -> list[str]:
    if kind == "ascii":
        rng = random.Random(1)
        return ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
                for _ in range(3000)]
    return ["мост", "гавань", "город", "ремонт", "улица", "новость", "жители", "утро", "漢字", "日本語", "東京"]


def _page(words: list[str], html: bool) -> str:
    rng = random.Random(2)
    unit = " ".join(rng.choice(words) for _ in range(60))
    unit = f"<p>{unit}</p>\n" if html else unit + "\n"
    body = unit * (SIZE // len(unit.encode()))
    return f"<!doctype html><html><body>{body}</body></html>" if html else body


KINDS: dict[str, tuple[Any, bool]] = {  # name -> (build, also through the pipeline)
    "ascii html": (lambda: _page(_words("ascii"), True), True),
    "ascii text": (lambda: _page(_words("ascii"), False), False),
    "cyrillic/cjk html as bytes": (lambda: _page(_words("mb"), True).encode(), True),
    "cyrillic/cjk text": (lambda: _page(_words("mb"), False), False),
    "only tags (<p>a x 12.5M)": (lambda: "<html><body>" + "<p>a" * (SIZE // 4), False),
    "NFKC bomb (U+FDFA x 16.7M)": (lambda: "\ufdfa" * (SIZE // 3), False),
}


def main(out: str) -> int:
    from scrapy.utils.test import get_crawler

    from scrapy_neardup import NearDuplicatePipeline, Sketcher

    sketcher = Sketcher()
    pipeline = NearDuplicatePipeline.from_crawler(get_crawler(settings_dict={}))
    asyncio.run(pipeline.open_spider())
    results = []
    for name, (build, through_pipeline) in KINDS.items():
        page = build()
        for path in ("sketch", "pipeline") if through_pipeline else ("sketch",):
            gc.collect()
            before = _status("VmRSS")
            exact = _reset_peak()
            started = time.perf_counter()
            if path == "sketch":
                truncated: bool | None = sketcher.sketch(page).truncated
            else:
                asyncio.run(pipeline.process_item({"url": name, "text": page}))
                truncated = None  # counted in the pipeline's stats instead
            seconds = time.perf_counter() - started
            # Without clear_refs, the process's lifetime peak: an upper bound.
            peak = _status("VmHWM") if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
            results.append({"kind": name, "path": path, "seconds": round(seconds, 2), "peak_mb": peak - before,
                            "exact_peak": exact, "truncated": truncated, "page_len": len(page)})
        del page
    counts = {k.removeprefix("neardup/"): v for k, v in pipeline.stats.get_stats().items()}  # type: ignore[union-attr]
    Path(out).write_text(json.dumps({"results": results, "pipeline_stats": counts}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
