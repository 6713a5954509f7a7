"""Scaling: time and memory at 10k, 100k and 1M documents, for sketching, the embedded store and group discovery.

* Sketching: synthetic text pages (120-280 words, about 1.2 KB, from a Zipf-distributed vocabulary of 60k
  words) are generated in batches of 10,000 and sketched with ``Sketcher().sketch_many(batch)``; the
  sketches are kept. Reported: MB/s and documents/s (generation not timed), the resident memory growth per
  kept ``Sketch`` and the peak growth.
* Store: ``benchmarks/bench_store.py``'s workload at that size (10% planted near-duplicates), one
  ``check_and_add`` per page: pages/s, resident memory growth per kept page and its peak, save and load times.
* Groups: the same workload's signatures clustered with ``GroupBuilder`` (the pair finding of
  ``neardup es groups``, which adds the sweep of the index): documents/s, resident memory per document, groups.
  The end-to-end ``neardup es groups`` figures of ``benchmarks/bench_es.py`` (``results/es.json``), where
  present, are plotted next to them.

Every measurement runs in a fresh subprocess (``--one KIND N``), so that resident-memory baselines are clean.
Prints a table, writes ``benchmarks/results/scaling.json`` and plots ``benchmarks/results/scaling.png``
(``scaling-quick.*`` with ``--quick``: 1k and 10k documents). The full run takes about 5-8 minutes on 2 cores.

    python benchmarks/bench_scaling.py [--quick] [--sizes 10000,100000,1000000]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

RESULTS = ROOT / "benchmarks" / "results"
VOCABULARY = 60_000
BATCH = 10_000


class Pages:
    """Deterministic synthetic text pages; ``batch(i)`` regenerates the i-th batch of ``BATCH`` pages."""

    def __init__(self, seed: int = 3) -> None:
        rng = np.random.default_rng(seed)
        letters = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
        self.words = np.array(
            ["".join(rng.choice(letters, size=rng.integers(2, 10))) for _ in range(VOCABULARY)], dtype=object
        )
        weights = 1 / np.arange(1, VOCABULARY + 1) ** 1.07
        self.probabilities = weights / weights.sum()
        self.seed = seed

    def batch(self, number: int, size: int = BATCH) -> list[str]:
        rng = np.random.default_rng((self.seed, number))
        lengths = rng.integers(120, 280, size=size)
        ids = rng.choice(VOCABULARY, size=int(lengths.sum()), p=self.probabilities)
        words = self.words[ids].tolist()
        ends = np.cumsum(lengths).tolist()
        return [" ".join(words[lo:hi]) for lo, hi in zip([0, *ends[:-1]], ends, strict=True)]


def measure_sketch(n: int) -> dict[str, Any]:
    import psutil

    from scrapy_neardup import Sketcher

    pages = Pages()
    sketcher = Sketcher()
    sketcher.sketch_many(pages.batch(10**6, 100))  # warm-up
    kept: list[Any] = []
    gc.collect()
    process = psutil.Process()
    rss0 = process.memory_info().rss
    seconds = 0.0
    megabytes = 0.0
    for number in range((n + BATCH - 1) // BATCH):
        texts = pages.batch(number, min(BATCH, n - number * BATCH))
        megabytes += sum(map(len, texts)) / 1e6  # ASCII: characters are bytes
        start = time.perf_counter()
        kept.extend(sketcher.sketch_many(texts))
        seconds += time.perf_counter() - start
        del texts
    gc.collect()
    return {
        "documents": n,
        "megabytes": megabytes,
        "seconds": seconds,
        "mb_per_s": megabytes / seconds,
        "documents_per_s": n / seconds,
        "rss_growth_bytes_per_sketch": (process.memory_info().rss - rss0) / n,
        "peak_rss_growth_bytes_per_document": (_peak_rss() - rss0) / n,
    }


def measure_store(n: int) -> dict[str, Any]:
    import bench_store

    figures = bench_store.run(n, dup_share=0.1, probes=0, quiet=True)
    keep = (
        "pages", "kept", "pages_per_s", "pages_per_cpu_s", "us_per_page", "rss_growth_bytes_per_kept_page",
        "peak_rss_growth_bytes_per_page", "memory_bytes_per_kept_page", "persistence",
    )  # fmt: skip
    return {key: figures[key] for key in keep}


def measure_groups(n: int) -> dict[str, Any]:
    import bench_store
    import psutil

    from scrapy_neardup.core.clustering import GroupBuilder

    workload = bench_store.Workload(0.1)
    # Broder's clusters: every pair found and joined (the recorded figures' method; the default representative
    # linkage indexes the representatives only)
    builder = GroupBuilder(bench_store.K, bench_store.T, bench_store.TAG, linkage="transitive")
    gc.collect()
    process = psutil.Process()
    rss0 = process.memory_info().rss
    seconds = 0.0
    for lo in range(0, n, BATCH):
        keys, made, _ = bench_store.sketches(workload, lo, min(n, lo + BATCH))
        start = time.perf_counter()
        for key, sketch in zip(keys, made, strict=True):
            builder.add(key, sketch)
        seconds += time.perf_counter() - start
        del keys, made
    start = time.perf_counter()
    groups = builder.groups()
    seconds += time.perf_counter() - start
    gc.collect()
    return {
        "documents": n,
        "seconds": seconds,
        "documents_per_s": n / seconds,
        "groups": len(groups),
        "grouped_documents": sum(map(len, groups)),
        "links": builder.links,
        "rss_growth_bytes_per_document": (process.memory_info().rss - rss0) / n,
        "peak_rss_growth_bytes_per_document": (_peak_rss() - rss0) / n,
    }


def es_group_discovery() -> dict[int, dict[str, Any]]:
    """``neardup es groups`` end to end (sweep + clustering) by document count, from bench_es.py's results."""
    path = RESULTS / "es.json"
    if not path.exists():
        return {}
    runs = json.loads(path.read_text()).get("runs", {})
    return {int(key): run["groups"] for key, run in runs.items() if key.isdigit() and "groups" in run}


