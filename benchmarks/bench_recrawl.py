"""Recurring crawls on the embedded store: its size and check rate after ten recrawls of a synthetic site,
next to a single crawl's, printed as ratios.

Workload (deterministic): a site of ``--pages`` (default 100,000) pages with 59-character URL keys and k = 128
pseudo-random signatures (t = 107). Crawl 0 checks every page into an empty store (state directory: journal on,
snapshot on close). Each recrawl opens the store, checks every page again in order, of which ``--changed``
(default 10%) changed lightly since the last crawl (8 of 128 positions redrawn and a new fingerprint, so
their best match is their own stored version: replaced) and the rest are unchanged, then closes the store
(compacted snapshot). This is ``EmbeddedBackend.check_and_add_many`` as the pipeline calls it, one page a call.

Measured per crawl: pages checked per second (wall clock; sketches built outside the timed loop), the
snapshot's bytes on disk, the index's ``memory_bytes()`` (its arrays as written), and the process's resident
set growth (psutil). The ratios recrawl 10 / crawl 0 are the figures: the store must not grow with recrawls.

    python benchmarks/bench_recrawl.py [--pages 100000] [--recrawls 10] [--changed 0.1]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scrapy_neardup import Sketch  # noqa: E402
from scrapy_neardup.core.theory import min_shared_for  # noqa: E402
from scrapy_neardup.store.embedded import STATE_FILE, EmbeddedBackend  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
K = 128
T = min_shared_for(0.9, K)
TAG = "bench-k128"


def site(pages: int, seed: int = 5) -> tuple[list[str], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    keys = [f"https://www.example-news-site.test/section/article-{i:09d}.html" for i in range(pages)]
    return keys, rng.integers(0, 2**32, size=(pages, K), dtype=np.uint64).astype(np.uint32), \
        rng.integers(1, 2**63, size=pages, dtype=np.uint64)


def change(signatures: np.ndarray, fingerprints: np.ndarray, share: float, rng: np.random.Generator) -> int:
    """Redraw 8 positions and the fingerprint of ``share`` of the pages (in place); how many changed."""
    rows = np.flatnonzero(rng.random(signatures.shape[0]) < share)
    for row in rows.tolist():
        cols = rng.choice(K, size=8, replace=False)
        signatures[row, cols] = rng.integers(0, 2**32, size=8, dtype=np.uint64).astype(np.uint32)
    fingerprints[rows] = rng.integers(1, 2**63, size=rows.size, dtype=np.uint64)
    return int(rows.size)


def crawl(state: Path, keys: list[str], signatures: np.ndarray, fingerprints: np.ndarray) -> dict[str, float]:
    sketches = [Sketch(signatures[i], int(fingerprints[i]), TAG, num_shingles=1) for i in range(len(keys))]
    gc.collect()
    process = psutil.Process()
    rss_before = process.memory_info().rss
    store = EmbeddedBackend(K, T, TAG, state_dir=state)
    asyncio.run(store.open())
    outcomes: dict[str, int] = {}

    async def check_all() -> float:
        started = time.perf_counter()
        for key, sketch in zip(keys, sketches, strict=True):
            (decision,) = await store.check_and_add_many([(key, sketch)])
            name = decision.outcome + ("_changed" if decision.changed else "")
            outcomes[name] = outcomes.get(name, 0) + 1
        return time.perf_counter() - started

    seconds = asyncio.run(check_all())
    memory = store.index.memory_bytes()
    gc.collect()
    rss = process.memory_info().rss - rss_before
    asyncio.run(store.close())
    return {"rate": len(keys) / seconds, "disk_bytes": (state / STATE_FILE).stat().st_size,
            "memory_bytes": memory, "rss_growth_bytes": rss, **outcomes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=100_000)
    parser.add_argument("--recrawls", type=int, default=10)
    parser.add_argument("--changed", type=float, default=0.1)
    args = parser.parse_args()
    keys, signatures, fingerprints = site(args.pages)
    rng = np.random.default_rng(11)
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-recrawl-") as tmp:
        state = Path(tmp)
        for number in range(args.recrawls + 1):
            changed = change(signatures, fingerprints, args.changed, rng) if number else 0
            run = crawl(state, keys, signatures, fingerprints)
            run["changed_pages"] = changed
            runs.append(run)
            print(f"crawl {number:2d}: {run['rate']:9,.0f} pages/s, {run['disk_bytes'] / 1e6:7.1f} MB on disk, "
                  f"{run['memory_bytes'] / 1e6:7.1f} MB index memory, outcomes "
                  f"{ {k: v for k, v in run.items() if k.startswith(('kept', 'revisit', 'duplicate'))} }")
    first, last = runs[0], runs[-1]
    ratios = {name: last[name] / first[name] for name in ("disk_bytes", "memory_bytes", "rate")}
    print(f"after {args.recrawls} recrawls / single crawl: disk x{ratios['disk_bytes']:.3f}, "
          f"index memory x{ratios['memory_bytes']:.3f}, check rate x{ratios['rate']:.2f}")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "recrawl.json"
    out.write_text(json.dumps({"pages": args.pages, "recrawls": args.recrawls, "changed": args.changed,
                               "runs": runs, "ratios": ratios}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
