"""Embedded store: ``SketchIndex.check_and_add`` throughput and resident memory up to a million pages, save and
load times, and agreement of the index with the brute-force t-of-k rule.

Workload (deterministic, ``Workload``): one page after another, as the Scrapy pipeline calls the index;
keys are URLs of 59 characters; signatures are k = 128 pseudo-random 32-bit values. A share of the pages
(``--dup-share``, default 10%) are near-duplicates of an earlier original page at a planted resemblance
r in {1.0 (exact copy, same fingerprint), 0.97, 0.92, 0.87, 0.82, 0.75, 0.6}: each position keeps the
original's value with probability r (so the pair shares ~Binomial(k, r) positions). t = 107, the default for a
0.9 resemblance threshold.

Measured:

* ``check_and_add`` rate: wall-clock pages per second (and per CPU second, less sensitive to other load on
  the machine), over the whole run and per 10% slice; sketch objects are built outside the timed loop.
* memory: growth of the process's resident set (``/proc`` via psutil, after ``gc``) per kept page, its peak
  (``VmHWM``), and ``SketchIndex.memory_bytes()``.
* ``save`` and ``load`` times (and the file size), and the resident memory of the loaded index.
* flagged share per planted resemblance, against the S-curve ``P[Binomial(k, r) >= t]``.
* agreement: for probe pages (near-duplicates of random kept pages at resemblances 0.7-1.0, and new pages),
  the index's matches against brute force over every kept page: the count of positions agreeing on the stored
  16-bit values must reach t exactly for the pages the index returns (pigeonhole: 100%); and how often the
  16-bit rule differs from the same rule on full 32-bit values.

Prints a summary and writes ``benchmarks/results/store.json`` (``store-quick.json`` with ``--quick``).

    python benchmarks/bench_store.py [--pages 1000000] [--quick] [--dup-share 0.1] [--probes 300]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scrapy_neardup import Sketch, SketchIndex  # noqa: E402
from scrapy_neardup.core.hashing import fmix64  # noqa: E402
from scrapy_neardup.core.theory import flag_probability, min_shared_for  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
K = 128
T = min_shared_for(0.9, K)
TAG = "bench-k128"
RESEMBLANCES = np.array([1.0, 0.97, 0.92, 0.87, 0.82, 0.75, 0.6])
CHUNK = 10_000
_U = np.uint64


def _uniform(ids: np.ndarray, salt: int) -> np.ndarray:
    """Deterministic uniforms in [0, 1) from page ids."""
    return (fmix64(ids.astype(np.uint64) ^ _U(salt)) >> _U(11)).astype(np.float64) / float(1 << 53)


class Workload:
    """Pages 0, 1, 2...: originals and planted near-duplicates; any page can be regenerated from its number."""

    def __init__(self, dup_share: float, seed: int = 1) -> None:
        self.dup_share = dup_share
        self.seed = seed

    def base(self, ids: np.ndarray) -> np.ndarray:
        """Pseudo-random signatures (uint32[len(ids), K]) owned by each page."""
        cells = (ids.astype(np.uint64)[:, None] << _U(8)) | np.arange(K, dtype=np.uint64)
        return (fmix64(cells ^ _U(self.seed * 0x9E3779B97F4A7C15 % (1 << 64))) >> _U(32)).astype(np.uint32)

    def is_dup(self, ids: np.ndarray) -> np.ndarray:
        return (ids > 0) & (_uniform(ids, 0xD0 + self.seed) < self.dup_share)

    def source(self, ids: np.ndarray) -> np.ndarray:
        """The original each page derives from (itself for originals)."""
        src = ids.copy()
        pending = self.is_dup(src)
        while pending.any():
            src[pending] = (_uniform(src[pending], 0x5C + self.seed) * src[pending]).astype(np.int64)
            pending = self.is_dup(src)
        return src

    def resemblance(self, ids: np.ndarray) -> np.ndarray:
        """Planted resemblance (1.0 for originals)."""
        pick = (_uniform(ids, 0x4E + self.seed) * RESEMBLANCES.size).astype(np.int64)
        return np.where(self.is_dup(ids), RESEMBLANCES[pick], 1.0)

    def signatures(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(signatures, fingerprints, planted resemblances) of pages ``ids``."""
        src = self.source(ids)
        r = self.resemblance(ids)
        own, original = self.base(ids), self.base(src)
        cells = (ids.astype(np.uint64)[:, None] << _U(8)) | np.arange(K, dtype=np.uint64)
        keep = _uniform(cells, 0x6B + self.seed) < r[:, None]
        sigs = np.where(keep, original, own)
        fingerprints = fmix64(np.where(r == 1.0, src, ids).astype(np.uint64) ^ _U(0xF1))
        return sigs, fingerprints, r


