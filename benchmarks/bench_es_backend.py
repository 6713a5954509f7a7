"""The Elasticsearch crawler backend at crawl speed, against the embedded store in the same run.

* checks/s: 1, 4 and 8 processes deciding batches (``check_and_add_many``, ``--batch`` pages, the size a busy
  crawl hands it) on an index of 1 and of ``--shards`` (default 3) primary shards, and one process checking
  pages one at a time; the embedded store on the same pages; half the pages kept, half near-duplicates (3 of
  128 positions changed) of a kept page; the bytes per page of the index the run wrote;
* check latency per batch with 10,000 and ``--big`` (default 1,000,000) pages already in the index (target:
  within 2x), and the bytes per page there (target <= 1.2 KB); the big index holds synthetic pages as the
  backend writes them (``bench_es.index_synthetic(backend=True)``);
* a crawl of a local site (``bench_crawl.build_site``, served on 127.0.0.1) with the Elasticsearch backend and
  with the embedded store (target: within 1.5x).

    python benchmarks/bench_es_backend.py [--pages 4000] [--big 1000000] [--shards 3] [--skip rate,latency,crawl]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import http.server
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from es_integration.backend import ElasticsearchBackend  # noqa: E402
from scrapy_neardup.core.index import SketchIndex  # noqa: E402
from scrapy_neardup.core.params import SketchParams  # noqa: E402
from scrapy_neardup.core.sketch import Sketch, Sketcher  # noqa: E402
from scrapy_neardup.core.theory import min_shared_for  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "es_backend.json"
K = 128
T = min_shared_for(0.9, K)
TAG = Sketcher(num_perm=K).tag


def workload(n: int, seed: int, prefix: str) -> list[tuple[str, Sketch]]:
    """``n`` pages: even ones new (random signatures), odd ones a near-duplicate of the page before (3 of k
    positions changed), so half are kept and half dropped."""
    rng = np.random.default_rng(seed)
    pages: list[tuple[str, Sketch]] = []
    for i in range(n):
        if i % 2 == 0:
            values = rng.integers(0, 1 << 32, K, dtype=np.uint64).astype(np.uint32)
        else:
            values = pages[-1][1].signature.copy()
            values[rng.choice(K, 3, replace=False)] = rng.integers(0, 1 << 32, 3, dtype=np.uint64)
        pages.append((f"{prefix}{i}", Sketch(signature=values, fingerprint=int(rng.integers(0, 1 << 62)), tag=TAG,
                                             num_shingles=K)))
    return pages


def embedded_rate(pages: list[tuple[str, Sketch]]) -> float:
    index = SketchIndex(K, T, TAG)
    started = time.perf_counter()
    for key, sketch in pages:
        index.check_and_add(key, sketch)
    return len(pages) / (time.perf_counter() - started)


async def es_run(url: str, index: str, pages: list[tuple[str, Sketch]], batch: int,
                 shards: int = 1) -> dict[str, Any]:
    backend = ElasticsearchBackend(url=url, index=index, params=SketchParams.from_tag(TAG, min_shared=T),
                                   request_timeout=30, shards=shards)
    await backend.open()
    latencies: list[float] = []
    kept = 0
    started = time.perf_counter()
    try:
        for start in range(0, len(pages), batch):
            t0 = time.perf_counter()
            decisions = await backend.check_and_add_many(pages[start : start + batch])
            latencies.append(time.perf_counter() - t0)
            kept += sum(d.outcome == "kept" for d in decisions)
    finally:
        await backend.close()
    seconds = time.perf_counter() - started
    return {"pages": len(pages), "seconds": seconds, "rate": len(pages) / seconds, "kept": kept,
            "batch_ms_p50": 1000 * statistics.median(latencies),
            "batch_ms_p99": 1000 * float(np.percentile(latencies, 99)), "errors": backend.errors}


def worker(url: str, index: str, n: int, batch: int, seed: int, start_at: float) -> None:
    """Child process of the multi-process runs: waits for the common start, prints its figures."""
    pages = workload(n, seed, f"w{seed}-")
    time.sleep(max(0.0, start_at - time.time()))
    print(json.dumps(asyncio.run(es_run(url, index, pages, batch))))


def processes_rate(es: Any, url: str, n: int, batch: int, processes: int, shards: int) -> dict[str, Any]:
    """``n`` pages checked by ``processes`` processes at once on a new index of ``shards`` primaries."""
    index = f"bench-backend-{uuid.uuid4().hex[:6]}"
    asyncio.run(es_run(url, index, workload(2, 0, "x"), 1, shards))  # creates the index before the race
    start_at = time.time() + 3.0
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", url, index, str(n // processes), str(batch),
                               str(10 + p), str(start_at)], stdout=subprocess.PIPE, text=True)
             for p in range(processes)]
    results = [json.loads(proc.communicate()[0].strip().splitlines()[-1]) for proc in procs]
    wall = max(r["seconds"] for r in results)
    out = {"rate": sum(r["pages"] for r in results) / wall, "per_process": results,
           "errors": sum(r["errors"] for r in results), "bytes_per_page": bytes_per_page(es, index)}
    drop_backend_index(es, index)
    return out


def bytes_per_page(es: Any, index: str) -> float:
    """Store bytes per document of ``index``'s primaries once merged to one segment per shard."""
    es.indices.refresh(index=index)
    es.options(request_timeout=3600).indices.forcemerge(index=index, max_num_segments=1)
    stats = es.indices.stats(index=index, metric="store,docs")["indices"][index]["primaries"]
    return stats["store"]["size_in_bytes"] / max(1, stats["docs"]["count"])


