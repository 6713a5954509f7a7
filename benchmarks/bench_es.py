"""Elasticsearch benchmarks: indexing with and without the sketch fields, candidate queries, groups.

* bulk indexing rate with and without the sketch fields, and their ratio (target >= 0.7);
* candidate-query latency p50/p99 of the position and the band query, same sketches, as indexed and merged
  (target p99 <= 10 ms at 1M documents with >= 16 segments; ratio printed);
* duplicate-group discovery against a bare id sweep of the same index (target <= 3x), its client memory per
  document (target <= 200 B at 1M), ``--assign`` and ``groups --new`` rates (targets >= 10,000 docs/s); the
  default (representative) linkage and ``--transitive`` (Broder's components) alternated in the same run, with
  their time ratio;
* the crawler backend's check-and-add latency (kept pages and duplicates).

Documents are synthetic web pages (300-900 words from a Zipf-distributed vocabulary of 60k words); a fifth are
near-duplicates of earlier pages (0-5 word edits; 0 = an exact copy). The benchmark starts its own node with
``neardup_devnode.node`` (heap ``--heap``) unless ``ES_URL`` points at a cluster, and merges its figures into
``benchmarks/results/es.json`` under the document count.

    python benchmarks/bench_es.py [--docs 100000] [--quick] [--heap 1g] [--skip baseline,groups,backend]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from es_integration.backend import ElasticsearchBackend  # noqa: E402
from es_integration.band_filter import BandFilterStore  # noqa: E402
from es_integration.candidates import candidate_search, parse_candidates  # noqa: E402
from es_integration.groups import assign_groups, find_groups  # noqa: E402
from es_integration.indexing import index_records  # noqa: E402
from es_integration.mapping import ensure_index  # noqa: E402
from scrapy_neardup.core.params import SketchParams  # noqa: E402
from scrapy_neardup.core.sketch import Sketcher  # noqa: E402
from scrapy_neardup.core.theory import min_shared_for  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "es.json"
K = 128
T = min_shared_for(0.9, K)
#: What the group runs and the backend take: the default sketcher's parameters (k = K), with t.
PARAMS = SketchParams.from_tag(Sketcher(num_perm=K).tag, min_shared=T)
VOCABULARY = 60_000


class Corpus:
    """Deterministic synthetic pages; ``records(lo, hi)`` regenerates any slice without keeping the texts."""

    def __init__(self, seed: int = 1, words: tuple[int, int] = (300, 900)) -> None:
        rng = np.random.default_rng(seed)
        letters = np.array(list("bcdfghjklmnpqrstvwzaeiouy"))
        self.words = np.array(["".join(rng.choice(letters, size=rng.integers(3, 9))) + str(i % 7)
                               for i in range(VOCABULARY)])
        weights = 1 / np.arange(1, VOCABULARY + 1) ** 1.05
        self.cdf = np.cumsum(weights) / np.sum(weights)
        self.seed = seed
        self.min_words, self.max_words = words

    def word_ids(self, i: int) -> np.ndarray:
        rng = np.random.default_rng((self.seed, i))
        if i > 0 and rng.random() < 0.2:  # a near-duplicate of an earlier page
            source = int(rng.integers(max(0, i - 50_000), i))
            ids = self.word_ids(source).copy()
            edits = int(rng.choice([0, 1, 1, 2, 3, 5]))
            ids[rng.integers(0, ids.size, size=edits)] = rng.integers(0, VOCABULARY, size=edits)
            return ids
        ids = np.searchsorted(self.cdf, rng.random(int(rng.integers(self.min_words, self.max_words + 1))))
        return np.minimum(ids, VOCABULARY - 1)

    def record(self, i: int) -> dict[str, Any]:
        text = " ".join(self.words[self.word_ids(i)].tolist())
        return {"id": f"doc-{i}", "url": f"https://site{i % 997}.example.org/page/{i}", "title": text[:60],
                "text": text}

    def records(self, lo: int, hi: int) -> Iterator[dict[str, Any]]:
        for i in range(lo, hi):
            yield self.record(i)


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def start_cluster(heap: str) -> tuple[Any, str]:
    from neardup_devnode.node import ClusterHandle, start_node

    if os.environ.get("ES_URL"):
        return ClusterHandle.from_env(), "ES_URL"
    return start_node(name=f"bench-{os.getpid()}", heap=heap, die_with_parent=True, timeout=300), "local node"


def bench_indexing(es: Any, corpus: Corpus, docs: int, threads: int, skip_baseline: bool) -> dict[str, Any]:
    """Index the corpus without and with sketches (and with sketches computed beforehand); with
    ``skip_baseline`` only with sketches, streaming the pages (no list of a million texts in memory)."""
    sketcher = Sketcher(num_perm=K)
    out: dict[str, Any] = {"threads": threads, "docs": docs}
    sample = list(corpus.records(0, min(20_000, docs)))
    started = time.perf_counter()
    sketcher.sketch_many([r["text"] for r in sample])
    out["sketch_only_docs_per_s"] = len(sample) / (time.perf_counter() - started)
    out["avg_text_chars"] = sum(len(r["text"]) for r in sample) / len(sample)
    del sample
    records: Any = corpus.records(0, docs) if skip_baseline else list(corpus.records(0, docs))
    runs = [("with_sketch", sketcher)] if skip_baseline else [
        ("without_sketch", None), ("with_sketch", sketcher), ("presketched", None)]
    indices = {}
    presketched: list[Any] = []
    for name, sk in runs:
        index = f"bench-{name.replace('_', '-')}-{uuid.uuid4().hex[:6]}"
        ensure_index(es, index, shards=1, settings={"number_of_replicas": 0})
        cpu = es_cpu_seconds(es)
        if name == "presketched":  # the sketch fields without the client's sketching: Elasticsearch's share
            stats = index_presketched(es, index, records, presketched, threads)
        else:
            stats = index_records(es, index, records, sk, threads=threads, chunk_size=500, create_index=False)
        assert stats.errors == 0, stats.summary()
        out[f"{name}_docs_per_s"] = stats.indexed / stats.seconds
        out[f"{name}_seconds"] = stats.seconds
        out[f"{name}_es_cpu_ms_per_doc"] = (es_cpu_seconds(es) - cpu) * 1000 / docs
        indices[name] = index
        print(f"  indexing {name}: {stats.summary()}; Elasticsearch CPU "
              f"{out[f'{name}_es_cpu_ms_per_doc']:.2f} ms/doc", flush=True)
        if name == "with_sketch" and not skip_baseline:
            presketched = sketcher.sketch_many([r["text"] for r in records])
    if not skip_baseline:
        out["ratio"] = out["with_sketch_docs_per_s"] / out["without_sketch_docs_per_s"]
        out["ratio_presketched"] = out["presketched_docs_per_s"] / out["without_sketch_docs_per_s"]
        out["target_ratio"] = 0.7
        for name in ("without_sketch", "presketched"):
            es.indices.delete(index=indices[name])
    out["index"] = indices["with_sketch"]
    size = es.indices.stats(index=indices["with_sketch"], metric="store")["_all"]["primaries"]["store"]
    out["store_bytes"] = size["size_in_bytes"]
    return out


def index_fields_only(es: Any, corpus: Corpus, docs: int) -> dict[str, Any]:
    """The sketch fields of the corpus' pages without the pages (documented in the README as such): the index
    the groups and query benchmarks read, built several times faster than with the text."""

    from es_integration.indexing import SeqClock
    from es_integration.mapping import KEPT, sketch_fields

    sketcher = Sketcher(num_perm=K)
    index = f"bench-fields-{uuid.uuid4().hex[:6]}"
    ensure_index(es, index, shards=1, settings={"number_of_replicas": 0, "refresh_interval": "30s"})
    clock = SeqClock()

    def actions() -> Iterator[dict[str, Any]]:
        for lo in range(0, docs, 2000):
            records = list(corpus.records(lo, min(docs, lo + 2000)))
            for r, s in zip(records, sketcher.sketch_many([r["text"] for r in records]), strict=True):
                yield {"_index": index, "_id": r["id"],
                       "_source": {"neardup": sketch_fields(s, seq=clock(), group=r["id"], status=KEPT)}}

    done, seconds = _bulk_load(es, index, actions())
    print(f"  indexed the sketch fields of {done} pages (no text) in {seconds:.0f}s", flush=True)
    return {"index": index, "fields_only": True, "docs": done, "seconds": seconds}


def synthetic_values(docs: int, seed: int = 3) -> np.ndarray:
    """``uint16[docs, k]`` stored signatures without pages: random values (distinct pages), a fifth of them
    near-duplicates of an earlier row with 0-8 positions changed (resemblance ~0.94-1.0, most above t)."""
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 1 << 16, size=(docs, K), dtype=np.uint16)
    copies = np.flatnonzero(rng.random(docs) < 0.2)
    copies = copies[copies > 0]
    sources = (rng.random(copies.size) * copies).astype(np.int64)
    values[copies] = values[sources]
    for row, changes in zip(copies.tolist(), rng.integers(0, 9, copies.size).tolist(), strict=True):
        if changes:
            values[row, rng.choice(K, changes, replace=False)] = rng.integers(0, 1 << 16, changes)
    return values


def index_synthetic(es: Any, docs: int, *, backend: bool = False, shards: int = 1) -> dict[str, Any]:
    """Documents holding only the neardup fields of :func:`synthetic_values` (no page, no sketching): the
    fastest way to a 1M-document index for the groups and query figures (documented as such in the README).

    ``backend``: the documents as the crawler backend writes them (no position tokens, ``best_compression``,
    a page key, ``shards`` primaries), for its latency and size figures."""

    from es_integration.mapping import KEPT, stored_fields
    from scrapy_neardup.core.stored_signature import StoredSignature

    tag = Sketcher(num_perm=K).tag
    values = synthetic_values(docs)
    index = f"bench-synthetic-{uuid.uuid4().hex[:6]}"
    settings: dict[str, Any] = {"number_of_replicas": 0, "refresh_interval": "30s"}
    if backend:
        settings["codec"] = "best_compression"
    ensure_index(es, index, shards=shards, settings=settings)

    def actions() -> Iterator[dict[str, Any]]:
        for i in range(docs):
            stored = StoredSignature(values[i], tag)
            fields = {**stored_fields(stored, positions=not backend), "fingerprint": f"{i:016x}", "tag": tag,
                      "empty": False, "seq": i + 1, "group": f"doc-{i}", "status": KEPT}
            if backend:
                fields["key"] = f"https://site{i % 997}.example.org/section-{i % 31}/page-{i}.html"
            yield {"_index": index, "_id": f"doc-{i}", "_source": {"neardup": fields}}

    done, seconds = _bulk_load(es, index, actions())
    print(f"  indexed {done} synthetic signatures (no pages) in {seconds:.0f}s", flush=True)
    return {"index": index, "synthetic": True, "docs": done, "seconds": seconds}


def _bulk_load(es: Any, index: str, actions: Any) -> tuple[int, float]:
    """Bulk-index ``actions`` with two threads, then restore refreshes; ``(documents, seconds)``."""
    from elasticsearch import helpers

    started = time.perf_counter()
    done = 0
    for ok, _info in helpers.parallel_bulk(es, actions, thread_count=2, chunk_size=1000, raise_on_error=True):
        done += ok
        if done % 100_000 == 0:
            print(f"  {done} documents indexed ({time.perf_counter() - started:.0f}s)", flush=True)
    es.indices.put_settings(index=index, settings={"refresh_interval": "1s"})
    es.indices.refresh(index=index)
    return done, time.perf_counter() - started


def index_synthetic_new(es: Any, index: str, docs: int, new_docs: int, seed: int = 23) -> None:
    """``new_docs`` more synthetic documents after the first ``docs``: a fifth near-duplicates of indexed rows.

    ``seed`` picks their signatures: a rerun on a kept index needs another one, or its "new" documents repeat
    the last run's, whose band tokens the index (and the band filter) already hold."""
    from elasticsearch import helpers

    from es_integration.indexing import SeqClock
    from es_integration.mapping import KEPT, stored_fields
    from scrapy_neardup.core.stored_signature import StoredSignature

    tag = Sketcher(num_perm=K).tag
    old = synthetic_values(docs)
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 1 << 16, size=(new_docs, K), dtype=np.uint16)
    for row in range(0, new_docs, 5):
        values[row] = old[int(rng.integers(0, docs))]
        values[row, rng.choice(K, 3, replace=False)] = rng.integers(0, 1 << 16, 3)
    del old
    clock = SeqClock()  # nanoseconds: above the synthetic rows' seq 1..docs, as a later indexing run would be
    actions = ({"_index": index, "_id": f"new-{i}", "_source": {"neardup": {
        **stored_fields(StoredSignature(values[i], tag)), "fingerprint": f"{docs + i:016x}", "tag": tag,
        "empty": False, "seq": clock(), "group": f"new-{i}", "status": KEPT}}} for i in range(new_docs))
    for _ in helpers.parallel_bulk(es, actions, thread_count=2, chunk_size=1000, raise_on_error=True):
        pass
    es.indices.refresh(index=index)