def url(i: int) -> str:
    return f"https://www.site{i % 9973:04d}.example.org/news/{i:010d}/title.html"  # 59 characters


def sketches(workload: Workload, lo: int, hi: int) -> tuple[list[str], list[Sketch], np.ndarray]:
    sigs, fps, r = workload.signatures(np.arange(lo, hi, dtype=np.int64))
    made = [Sketch(signature=sigs[j], fingerprint=int(fps[j]), tag=TAG, num_shingles=500) for j in range(hi - lo)]
    return [url(i) for i in range(lo, hi)], made, r


def rss() -> int:
    return psutil.Process().memory_info().rss


def status_bytes(field: str) -> int:
    """A memory figure of this process from ``/proc/self/status`` (``VmHWM``, ``RssAnon``, ...), in bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    return 0


def peak_rss() -> int:
    return status_bytes("VmHWM")


def fill(pages: int, dup_share: float, report_every: int | None = None) -> dict[str, Any]:
    """Insert ``pages`` pages one by one with check_and_add; returns the index, kept page ids and figures."""
    workload = Workload(dup_share)
    kept_ids = np.empty(pages, dtype=np.int64)  # allocated before the baseline: not counted
    kept_ids[:] = -1
    gc.collect()
    _trim()
    rss0 = rss()
    index = SketchIndex(K, T, TAG)
    wall = cpu = 0.0
    slices: list[dict[str, float]] = []
    flagged_by_r: dict[float, list[int]] = {float(r): [0, 0] for r in RESEMBLANCES}
    kept = 0
    slice_wall = slice_cpu = 0.0
    slice_pages = 0
    step = report_every or max(CHUNK, pages // 10)
    for lo in range(0, pages, CHUNK):
        hi = min(pages, lo + CHUNK)
        keys, batch, r = sketches(workload, lo, hi)
        outcomes = []
        start, start_cpu = time.perf_counter(), time.process_time()
        for key, sketch in zip(keys, batch, strict=True):
            outcomes.append(index.check_and_add(key, sketch))
        took, took_cpu = time.perf_counter() - start, time.process_time() - start_cpu
        wall, cpu, slice_wall, slice_cpu = wall + took, cpu + took_cpu, slice_wall + took, slice_cpu + took_cpu
        slice_pages += hi - lo
        for j, match in enumerate(outcomes):
            if match is None:
                kept_ids[kept] = lo + j
                kept += 1
        for j in np.flatnonzero(workload.is_dup(np.arange(lo, hi))).tolist():
            counts = flagged_by_r[float(r[j])]
            counts[0] += 1
            counts[1] += outcomes[j] is not None
        del keys, batch, outcomes
        if hi % step == 0 or hi == pages:
            slices.append(
                {
                    "pages": hi,
                    "pages_per_s": slice_pages / slice_wall,
                    "pages_per_cpu_s": slice_pages / slice_cpu,
                    "load_average": os.getloadavg()[0],
                }
            )
            print(
                f"  {hi:>9,} pages  {slice_pages / slice_wall:8,.0f} pages/s  ({slice_pages / slice_cpu:8,.0f} per "
                f"CPU s)  RSS growth {(rss() - rss0) / max(kept, 1):5.0f} B/page  load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
            slice_wall = slice_cpu = 0.0
            slice_pages = 0
    gc.collect()
    return {
        "index": index,
        "kept_ids": kept_ids[:kept],
        "rss0": rss0,
        "figures": {
            "pages": pages,
            "kept": kept,
            "flagged": pages - kept,
            "pages_per_s": pages / wall,
            "pages_per_cpu_s": pages / cpu,
            "us_per_page": wall / pages * 1e6,
            "rss_growth_bytes_per_page": (rss() - rss0) / pages,
            "rss_growth_bytes_per_kept_page": (rss() - rss0) / kept,
            "peak_rss_growth_bytes_per_page": (peak_rss() - rss0) / pages,
            "memory_bytes_per_kept_page": index.memory_bytes() / kept,
            "slices": slices,
            "flagged_by_planted_resemblance": {
                f"{r:.2f}": {
                    "pages": n,
                    "flagged_share": f / n if n else None,
                    "s_curve": float(flag_probability(r, K, T)[0]),
                }
                for r, (n, f) in flagged_by_r.items()
            },
        },
    }


def persistence(index: SketchIndex, directory: Path) -> dict[str, Any]:
    path = directory / "index.bin"
    start = time.perf_counter()
    index.save(path)
    saved = time.perf_counter() - start
    size = path.stat().st_size
    n = len(index)
    del index
    gc.collect()
    _trim()
    before = rss()
    start = time.perf_counter()
    loaded = SketchIndex.load(path, K, T, TAG)
    load = time.perf_counter() - start
    gc.collect()
    figures = {
        "save_s": saved,
        "load_s": load,
        "file_bytes_per_page": size / n,
        "loaded_rss_bytes_per_page": (rss() - before) / n,
    }
    return {"loaded": loaded, "figures": figures}


def agreement(index: SketchIndex, kept_ids: np.ndarray, dup_share: float, probes: int) -> dict[str, Any]:
    """Index answers against brute force over every kept page, on 16-bit and on full 32-bit values."""
    workload = Workload(dup_share)
    rng = np.random.default_rng(5)
    stored16 = index._values[: len(index)]  # what the index keeps: the reference for the t-of-k rule
    targets = rng.choice(kept_ids.size, size=probes)
    planted = rng.choice(np.array([1.0, 0.95, 0.9, 0.87, 0.85, 0.83, 0.8, 0.7, 0.0]), size=probes)
    base = workload.base(kept_ids[targets])
    fresh = workload.base(np.arange(10**12, 10**12 + probes, dtype=np.int64))
    keep = rng.random((probes, K)) < planted[:, None]
    queries = np.where(keep, base, fresh)
    disagree = differ_32 = flagged = 0
    extra_16 = missed_16 = 0
    for q in range(probes):
        sketch = Sketch(signature=queries[q], fingerprint=q, tag=TAG, num_shingles=500)
        got = {m.key: m.shared for m in index.query(sketch)}
        shared16 = np.count_nonzero(stored16 == (queries[q] & 0xFFFF).astype(np.uint16), axis=1)
        expected = {index.key(d): int(shared16[d]) for d in np.flatnonzero(shared16 >= T).tolist()}
        disagree += got != expected
        flagged += bool(expected)
        # The same rule on full 32-bit values, over the kept pages the 16-bit rule is close on.
        near = np.flatnonzero(shared16 >= T - 8)
        if near.size:
            full = workload.signatures(kept_ids[near])[0]
            shared32 = np.count_nonzero(full == queries[q], axis=1)
            by32 = set(near[shared32 >= T].tolist())
            by16 = set(near[shared16[near] >= T].tolist())
            differ_32 += by32 != by16
            extra_16 += len(by16 - by32)
            missed_16 += len(by32 - by16)
    return {
        "probes": probes,
        "probes_with_matches": flagged,
        "agreement_with_brute_force_16bit": 1 - disagree / probes,
        "probes_where_16bit_and_32bit_rules_differ": differ_32,
        "pairs_flagged_only_by_16bit": extra_16,
        "pairs_flagged_only_by_32bit": missed_16,
        "theory_extra_agreement_per_position": "(1 - r) / 65536",
    }


def _trim() -> None:
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (AttributeError, OSError):
        pass


def run(pages: int, dup_share: float, probes: int, quiet: bool = False) -> dict[str, Any]:
    """The whole store benchmark at one size (used by bench_scaling too)."""
    if not quiet:
        print(f"check_and_add, {pages:,} pages (k={K}, t={T}, {dup_share:.0%} planted near-duplicates):")
    filled = fill(pages, dup_share)
    figures = filled["figures"]
    with tempfile.TemporaryDirectory(prefix="neardup-bench-") as tmp:
        stored = persistence(filled.pop("index"), Path(tmp))
    figures["persistence"] = stored["figures"]
    if probes:
        figures["agreement"] = agreement(stored["loaded"], filled["kept_ids"], dup_share, probes)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=None, help="pages to insert (default 1,000,000; quick 20,000)")
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument("--dup-share", type=float, default=0.1)
    parser.add_argument("--probes", type=int, default=None, help="agreement probes (default 300; quick 100)")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    pages = args.pages or (20_000 if args.quick else 1_000_000)
    probes = args.probes if args.probes is not None else (100 if args.quick else 300)
    figures = run(pages, args.dup_share, probes)
    p = figures["persistence"]
    print(
        f"\n{figures['pages']:,} pages, {figures['kept']:,} kept: {figures['pages_per_s']:,.0f} pages/s "
        f"({figures['pages_per_cpu_s']:,.0f} per CPU second, {figures['us_per_page']:.1f} us/page)"
    )
    print(
        f"resident memory growth {figures['rss_growth_bytes_per_kept_page']:.0f} B per kept page "
        f"(peak {figures['peak_rss_growth_bytes_per_page']:.0f}; "
        f"memory_bytes {figures['memory_bytes_per_kept_page']:.0f})"
    )
    print(
        f"save {p['save_s']:.2f} s ({p['file_bytes_per_page']:.0f} B/page on disk), load {p['load_s']:.2f} s "
        f"(resident {p['loaded_rss_bytes_per_page']:.0f} B/page after load)"
    )
    print("flagged share by planted resemblance (S-curve in brackets):")
    for r, row in figures["flagged_by_planted_resemblance"].items():
        if row["pages"]:
            print(f"  r={r}: {row['flagged_share']:.3f} of {row['pages']:,} ({row['s_curve']:.3f})")
    if "agreement" in figures:
        a = figures["agreement"]
        print(
            f"agreement with brute-force t-of-k on stored 16-bit values: {a['agreement_with_brute_force_16bit']:.2%} "
            f"of {a['probes']} probes ({a['probes_with_matches']} with matches); 16-bit vs 32-bit rule differ on "
            f"{a['probes_where_16bit_and_32bit_rules_differ']} probes ({a['pairs_flagged_only_by_16bit']} pairs "
            f"only by 16-bit, {a['pairs_flagged_only_by_32bit']} only by 32-bit)"
        )
    report = {
        "benchmark": "store",
        "quick": args.quick,
        "k": K,
        "t": T,
        "dup_share": args.dup_share,
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "load_average_end": os.getloadavg()[0],
        },
        "figures": figures,
    }
    output = args.output or RESULTS / ("store-quick.json" if args.quick else "store.json")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {output.relative_to(ROOT) if output.is_relative_to(ROOT) else output}")


if __name__ == "__main__":
    main()