def drop_backend_index(es: Any, index: str) -> None:
    from es_integration.backend.sequencer import sequencer_index

    es.indices.delete(index=f"{index},{sequencer_index(index)}", ignore_unavailable=True)


def bench_rates(es: Any, url: str, n: int, batch: int, shards: int) -> dict[str, Any]:
    pages = workload(n, 1, "p")
    out: dict[str, Any] = {"embedded": embedded_rate(pages)}
    single = pages[: max(200, n // 10)]
    index = f"bench-backend-{uuid.uuid4().hex[:6]}"
    out["es_one_at_a_time"] = asyncio.run(es_run(url, index, single, 1))
    drop_backend_index(es, index)
    for count in (1, shards):
        for processes in (1, 4, 8):
            out[f"es_{processes}p_{count}s"] = processes_rate(es, url, n, batch, processes, count)
    e, s = out["embedded"], out["es_one_at_a_time"]["rate"]
    one = out["es_1p_1s"]["rate"]
    print(f"checks/s on {n} pages (half kept, half near-duplicates), batches of {batch}; embedded store {e:.0f}, "
          f"one page at a time {s:.0f}:")
    print("  processes  shards   checks/s   vs 1 process on 1 shard   bytes/page")
    for count in (1, shards):
        for processes in (1, 4, 8):
            run = out[f"es_{processes}p_{count}s"]
            print(f"  {processes:9d} {count:7d} {run['rate']:10.0f} {run['rate'] / one:17.2f}x "
                  f"{run['bytes_per_page']:18.0f}")
    return out


def clone_index(es: Any, source: str) -> dict[str, Any]:
    """A copy of an existing index (``_clone`` hard-links its segments: seconds, not the 20+ minutes of building
    1M documents again); the source is write-blocked for the moment of the clone only."""
    name = f"bench-clone-{uuid.uuid4().hex[:6]}"
    es.indices.put_settings(index=source, settings={"index.blocks.write": True})
    try:
        es.indices.clone(index=source, target=name, settings={"index.number_of_replicas": 0},
                         wait_for_active_shards="1")
    finally:
        es.indices.put_settings(index=source, settings={"index.blocks.write": None})
    es.indices.put_settings(index=name, settings={"index.blocks.write": None})
    es.cluster.health(index=name, wait_for_status="green", timeout="300s")
    return {"index": name, "docs": int(es.count(index=name)["count"])}


def bench_latency(es: Any, url: str, small: int, big: int, batch: int, batches: int, shards: int,
                  big_index: str | None = None, keep_big: bool = False) -> dict[str, Any]:
    from bench_es import index_synthetic

    out: dict[str, Any] = {"shards": shards}
    # A freshly started node answers its first requests several times slower (JIT, caches): warm it up first, so
    # that the small index (measured first) is not penalized.
    warm = f"bench-warmup-{uuid.uuid4().hex[:6]}"
    asyncio.run(es_run(url, warm, workload(batch * batches, 5, "warm-"), batch))
    drop_backend_index(es, warm)
    for target in (small, big):
        built = (clone_index(es, big_index) if big_index and target == big
                 else index_synthetic(es, target, backend=True, shards=shards))
        docs = built["docs"]
        es.options(request_timeout=3600).indices.forcemerge(index=built["index"], max_num_segments=8)
        # New pages each run (a kept or cloned index holds an earlier run's probes, which would be revisits).
        probe = workload(batch * batches, int(time.time()), f"probe-{uuid.uuid4().hex[:8]}-")
        run = asyncio.run(es_run(url, built["index"], probe, batch))
        stats = es.indices.stats(index=built["index"], metric="store,docs")["indices"][built["index"]]["primaries"]
        per_page = stats["store"]["size_in_bytes"] / stats["docs"]["count"]
        out[str(docs)] = {**run, "store_bytes": stats["store"]["size_in_bytes"], "docs": stats["docs"]["count"],
                          "bytes_per_page": per_page}
        print(f"  {docs:>9} pages in the index ({shards} shards): batch of {batch} p50 {run['batch_ms_p50']:.1f} ms, "
              f"p99 {run['batch_ms_p99']:.1f} ms ({run['rate']:.0f} checks/s); {per_page:.0f} bytes a page "
              f"(target <= 1200), {stats['store']['size_in_bytes'] / 2**20:.0f} MiB", flush=True)
        if keep_big and target == big:
            print(f"  kept the big index: {built['index']}")
        else:
            drop_backend_index(es, built["index"])
    a, b = out[str(small)], out[str(docs)]
    print(f"latency ratio {docs} / {small}: p50 {b['batch_ms_p50'] / a['batch_ms_p50']:.2f}x, p99 "
          f"{b['batch_ms_p99'] / a['batch_ms_p99']:.2f}x (target <= 2x)")
    return out


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


def bench_crawl(url: str, pages: int, rounds: int) -> dict[str, Any]:
    from bench_crawl import build_site

    with tempfile.TemporaryDirectory(prefix="neardup-es-crawl-") as tmp:
        total = build_site(Path(tmp), pages)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=tmp))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        site = f"http://127.0.0.1:{server.server_address[1]}/"
        runs: dict[str, list[dict[str, Any]]] = {"embedded": [], "elasticsearch": []}
        try:
            for _ in range(rounds):
                for backend in runs:
                    result = subprocess.run([sys.executable, __file__, "--crawl", site, backend, url],
                                            capture_output=True, text=True, check=True)
                    stats = json.loads(result.stdout.strip().splitlines()[-1])
                    if stats["responses"] < total:
                        sys.exit(f"crawl fetched {stats['responses']} of {total}: {result.stderr[-2000:]}")
                    runs[backend].append(stats)
        finally:
            server.shutdown()
    median = {b: statistics.median(r["crawl_s"] for r in v) for b, v in runs.items()}
    ratio = median["elasticsearch"] / median["embedded"]
    es_run_ = runs["elasticsearch"][-1]
    print(f"crawl of {total} pages on 127.0.0.1 (CONCURRENT_REQUESTS=32), median of {rounds}: embedded "
          f"{median['embedded']:.2f} s, Elasticsearch {median['elasticsearch']:.2f} s: {ratio:.2f}x (target <= 1.5x); "
          f"dropped {es_run_['dropped']} vs {runs['embedded'][-1]['dropped']}; mean batch {es_run_['mean_batch']:.1f}")
    return {"pages": total, "median_crawl_s": median, "ratio": ratio, "runs": runs}