class SyntheticSketches:
    """Query sketches for a synthetic index: indexed rows, perturbed rows, and new random rows."""

    @staticmethod
    def make(docs: int, queries: int) -> list[Any]:
        from scrapy_neardup.core.sketch import Sketch

        tag = Sketcher(num_perm=K).tag
        values = synthetic_values(docs)
        rng = np.random.default_rng(99)
        out = []
        for q in range(queries + 200):
            kind = q % 3
            row = values[int(rng.integers(0, docs))].astype(np.uint32)
            if kind == 1:
                row[rng.choice(K, 3, replace=False)] = rng.integers(0, 1 << 16, 3)
            elif kind == 2:
                row = rng.integers(0, 1 << 16, K).astype(np.uint32)
            out.append(Sketch(signature=row, fingerprint=int(rng.integers(0, 1 << 62)), tag=tag, num_shingles=K))
        return out


def es_cpu_seconds(es: Any) -> float:
    """CPU seconds the Elasticsearch process has used (from node stats), to see its share of a run."""
    nodes = es.nodes.stats(metric="process")["nodes"]
    return sum(n["process"]["cpu"]["total_in_millis"] for n in nodes.values()) / 1000


def index_presketched(es: Any, index: str, records: list[dict[str, Any]], sketches: list[Any], threads: int) -> Any:
    from elasticsearch import helpers

    from es_integration.indexing import IndexStats
    from es_integration.mapping import KEPT, sketch_fields

    stats = IndexStats()
    started = time.perf_counter()
    actions = (
        {"_index": index, "_id": r["id"],
         "_source": {**r, "neardup": sketch_fields(s, seq=i, group=r["id"], status=KEPT)}}
        for i, (r, s) in enumerate(zip(records, sketches, strict=True))
    )
    for ok, info in helpers.parallel_bulk(es, actions, thread_count=threads, chunk_size=500, raise_on_error=False):
        stats._record(ok, info)
    es.indices.refresh(index=index)
    stats.seconds = time.perf_counter() - started
    return stats


