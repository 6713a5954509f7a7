"""Representative against transitive linkage, on the stored signatures alone (no Elasticsearch).

``scrapy_neardup.core.clustering.leader_labels`` (the default of ``neardup es groups``) against
``cluster_labels`` (Broder's components, ``--transitive``) on the same signatures, read from a memmap as
``neardup es groups`` reads its spilled sweep. Each run is a fresh child process (so freed memory another run
left does not hide a peak), the two linkages alternated, ``--rounds`` times; printed: seconds, peak growth of
anonymous resident memory per row, groups, the largest group, and for the representative linkage its rounds,
rows decided in order and the most linked pairs held at once. Workloads (``k`` = 128, ``t`` = 107):

* ``synthetic``: ``bench_es.synthetic_values`` (random rows, a fifth near-duplicates of an earlier row with 0-8
  positions changed), what ``bench_es.py --synthetic`` indexes.
* ``templated``: 40% of the rows in groups of 500-5,000 near-identical pages (each a few positions off its
  template: every pair shares >= t), 20% in drifting sequences of 20-500 pages (each page one position off the
  last: a page near-duplicates the ~20 before and after it; what pagination or a slowly edited page gives),
  the rest unrelated.
* ``drift``: drifting sequences only, in shuffled rank order (rounds decide them).
* ``drift-sorted``: the same with rank order along each sequence (pages indexed in sequence order): what costs
  the representative linkage most, as rounds stall and its pairs are kept and decided in order.

    python benchmarks/bench_linkage.py [--rows 1000000] [--workloads synthetic,templated,...] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

K, T = 128, 107
RESULTS = ROOT / "benchmarks" / "results" / "linkage.json"


def templated(
    rows: int, seed: int = 4, share: tuple[float, float] = (0.4, 0.2), shuffle: bool = True
) -> np.ndarray:
    """Near-identical groups, drifting sequences and unrelated rows (see the module doc), shuffled (else in
    sequence order)."""
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 1 << 16, size=(rows, K), dtype=np.uint16)
    lo = 0
    near_end, drift_end = int(rows * share[0]), int(rows * (share[0] + share[1]))
    while lo < near_end:  # near-identical groups: a template, each page 0-4 positions off it
        size = min(int(rng.integers(500, 5001)), near_end - lo)
        values[lo : lo + size] = values[lo]
        changes = rng.integers(0, 5, size=size)
        for offset, count in zip(range(size), changes.tolist(), strict=True):
            values[lo + offset, rng.choice(K, count, replace=False)] = rng.integers(0, 1 << 16, count)
        lo += size
    while lo < drift_end:
        size = min(int(rng.integers(20, 501)), drift_end - lo)
        values[lo : lo + size] = _drift(rng, size)
        lo += size
    return values[rng.permutation(rows)] if shuffle else values


def _drift(rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` pages, each the last with one position given a new value."""
    spots = rng.integers(0, K, size=size)
    fresh = rng.integers(0, 1 << 16, size=size, dtype=np.uint16)
    out = np.repeat(rng.integers(0, 1 << 16, size=(1, K), dtype=np.uint16), size, axis=0)
    steps = np.arange(size)
    for position in range(K):
        # the last step at or before each row that changed this position (-1: none yet)
        last = np.maximum.accumulate(np.where(spots == position, steps, -1))
        changed = last >= 0
        out[changed, position] = fresh[last[changed]]
    return out


def workload(name: str, rows: int) -> np.ndarray:
    if name == "synthetic":
        from bench_es import synthetic_values

        return synthetic_values(rows)
    if name == "templated":
        return templated(rows)
    if name == "drift":
        return templated(rows, share=(0.0, 1.0))
    if name == "drift-sorted":
        return templated(rows, share=(0.0, 1.0), shuffle=False)
    raise SystemExit(f"unknown workload {name}")


def _anon() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def child(name: str, rows: int, linkage: str) -> dict[str, Any]:
    import gc

    from scrapy_neardup.core.clustering import cluster_labels, leader_labels

    with tempfile.TemporaryFile() as spill:
        spill.write(workload(name, rows).tobytes())
        spill.flush()
        values = np.memmap(spill, dtype=np.uint16, mode="r", shape=(rows, K))
        gc.collect()
        start = peak = _anon()
        stop = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not stop.wait(0.005):
                peak = max(peak, _anon())

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.perf_counter()
        if linkage == "transitive":
            labels, stats = cluster_labels(values, T)
        else:
            # rank order = row order, given as a function as `neardup es groups` does (no array over every row)
            labels, stats = leader_labels(values, T, lambda clustered: clustered)
        seconds = time.perf_counter() - started
        stop.set()
        sampler.join()
        peak = max(peak, _anon())
    sizes = np.bincount(np.unique(labels, return_inverse=True)[1])
    return {"seconds": seconds, "bytes_per_row": (peak - start) / rows, "groups": int(np.count_nonzero(sizes > 1)),
            "largest": int(sizes.max()), "grouped_rows": int(sizes[sizes > 1].sum()), "rounds": stats.rounds,
            "sequential": stats.sequential, "held_pairs": stats.held, "verified": stats.candidates}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--workloads", default="synthetic,templated,drift,drift-sorted")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        name, rows, linkage = args.child
        print(json.dumps(child(name, int(rows), linkage)))
        return 0
    results: dict[str, Any] = {"rows": args.rows, "k": K, "t": T, "load_avg_start": os.getloadavg()}
    for name in args.workloads.split(","):
        runs: dict[str, list[dict[str, Any]]] = {"transitive": [], "representative": []}
        for _ in range(args.rounds):
            for linkage in runs:
                out = subprocess.run([sys.executable, __file__, "--child", name, str(args.rows), linkage],
                                     capture_output=True, text=True, check=True)
                runs[linkage].append(json.loads(out.stdout.strip().splitlines()[-1]))
        results[name] = {**runs, "load_avg_end": os.getloadavg()}
        for linkage, done in runs.items():
            best = min(done, key=lambda r: r["seconds"])
            extra = (f"; {best['rounds']} rounds, {best['sequential']} rows in order, {best['held_pairs']} pairs held"
                     if linkage == "representative" else "")
            times = ", ".join(f"{r['seconds']:.2f}" for r in done)
            print(f"{name} {linkage}: {times} s, "
                  f"{max(r['bytes_per_row'] for r in done):.0f} B/row peak; {best['groups']} groups "
                  f"({best['grouped_rows']} rows, largest {best['largest']}){extra}", flush=True)
        ratio = min(r["seconds"] for r in runs["representative"]) / min(r["seconds"] for r in runs["transitive"])
        print(f"{name}: representative / transitive time {ratio:.2f}", flush=True)
    results["load_avg_end"] = os.getloadavg()
    # One entry per row count, a run's workloads merged into what earlier runs at that count recorded.
    recorded = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    recorded.setdefault(str(args.rows), {}).update(results)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(recorded, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