def crawl_child(site: str, backend: str, es_url: str) -> None:
    from bench_crawl import site_spider
    from scrapy.crawler import CrawlerProcess

    settings = {
        "CONCURRENT_REQUESTS": 32, "CONCURRENT_REQUESTS_PER_DOMAIN": 32, "LOG_LEVEL": "ERROR",
        "ROBOTSTXT_OBEY": False, "TELNETCONSOLE_ENABLED": False,
        "ITEM_PIPELINES": {"scrapy_neardup.NearDuplicatePipeline": 300},
        "NEARDUP_BACKEND": backend,
    }
    if backend == "elasticsearch":
        settings |= {"NEARDUP_ES_URL": es_url, "NEARDUP_ES_INDEX": f"bench-crawl-{uuid.uuid4().hex[:8]}"}
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(site_spider(site))
    batchers: list[Any] = []

    def closing(spider: Any) -> None:  # the engine and its pipelines are still there
        from scrapy_neardup.crawl.pipeline import NearDuplicatePipeline

        for component in crawler.engine.scraper.itemproc.middlewares if crawler.engine else ():
            if isinstance(component, NearDuplicatePipeline) and component._batcher is not None:
                batchers.append(component._batcher)

    from scrapy import signals

    crawler.signals.connect(closing, signal=signals.spider_closed)
    started = time.perf_counter()
    process.crawl(crawler)
    process.start()
    elapsed = time.perf_counter() - started
    stats = crawler.stats.get_stats()
    batcher = batchers[0] if batchers else None
    print(json.dumps({
        "crawl_s": elapsed, "responses": stats.get("response_received_count", 0),
        "items": stats.get("item_scraped_count", 0), "dropped": stats.get("item_dropped_count", 0),
        "mean_batch": batcher.pages / batcher.calls if batcher is not None and batcher.calls else 1.0,
    }))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=4000, help="pages of the rate runs and of the crawled site")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--big", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--heap", default="1g")
    parser.add_argument("--shards", type=int, default=3, help="primary shards of the multi-shard runs")
    parser.add_argument("--batches", type=int, default=100, help="batches checked against each latency index")
    parser.add_argument("--keep-big", action="store_true",
                        help="keep the big latency index (reuse it with --big-index NAME, which clones it)")
    parser.add_argument("--skip", default="", help="comma-separated: rate,latency,crawl")
    parser.add_argument("--url", help="a running node to use instead of starting one")
    parser.add_argument("--big-index", help="an index of the node at --url to clone as the big index (e.g. the "
                                             "1M synthetic index of bench_es.py) instead of building one")
    parser.add_argument("--worker", nargs=6, help=argparse.SUPPRESS)
    parser.add_argument("--crawl", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        url, index, n, batch, seed, start_at = args.worker
        worker(url, index, int(n), int(batch), int(seed), float(start_at))
        return 0
    if args.crawl:
        crawl_child(*args.crawl)
        return 0
    from bench_es import start_cluster

    skip = set(filter(None, args.skip.split(",")))
    if args.url:
        from es_integration.client import ConnectionSettings, make_client

        cluster, where, url = None, "running node", args.url
        es = make_client(ConnectionSettings.create(url, request_timeout=600))
    else:
        cluster, where = start_cluster(args.heap)
        url = cluster.url
        es = cluster.client(request_timeout=600)
    print(f"Elasticsearch: {where} ({url}); {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    result: dict[str, Any] = {"pages": args.pages, "batch": args.batch}
    try:
        if "rate" not in skip:
            result["rates"] = bench_rates(es, url, args.pages, args.batch, args.shards)
        if "crawl" not in skip:
            result["crawl"] = bench_crawl(url, args.pages, args.rounds)
        if "latency" not in skip:
            result["latency"] = bench_latency(es, url, args.small, args.big, args.batch, args.batches, args.shards,
                                              args.big_index, args.keep_big)
    finally:
        es.close()
        if cluster is not None:
            cluster.stop()
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