def query_sketches(corpus: Corpus, n_docs: int, queries: int) -> list[Any]:
    """A third indexed pages, a third new near-duplicates of indexed pages, a third new pages (200 warm-up)."""
    sketcher = Sketcher(num_perm=K)
    rng = np.random.default_rng(99)
    texts = []
    for q in range(queries + 200):
        kind = q % 3
        if kind == 0:  # an indexed page
            texts.append(corpus.record(int(rng.integers(0, n_docs)))["text"])
        elif kind == 1:  # a new near-duplicate of an indexed page
            words = corpus.record(int(rng.integers(0, n_docs)))["text"].split()
            words[int(rng.integers(0, len(words)))] = "edited"
            texts.append(" ".join(words))
        else:  # a new page
            texts.append(corpus.record(n_docs + 10_000_000 + q)["text"])
    return sketcher.sketch_many(texts)


def segment_count(es: Any, index: str) -> int:
    shards = es.indices.segments(index=index)["indices"][index]["shards"]
    return sum(c["num_search_segments"] for copies in shards.values() for c in copies if c["routing"]["primary"])


def bench_queries(es: Any, index: str, sketches: list[Any], n_docs: int) -> dict[str, Any]:
    """The position query (minimum_should_match on k tokens) and the band query (k - t + 1 band tokens, verified
    on the returned compact signatures) for the same sketches, interleaved; both must return the same ids."""
    from es_integration.candidates import band_search, parse_band_candidates
    from scrapy_neardup.core.stored_signature import StoredSignature

    latencies: dict[str, list[float]] = {"positions": [], "bands": []}
    took: dict[str, list[float]] = {"positions": [], "bands": []}
    hits = disagreements = 0
    for q, sketch in enumerate(sketches):
        stored = StoredSignature.from_sketch(sketch)
        found = {}
        for method in ("positions", "bands") if q % 2 else ("bands", "positions"):
            started = time.perf_counter()
            if method == "positions":
                response = es.search(index=index, **candidate_search(sketch, T, size=100))
                ids = [c.id for c in parse_candidates(response.body, sketch)]
            else:
                response = es.search(index=index, **band_search(stored, size=1000))
                ids = [c.id for c in parse_band_candidates(response.body, stored, sketch.fingerprint, T)][:100]
            elapsed = (time.perf_counter() - started) * 1000
            found[method] = ids
            if q >= 200:  # after warm-up
                latencies[method].append(elapsed)
                took[method].append(float(response["took"]))
        if q >= 200:
            hits += bool(found["positions"])
            disagreements += sorted(found["positions"]) != sorted(found["bands"])
    out: dict[str, Any] = {"docs_indexed": n_docs, "segments": segment_count(es, index),
                           "queries": len(latencies["bands"]), "queries_with_candidates": hits,
                           "disagreements": disagreements, "target_p99_ms": 10,
                           "load_avg": os.getloadavg()}
    for method in ("positions", "bands"):
        lat = latencies[method]
        out[method] = {"p50_ms": percentile(lat, 50), "p90_ms": percentile(lat, 90), "p99_ms": percentile(lat, 99),
                       "max_ms": max(lat), "server_took_p50_ms": percentile(took[method], 50),
                       "server_took_p99_ms": percentile(took[method], 99)}
    out["p99_ratio_bands_to_positions"] = out["bands"]["p99_ms"] / out["positions"]["p99_ms"]
    # The figures earlier runs recorded (position query) stay under their old names.
    out.update({k: out["positions"][k] for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms", "server_took_p50_ms",
                                                 "server_took_p99_ms")})
    return out