def _peak_rss() -> int:
    import bench_store

    return bench_store.peak_rss()


def run_one(kind: str, n: int) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter and return its figures."""
    done = subprocess.run(
        [sys.executable, __file__, "--one", kind, str(n)], capture_output=True, text=True, check=False
    )
    if done.returncode:
        sys.exit(f"{kind} at {n} failed:\n{done.stderr}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def plot(results: dict[str, list[dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sketch, store, groups = results["sketch"], results["store"], results["groups"]
    ns = [r["documents"] for r in sketch]
    es_groups = es_group_discovery()
    es_ns = sorted(es_groups)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    ax = axes[0]
    ax.plot(ns, [r["mb_per_s"] for r in sketch], "o-", color="#1f5fa8", label="sketching, MB/s of text")
    ax.plot(ns, [r["pages_per_s"] / 1000 for r in store], "s-", color="#b5471b", label="store, 1000 pages/s")
    ax.plot(ns, [r["documents_per_s"] / 1000 for r in groups], "D-", color="#3a8a3a",
            label="group pairs (in memory), 1000 docs/s")  # fmt: skip
    if es_ns:
        ax.plot(es_ns, [es_groups[n]["docs_per_s"] / 1000 for n in es_ns], "D--", color="#222222",
                label="neardup es groups end to end, 1000 docs/s")  # fmt: skip
    ax.axhline(20, color="#b5471b", ls=":", lw=1, label="store target: 20k pages/s")
    ax.set_title("throughput (one page at a time for the store)")
    ax.set_ylim(bottom=0)
    ax = axes[1]
    ax.plot(ns, [r["rss_growth_bytes_per_kept_page"] for r in store], "s-", color="#b5471b",
            label="store: RSS growth per kept page")  # fmt: skip
    ax.plot(ns, [r["peak_rss_growth_bytes_per_page"] for r in store], "s--", color="#e39a7a",
            label="store: peak RSS growth per page")  # fmt: skip
    ax.plot(ns, [r["rss_growth_bytes_per_sketch"] for r in sketch], "o-", color="#1f5fa8",
            label="sketching: RSS per kept Sketch object")  # fmt: skip
    ax.plot(ns, [r["rss_growth_bytes_per_document"] for r in groups], "D-", color="#3a8a3a",
            label="groups: RSS growth per document")  # fmt: skip
    ax.axhline(600, color="#b5471b", ls=":", lw=1, label="store target: 600 B/page")
    ax.set_title("memory, bytes per document")
    ax.set_ylim(bottom=0)
    ax = axes[2]
    ax.plot(ns, [r["seconds"] for r in sketch], "o-", color="#1f5fa8", label="sketching, total s")
    ax.plot(ns, [r["pages"] * r["us_per_page"] / 1e6 for r in store], "s-", color="#b5471b",
            label="store check_and_add, total s")  # fmt: skip
    ax.plot(ns, [r["seconds"] for r in groups], "D-", color="#3a8a3a", label="group pairs (in memory), s")
    if es_ns:
        ax.plot(es_ns, [es_groups[n]["seconds"] for n in es_ns], "D--", color="#222222",
                label="neardup es groups end to end, s")  # fmt: skip
    ax.plot(ns, [r["persistence"]["save_s"] for r in store], "^-", color="#8a8a3a", label="store save, s")
    ax.plot(ns, [r["persistence"]["load_s"] for r in store], "v-", color="#7a3aa8", label="store load, s")
    ax.set_yscale("log")
    ax.set_title("time, seconds")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("documents")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"scrapy-neardup scaling (k=128, word 5-shingles; {platform.machine()}, {os.cpu_count()} CPUs)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1k and 10k documents only")
    parser.add_argument("--sizes", default=None, help="comma-separated document counts")
    parser.add_argument("--one", nargs=2, metavar=("KIND", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        kind, n = args.one[0], int(args.one[1])
        figures = {"sketch": measure_sketch, "store": measure_store, "groups": measure_groups}[kind](n)
        print(json.dumps(figures))
        return
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else (
        [1_000, 10_000] if args.quick else [10_000, 100_000, 1_000_000]
    )  # fmt: skip
    results: dict[str, list[dict[str, Any]]] = {"sketch": [], "store": [], "groups": []}
    started = time.perf_counter()
    for n in sizes:
        for kind in results:
            results[kind].append(run_one(kind, n))
            print(f"  {kind} at {n:,} done ({time.perf_counter() - started:.0f} s)", flush=True)
    print(f"\n{'documents':>10} | {'sketch MB/s':>11} {'docs/s':>9} {'B/Sketch':>9} | {'store p/s':>10} "
          f"{'B/page':>7} {'peak B/p':>8} {'save s':>7} {'load s':>7} | {'groups d/s':>10} {'B/doc':>6}")  # fmt: skip
    for sk, st, gr in zip(results["sketch"], results["store"], results["groups"], strict=True):
        p = st["persistence"]
        print(
            f"{sk['documents']:>10,} | {sk['mb_per_s']:11.1f} {sk['documents_per_s']:9,.0f} "
            f"{sk['rss_growth_bytes_per_sketch']:9.0f} | {st['pages_per_s']:10,.0f} "
            f"{st['rss_growth_bytes_per_kept_page']:7.0f} {st['peak_rss_growth_bytes_per_page']:8.0f} "
            f"{p['save_s']:7.2f} {p['load_s']:7.2f} | {gr['documents_per_s']:10,.0f} "
            f"{gr['rss_growth_bytes_per_document']:6.0f}"
        )
    stem = "scaling-quick" if args.quick else "scaling"
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "scaling",
        "sizes": sizes,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__},
        "load_average_end": os.getloadavg()[0],
        "total_seconds": time.perf_counter() - started,
        **results,
    }
    (RESULTS / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(results, RESULTS / f"{stem}.png")
    print(f"wrote benchmarks/results/{stem}.json and {stem}.png ({time.perf_counter() - started:.0f} s in all)")


if __name__ == "__main__":
    main()