def print_queries(q: dict[str, Any], docs: int, label: str) -> None:
    for method in ("positions", "bands"):
        m = q[method]
        print(f"candidate query ({method}) at {docs} docs, {q['segments']} segments{label}: p50 {m['p50_ms']:.1f} ms, "
              f"p99 {m['p99_ms']:.1f} ms (server took p50 {m['server_took_p50_ms']:.0f} ms, "
              f"p99 {m['server_took_p99_ms']:.0f} ms)", flush=True)
    print(f"  band/position p99 ratio {q['p99_ratio_bands_to_positions']:.2f}; {q['disagreements']} of "
          f"{q['queries']} queries disagree (must be 0); load average {q['load_avg'][0]:.1f}", flush=True)


class PeakAnon:
    """Peak anonymous resident memory (``RssAnon``: heap and numpy arrays, not mapped files) of this process
    while the block runs, sampled every 10 ms, above its value at the start."""

    def __enter__(self) -> PeakAnon:
        import threading

        self.start = self.peak = _rss_anon()
        self._stop = threading.Event()

        def sample() -> None:
            while not self._stop.wait(0.01):
                self.peak = max(self.peak, _rss_anon())

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_anon())

    @property
    def grown(self) -> int:
        return self.peak - self.start


def _rss_anon() -> int:
    from bench_store import status_bytes

    return status_bytes("RssAnon")


def groups_memory(es: Any, index: str, slices: int, linkage: str = "representative") -> int:
    """Peak anonymous memory grown by ``find_groups`` over ``index``, in a child process of its own."""
    url = es.transport.node_pool.get().base_url
    child = subprocess.run([sys.executable, __file__, "--groups-memory", url, index, str(slices), linkage],
                           capture_output=True, text=True, check=True)
    return int(child.stdout.strip().splitlines()[-1])


def groups_memory_child(url: str, index: str, slices: int, linkage: Any) -> None:
    from es_integration.client import ConnectionSettings, make_client

    es = make_client(ConnectionSettings.create(url, request_timeout=600))
    es.info()  # the connection pool and TLS context exist before the measurement starts
    with PeakAnon() as memory:
        find_groups(es, index, PARAMS, slices=slices, linkage=linkage)
    print(memory.grown)


def id_sweep_seconds(es: Any, index: str, slices: int) -> tuple[float, int]:
    """A bare sweep of the index's ids (point in time, ``_source`` off, no fields): the floor of any sweep."""
    from es_integration.sweep import point_in_time, sliced_sweep

    started = time.perf_counter()
    n = 0
    with point_in_time(es, index) as pit:
        for hits in sliced_sweep(es, pit, slices=slices, page_size=1000):
            n += len(hits)
    return time.perf_counter() - started, n


def bench_groups(
    es: Any, index: str, corpus: Corpus, n_docs: int, new_docs: int, slices: int, synthetic: bool
) -> dict[str, Any]:
    """Group discovery against a bare id sweep of the same index (same run), its client memory, --assign, then
    --new over ``new_docs`` documents indexed afterwards, and its --assign."""
    from es_integration.groups import find_new_groups

    sketcher = Sketcher(num_perm=K)
    bare1, swept = id_sweep_seconds(es, index, 1)
    bare, _ = id_sweep_seconds(es, index, slices)
    # The two linkages alternated, twice each (the first sweep also warms the node's caches for the others).
    runs: dict[str, list[Any]] = {"transitive": [], "representative": []}
    for _ in range(2):
        for linkage in runs:
            runs[linkage].append(find_groups(es, index, PARAMS, slices=slices, linkage=linkage))
    report = min(runs["representative"], key=lambda r: r.seconds)
    transitive = min(runs["transitive"], key=lambda r: r.seconds)
    del runs
    # Client memory from a fresh process running only the groups pass: measured here it would depend on what this
    # process allocated and freed before (glibc reuses freed memory), which once showed 98 B/doc for 241.
    memory = groups_memory(es, index, slices)
    transitive_memory = groups_memory(es, index, slices, "transitive")
    filters = BandFilterStore(tempfile.mkdtemp(prefix="bench-band-filters-"))
    started = time.perf_counter()
    written = assign_groups(es, index, report, band_filter=filters)
    assign_s = time.perf_counter() - started
    out = {
        "docs": report.documents,
        "id_sweep_docs": swept,
        "id_sweep_seconds": bare1,
        "id_sweep_sliced_seconds": bare,
        "seconds": report.seconds,
        "sweep_seconds": report.sweep_seconds,
        "docs_per_s": report.documents / report.seconds,
        "ratio_to_id_sweep": report.seconds / bare1,
        "ratio_to_sliced_id_sweep": report.seconds / bare,
        "slices": slices,
        "client_bytes_per_doc": memory / max(1, report.documents),
        "groups": len(report.groups),
        "duplicates": report.duplicates,
        "transitive_seconds": transitive.seconds,
        "transitive_sweep_seconds": transitive.sweep_seconds,
        "transitive_client_bytes_per_doc": transitive_memory / max(1, transitive.documents),
        "transitive_groups": len(transitive.groups),
        "transitive_duplicates": transitive.duplicates,
        "transitive_largest_group": max((len(g.members) for g in transitive.groups), default=0),
        "largest_group": max((len(g.members) for g in report.groups), default=0),
        "ratio_to_transitive": report.seconds / transitive.seconds,
        "distinct_signatures": report.queries,
        "assign_seconds": assign_s,
        "assigned_docs": written,
        "assign_docs_per_s": report.documents / assign_s,
    }
    del report, transitive
    if new_docs and synthetic:
        # A fresh seed: on a kept index, the last run's seed would make "new" documents the index already held.
        out["new_seed"] = seed = time.time_ns() % 2**32
        index_synthetic_new(es, index, n_docs, new_docs, seed=seed)
    elif new_docs:
        # New pages: a fifth near-duplicates of indexed ones (like the corpus), the rest new.
        fresh = list(corpus.records(n_docs, n_docs + new_docs))
        rng = np.random.default_rng(17)
        for i in range(0, len(fresh), 5):
            words = corpus.record(int(rng.integers(0, n_docs)))["text"].split()
            words[int(rng.integers(0, len(words)))] = "edited"
            fresh[i]["text"] = " ".join(words)
        index_records(es, index, fresh, sketcher, threads=2, chunk_size=500, create_index=False)
    out["load_avg_groups"] = os.getloadavg()
    if new_docs:
        # Every query cache cleared first: a daily run's band queries are new to the node (a rerun's identical
        # queries would be answered from the cache, ~2x faster).
        es.indices.clear_cache(index=index, query=True)
        unfiltered = find_new_groups(es, index, PARAMS, slices=slices)
        es.indices.clear_cache(index=index, query=True)
        new = find_new_groups(es, index, PARAMS, slices=slices, band_filter=filters)
        if sorted(map(sorted, (g.members for g in new.groups))) != sorted(
                map(sorted, (g.members for g in unfiltered.groups))):
            raise AssertionError("--new with and without the band filter disagree")
        started = time.perf_counter()
        new_written = assign_groups(es, index, new, band_filter=filters)
        out.update({
            "new_docs": new.documents, "new_seconds": new.seconds, "new_docs_per_s": new.documents / new.seconds,
            "new_band_filter": new.band_filter is not None, "new_band_tokens": new.band_tokens,
            "new_band_tokens_total": new.band_tokens_total,
            "new_unfiltered_seconds": unfiltered.seconds,
            "new_unfiltered_docs_per_s": unfiltered.documents / unfiltered.seconds,
            "new_groups": len(new.groups), "new_assign_seconds": time.perf_counter() - started,
            "new_assigned_docs": new_written, "new_sweep_seconds": new.sweep_seconds, "load_avg_new": os.getloadavg(),
        })
    shutil.rmtree(filters.directory, ignore_errors=True)
    return out


def bench_backend(url: str, corpus: Corpus, pages: int) -> dict[str, Any]:
    sketcher = Sketcher(num_perm=K)
    texts = [corpus.record(20_000_000 + i)["text"] for i in range(pages)]
    # Half of the checks are near-duplicates of earlier ones (new pages re-use the corpus' 20% rate too).
    rng = np.random.default_rng(5)
    for i in range(1, pages, 2):
        words = texts[int(rng.integers(0, i))].split()
        words[int(rng.integers(0, len(words)))] = "edited"
        texts[i] = " ".join(words)
    sketches = sketcher.sketch_many(texts)
    index = f"bench-backend-{uuid.uuid4().hex[:6]}"

    async def run() -> tuple[list[float], list[float]]:
        backend = ElasticsearchBackend(url=url, index=index, params=PARAMS)
        await backend.open()
        kept, dups = [], []
        try:
            for i, sketch in enumerate(sketches):
                started = time.perf_counter()
                match = await backend.check_and_add(f"https://example.org/{i}", sketch)
                (kept if match is None else dups).append((time.perf_counter() - started) * 1000)
        finally:
            await backend.close()
        return kept, dups

    kept, dups = asyncio.run(run())
    return {
        "pages": pages,
        "kept": len(kept),
        "duplicates": len(dups),
        "kept_ms_p50": percentile(kept, 50),
        "kept_ms_p99": percentile(kept, 99),
        "duplicate_ms_p50": percentile(dups, 50),
        "duplicate_ms_p99": percentile(dups, 99),
        "pages_per_s": pages / ((sum(kept) + sum(dups)) / 1000),
        "index": index,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=100_000, help="documents to index (default: 100000)")
    parser.add_argument("--quick", action="store_true", help="10k documents, fewer queries (a smoke run)")
    parser.add_argument("--heap", default=None, help="node heap (default: 1g, or 2g above 200k documents)")
    parser.add_argument("--threads", type=int, default=2, help="bulk threads (default: 2)")
    parser.add_argument("--queries", type=int, default=2000, help="timed candidate queries (default: 2000)")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: baseline, queries, groups, "
                        "backend")
    parser.add_argument("--words", default="300-900", help="words per page, MIN-MAX (default: 300-900)")
    parser.add_argument("--index", default=None, help="measure an index a --keep run left (skips indexing; "
                        "needs ES_URL and the same --docs and --words)")
    parser.add_argument("--keep", action="store_true", help="keep the sketched index (its name is printed)")
    parser.add_argument("--slices", type=int, default=2, help="group sweep threads (default: 2)")
    parser.add_argument("--new-docs", type=int, default=10_000, help="documents indexed after the groups run for "
                        "groups --new (default: 10000; 0 skips)")
    parser.add_argument("--synthetic", action="store_true", help="index synthetic stored signatures (random, a "
                        "fifth near-duplicates) instead of sketched pages: the fastest way to a 1M index for the "
                        "groups and query figures; with --index, says the kept index was built so")
    parser.add_argument("--fields-only", action="store_true", help="index only the id and the neardup fields "
                        "(sketches computed here, no page text): a faster way to build a large index for the "
                        "groups and query figures; skips the indexing comparison")
    parser.add_argument("--groups-memory", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.groups_memory:
        url, index, slices, linkage = args.groups_memory
        groups_memory_child(url, index, int(slices), linkage)
        return 0
    docs = 10_000 if args.quick else args.docs
    queries = 300 if args.quick else args.queries
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    heap = args.heap or ("2g" if docs > 200_000 else "1g")

    started = time.perf_counter()
    load_start = os.getloadavg()
    node, source = start_cluster(heap)
    es = node.client(request_timeout=300)
    try:
        info = es.info()
        print(f"Elasticsearch {info['version']['number']} at {node.url} ({source}, heap {heap}); {docs} documents",
              flush=True)
        low, _, high = args.words.partition("-")
        corpus = Corpus(words=(int(low), int(high or low)))
        result: dict[str, Any] = {
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_start": load_start},
            "elasticsearch": {"version": info["version"]["number"], "heap": heap, "cluster": source},
            "k": K,
            "t": T,
            "docs": docs,
            "words_per_page": args.words,
        }
        if args.index:
            idx = {"index": args.index, "reused": True}
        elif args.synthetic:
            result["indexing"] = idx = index_synthetic(es, docs)
        elif args.fields_only:
            result["indexing"] = idx = index_fields_only(es, corpus, docs)
        else:
            result["indexing"] = idx = bench_indexing(es, corpus, docs, args.threads, "baseline" in skip)
        if "ratio" in idx:
            print(f"indexing: {idx['without_sketch_docs_per_s']:.0f} docs/s without sketches, "
                  f"{idx['with_sketch_docs_per_s']:.0f} with; ratio {idx['ratio']:.2f} (target >= 0.7); "
                  f"sketches computed beforehand: ratio {idx['ratio_presketched']:.2f}", flush=True)
        synthetic = args.synthetic or idx.get("synthetic", False)
        sketches = SyntheticSketches.make(docs, queries) if synthetic else query_sketches(corpus, docs, queries)
        if "queries" not in skip:
            result["candidate_query_unmerged"] = q = bench_queries(es, idx["index"], sketches, docs)
            print_queries(q, docs, " (as indexed)")
            if not args.index:
                es.options(request_timeout=3600).indices.forcemerge(index=idx["index"], max_num_segments=1)
                result["candidate_query"] = q = bench_queries(es, idx["index"], sketches, docs)
                print_queries(q, docs, " (force-merged)")
        if "groups" not in skip:
            result["groups"] = g = bench_groups(es, idx["index"], corpus, docs, args.new_docs, args.slices, synthetic)
            print(f"bare id sweep: {g['id_sweep_docs']} ids in {g['id_sweep_seconds']:.1f}s "
                  f"({g['id_sweep_sliced_seconds']:.1f}s in {g['slices']} slices)", flush=True)
            print(f"groups: {g['docs']} docs in {g['seconds']:.1f}s (sweep {g['sweep_seconds']:.1f}s) = "
                  f"{g['docs_per_s']:.0f} docs/s; ratio to the bare id sweep {g['ratio_to_id_sweep']:.2f} "
                  f"(to the sliced one {g['ratio_to_sliced_id_sweep']:.2f}; target <= 3); client memory "
                  f"{g['client_bytes_per_doc']:.0f} B/doc (target <= 200); {g['groups']} groups, "
                  f"{g['duplicates']} duplicates; load average {g['load_avg_groups'][0]:.1f}", flush=True)
            print(f"groups --transitive (Broder's components): {g['transitive_seconds']:.1f}s (sweep "
                  f"{g['transitive_sweep_seconds']:.1f}s), client memory {g['transitive_client_bytes_per_doc']:.0f} "
                  f"B/doc; {g['transitive_groups']} groups, {g['transitive_duplicates']} duplicates, largest "
                  f"{g['transitive_largest_group']} (representative: {g['largest_group']}); representative / "
                  f"transitive time {g['ratio_to_transitive']:.2f}", flush=True)
            print(f"assign: {g['assigned_docs']} documents written in {g['assign_seconds']:.1f}s = "
                  f"{g['assign_docs_per_s']:.0f} docs/s of the index (target >= 10000)", flush=True)
            if "new_docs" in g:
                print(f"groups --new: {g['new_docs']} new docs in {g['new_seconds']:.1f}s = {g['new_docs_per_s']:.0f} "
                      f"docs/s with the band filter (target >= 10000; {g['new_band_tokens']} of "
                      f"{g['new_band_tokens_total']} band tokens queried; sweep of the new documents "
                      f"{g['new_sweep_seconds']:.1f}s, band queries sent meanwhile), without it "
                      f"{g['new_unfiltered_docs_per_s']:.0f} docs/s (ratio "
                      f"{g['new_docs_per_s'] / g['new_unfiltered_docs_per_s']:.2f}); same groups; "
                      f"{g['new_groups']} groups; assign wrote {g['new_assigned_docs']} "
                      f"in {g['new_assign_seconds']:.1f}s; load average {g['load_avg_new'][0]:.1f}", flush=True)
        if "backend" not in skip:
            result["backend"] = b = bench_backend(node.url, corpus, 400 if args.quick else 2000)
            print(f"backend: kept p50 {b['kept_ms_p50']:.1f} ms / p99 {b['kept_ms_p99']:.1f} ms, duplicate p50 "
                  f"{b['duplicate_ms_p50']:.1f} ms / p99 {b['duplicate_ms_p99']:.1f} ms; {b['pages_per_s']:.0f} "
                  "pages/s sequential", flush=True)
            es.indices.delete(index=b["index"])
        if args.keep or args.index:
            print(f"kept index {idx['index']}", flush=True)
        else:
            es.indices.delete(index=idx["index"])
        result["machine"]["load_avg_end"] = os.getloadavg()
        result["total_seconds"] = time.perf_counter() - started
    finally:
        es.close()
        node.stop()
    save(result, ("quick" if args.quick else str(docs)) + ("" if args.words == "300-900" else f"-words{args.words}"))
    print(f"done in {result['total_seconds']:.0f}s; results in {RESULTS}")
    return 0


def save(result: dict[str, Any], key: str) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {}
    if RESULTS.exists():
        try:
            data = json.loads(RESULTS.read_text())
        except ValueError:
            data = {}
    runs = data.setdefault("runs", {})
    # A run on a reused index (--index) updates the figures it measured and keeps the indexing ones.
    runs[key] = {**runs.get(key, {}), **result}
    data["summary"] = {
        k: {
            "indexing_ratio": r.get("indexing", {}).get("ratio"),
            "query_p50_ms": r.get("candidate_query", {}).get("p50_ms"),
            "query_p99_ms": r.get("candidate_query", {}).get("p99_ms"),
            "groups_docs_per_s": r.get("groups", {}).get("docs_per_s"),
        }
        for k, r in runs.items()
    }
    RESULTS.write_text(json.dumps(data, indent=2, default=float) + "\n")


if __name__ == "__main__":
    sys.exit(main())
