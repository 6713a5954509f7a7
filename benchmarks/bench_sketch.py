"""Sketching throughput, text to signature, on one core; peers run in the same process; plus accuracy.

Corpus: the HTML pages of Debian's ``python3.11-doc`` package (``apt-get install python3.11-doc``; about 530
pages). Their text is extracted once, outside the timings, with ``scrapy_neardup.core.html.html_to_text``; every
method below sketches the same extracted texts, and MB/s is megabytes (10**6 bytes) of that text, as UTF-8,
per second of wall time (best of ``--repeat`` interleaved runs; MB per CPU second beside it, which other load
on the machine disturbs less). The process is pinned to one CPU and rensa to one thread.

Methods (k = 128 everywhere):

* ``ours``: ``Sketcher().sketch_many(texts)``, default settings (normalization, word 5-shingles,
  one-permutation MinHash, fingerprints, ``Sketch`` objects). Also split into ``ours: normalize`` (the
  ``clean_text`` part, as ``sketch_many`` calls it in the default mode) and ``ours: signatures``
  (``Sketcher.signatures`` on normalized bytes: word hashes, shingles and MinHash of the whole text, without
  reading its blocks). With default settings the first 4 KiB of every text are sniffed for markup; a page whose
  text shows HTML tags (a code example) is parsed as HTML. ``ours, is_html=False`` skips the sniffing (the texts
  are known to be text).
* ``ours + html``: ``Sketcher().sketch_many(html_pages)``, the same from the raw HTML (extraction included).
* ``rensa``: per page ``text.lower().split()``, 5-gram strings joined by spaces, ``RMinHash(128, 42)``,
  ``update(shingles)``, ``digest()``: what its users write. ``rensa batch`` feeds the same shingle lists to
  ``RMinHash.digest_matrix_from_token_sets`` (its fastest API).
* ``datasketch``: the same shingles, UTF-8 encoded, ``MinHash(num_perm=128).update_batch(...)``, ``digest()``.
* ``python strings``: the same shingle strings, each hashed with ``mmh3.hash64`` in a Python loop, then our
  vectorized MinHash: the per-shingle-string approach, for reference.

HTML rows (MB of HTML per CPU second, ``time.process_time``; every pipeline starts from the same raw pages):

* ``html: ours (default)``: ``Sketcher().sketch_many(html_pages)``: the default, each page's own text (marked main
  content, else the body without link lists; no host template, as in a page sketched alone).
* ``html: ours``: ``Sketcher(content="body").sketch_many(html_pages)`` (lexbor extraction of the whole body,
  normalization, MinHash, fingerprints).
* ``html: selectolax + rensa``: per page ``LexborHTMLParser(html)``, ``strip_tags(["script", "style"])``,
  ``body.text(separator=" ")``, then the ``rensa`` row's shingles and ``RMinHash``.
* ``html: trafilatura + rensa``: per page ``trafilatura.extract(html)`` (main-content extraction, its defaults),
  then the ``rensa`` row's shingles and ``RMinHash``: the peer that also removes boilerplate. About 100 times
  slower than the others, it runs on 60 pages spread over the corpus (10 with ``--quick``), its rate counted over
  them.
* ``html: lxml + datasketch``: per page ``lxml.html.fromstring``, scripts and styles dropped,
  ``text_content()``, then the ``datasketch`` row.
* ``html: extraction only``: our extraction (``html_to_text``) alone, for where the time goes.
* ``html: lexbor floor``: ``LexborHTMLParser(html).text(separator=" ")`` per page: parse and one text walk,
  nothing removed, no guard: the least any lexbor-based pipeline spends. ``html: ours from text``:
  ``sketch_many`` of the extracted texts (``is_html=False``). Their sum bounds from below what a lexbor-based
  ``html: ours`` can cost, so ``selectolax + rensa / (floor + ours from text)`` is the highest ratio reachable
  without a faster parser (printed as the ceiling).

Targets: plain text with default settings >= 5x rensa; from HTML, the default >= 1.3x selectolax + rensa (it removes
templates, the peer nothing) and >= 10x trafilatura + rensa; the whole body >= 1.7x selectolax + rensa and >= 60 MB
of HTML per CPU second. The targets are printed, never enforced (CI runs ``--quick`` for the ratios).

Accuracy: pairs of pages at many resemblances (each page against a copy with a share of its words replaced,
plus random pairs of different pages). For each pair, exact Jaccard of the shingle sets
(``Sketcher.jaccard``) against our estimate, and against classic MinHash (datasketch, k = 128) fed the very
same shingle sets. The mean absolute error should be close to that of classic MinHash, about
``mean(sqrt(r (1 - r) / 128))``.

Prints a table and writes ``benchmarks/results/sketch.json`` (``sketch-quick.json`` with ``--quick``).

    python benchmarks/bench_sketch.py [--quick] [--corpus DIR] [--repeat 3] [--cpu 0]
"""

from __future__ import annotations

import os

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # rensa's thread pool: one core, like everyone else
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from importlib.metadata import version  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import mmh3  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scrapy_neardup import Sketcher  # noqa: E402
from scrapy_neardup.core.html import html_to_text, looks_like_html  # noqa: E402
from scrapy_neardup.core.text import clean_text  # noqa: E402

DEFAULT_CORPUS = Path("/usr/share/doc/python3.11-doc/html")
RESULTS = ROOT / "benchmarks" / "results"
K = 128
WIDTH = 5


def load_corpus(directory: Path, limit: int | None) -> list[str]:
    """The HTML pages under ``directory`` (sorted by path), at most ``limit`` of them."""
    files = sorted(directory.rglob("*.html"))
    if not files:
        sys.exit(
            f"no HTML pages under {directory}: install them with "
            "`apt-get update && apt-get install -y python3.11-doc`, or pass --corpus DIR"
        )
    if limit is not None:
        files = files[:: max(1, len(files) // limit)][:limit]
    return [f.read_text(encoding="utf-8", errors="replace") for f in files]


def shingle_strings(text: str) -> list[str]:
    """Word 5-shingles as peers' users build them: lower-case, split on whitespace, join 5-grams."""
    words = text.lower().split()
    if len(words) < WIDTH:
        return [" ".join(words)] if words else []
    return [" ".join(words[i : i + WIDTH]) for i in range(len(words) - WIDTH + 1)]


def run_rensa(texts: Sequence[str]) -> list[Any]:
    import rensa

    out = []
    for text in texts:
        m = rensa.RMinHash(num_perm=K, seed=42)
        m.update(shingle_strings(text))
        out.append(m.digest())
    return out


def run_rensa_batch(texts: Sequence[str]) -> Any:
    import rensa

    return rensa.RMinHash.digest_matrix_from_token_sets([shingle_strings(t) for t in texts], K, 42)


def run_datasketch(texts: Sequence[str]) -> list[Any]:
    from datasketch import MinHash

    out = []
    for text in texts:
        m = MinHash(num_perm=K)
        m.update_batch([s.encode("utf-8") for s in shingle_strings(text)])
        out.append(m.digest())
    return out


def run_python_strings(texts: Sequence[str], sketcher: Sketcher) -> np.ndarray:
    hashes: list[int] = []
    counts = []
    for text in texts:
        shingles = shingle_strings(text)
        hashes.extend(mmh3.hash64(s, signed=False)[0] for s in shingles)
        counts.append(len(shingles))
    return sketcher._hasher.signatures(np.array(hashes, dtype=np.uint64), np.array(counts, dtype=np.int64))


def selectolax_text(html: str) -> str:
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(html)
    tree.strip_tags(["script", "style"])
    body = tree.body
    return body.text(separator=" ") if body is not None else ""


def lxml_text(html: str) -> str:
    import lxml.html

    root = lxml.html.fromstring(html)
    for element in root.xpath("//script|//style"):
        element.drop_tree()
    return str(root.text_content())


def trafilatura_text(html: str) -> str:
    import trafilatura

    return trafilatura.extract(html) or ""


def lexbor_floor(html: str) -> str:
    from selectolax.lexbor import LexborHTMLParser

    return LexborHTMLParser(html).text(separator=" ")


def html_throughput(htmls: list[str], texts: list[str], repeat: int, slow_pages: int) -> dict[str, Any]:
    """Raw HTML to signatures: ours against the selectolax + rensa, trafilatura + rensa and lxml + datasketch
    pipelines; trafilatura (about 100 times slower) on every ``len(htmls) // slow_pages``-th page only, its MB
    per CPU second counted over those."""
    slow = htmls[:: max(1, len(htmls) // slow_pages)][:slow_pages]
    sketcher = Sketcher(content="body")
    default = Sketcher()
    methods: dict[str, Callable[[], object]] = {
        "html: ours (default)": lambda: default.sketch_many(htmls),
        "html: ours": lambda: sketcher.sketch_many(htmls),
        "html: selectolax + rensa": lambda: run_rensa([selectolax_text(h) for h in htmls]),
        "html: trafilatura + rensa": lambda: run_rensa([trafilatura_text(h) for h in slow]),
        "html: lxml + datasketch": lambda: run_datasketch([lxml_text(h) for h in htmls]),
        "html: extraction only": lambda: [html_to_text(h) for h in htmls],
        "html: lexbor floor": lambda: [lexbor_floor(h) for h in htmls],
        "html: ours from text": lambda: sketcher.sketch_many(texts, is_html=False),
    }
    sketcher.sketch_many(htmls[:3])  # warm-up: imports, tables, caches
    default.sketch_many(htmls[:3])
    run_rensa([selectolax_text(h) for h in htmls[:3]])
    run_datasketch([lxml_text(h) for h in htmls[:3]])
    run_rensa([trafilatura_text(h) for h in htmls[:3]])
    seconds, cpu_seconds = timed(methods, repeat)
    megabytes = sum(len(h.encode("utf-8")) for h in htmls) / 1e6
    per_cpu = {name: megabytes / s for name, s in cpu_seconds.items()}
    per_cpu["html: trafilatura + rensa"] = (sum(len(h.encode("utf-8")) for h in slow) / 1e6
                                            / cpu_seconds["html: trafilatura + rensa"])
    return {
        "megabytes_html": megabytes,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "mb_html_per_cpu_s": per_cpu,
        "ratios": {
            "default/selectolax+rensa": per_cpu["html: ours (default)"] / per_cpu["html: selectolax + rensa"],
            "default/trafilatura+rensa": per_cpu["html: ours (default)"] / per_cpu["html: trafilatura + rensa"],
            "ours/selectolax+rensa": per_cpu["html: ours"] / per_cpu["html: selectolax + rensa"],
            "ours/lxml+datasketch": per_cpu["html: ours"] / per_cpu["html: lxml + datasketch"],
        },
        "ceiling_ours/selectolax+rensa": cpu_seconds["html: selectolax + rensa"]
        / (cpu_seconds["html: lexbor floor"] + cpu_seconds["html: ours from text"]),
    }


def timed(methods: dict[str, Callable[[], object]], repeat: int) -> tuple[dict[str, float], dict[str, float]]:
    """Best wall and best CPU time of each method over ``repeat`` rounds; the methods alternate in a round."""
    wall = {name: float("inf") for name in methods}
    cpu = dict(wall)
    for _ in range(repeat):
        for name, method in methods.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            method()
            wall[name] = min(wall[name], time.perf_counter() - start)
            cpu[name] = min(cpu[name], time.process_time() - start_cpu)
    return wall, cpu


def throughput(texts: list[str], htmls: list[str], repeat: int) -> dict[str, Any]:
    sketcher = Sketcher()
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    normalized = [clean_text(t).utf8 for t in texts]
    sketch_texts = {
        "ours": lambda xs: sketcher.sketch_many(xs),
        "ours, is_html=False": lambda xs: sketcher.sketch_many(xs, is_html=False),
        "ours: normalize": lambda xs: [clean_text(t, None, sketcher.max_chars, "auto", collapse=False) for t in xs],
        "ours + html": lambda xs: sketcher.sketch_many(xs),
        "rensa": run_rensa,
        "rensa batch": run_rensa_batch,
        "datasketch": run_datasketch,
        "python strings": lambda xs: run_python_strings(xs, sketcher),
    }
    for name, run in sketch_texts.items():  # warm-up: imports, tables, caches
        run(htmls[:3] if name == "ours + html" else texts[:3])
    sketcher.signatures(normalized[:3])
    methods: dict[str, Callable[[], object]] = {
        name: (lambda run=run, xs=(htmls if name == "ours + html" else texts): run(xs))
        for name, run in sketch_texts.items()
    }
    methods["ours: signatures"] = lambda: sketcher.signatures(normalized)
    seconds, cpu_seconds = timed(methods, repeat)
    rates = {name: megabytes / s for name, s in seconds.items()}
    extraction_start = time.perf_counter()
    for html in htmls:
        html_to_text(html)
    extraction = time.perf_counter() - extraction_start
    return {
        "megabytes_text": megabytes,
        "megabytes_html": sum(len(h.encode("utf-8")) for h in htmls) / 1e6,
        "texts_sniffed_as_html": sum(looks_like_html(t) for t in texts),
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "mb_per_s": rates,
        "mb_per_cpu_s": {name: megabytes / s for name, s in cpu_seconds.items()},
        "html_extraction_mb_text_per_s": megabytes / extraction,
        "ratios": {
            "ours/rensa": rates["ours"] / rates["rensa"],
            "ours, is_html=False/rensa": rates["ours, is_html=False"] / rates["rensa"],
            "ours/rensa batch": rates["ours"] / rates["rensa batch"],
            "ours/datasketch": rates["ours"] / rates["datasketch"],
            "ours/python strings": rates["ours"] / rates["python strings"],
            "ours+html/rensa": rates["ours + html"] / rates["rensa"],
            "ours+html/datasketch": rates["ours + html"] / rates["datasketch"],
        },
    }


def edited(text: str, share: float, rng: random.Random) -> str:
    """``text`` (normalized) with about ``share`` of its words replaced by random new words."""
    words = text.split()
    for i in range(len(words)):
        if rng.random() < share:
            words[i] = f"edit{rng.getrandbits(40):x}"
    return " ".join(words)


def accuracy(texts: list[str], pages: int, seed: int = 7) -> dict[str, Any]:
    """Exact Jaccard against our estimate and classic MinHash (datasketch) on the same shingle sets."""
    from datasketch import MinHash

    rng = random.Random(seed)
    sketcher = Sketcher()
    normalized = [clean_text(t).text for t in texts]
    candidates = [t for t in normalized if len(t.split()) >= 200]
    chosen = rng.sample(candidates, min(pages, len(candidates)))
    pairs: list[tuple[str, str]] = []
    for text in chosen:
        share = rng.choice([0.002, 0.005, 0.01, 0.02, 0.04, 0.08, 0.15, 0.3])
        pairs.append((text, edited(text, share, rng)))
    for _ in range(len(chosen) // 4):
        first, second = rng.sample(normalized, 2)
        pairs.append((first, second))
    rows = []
    for a, b in pairs:
        set_a, set_b = sketcher.shingle_set(a), sketcher.shingle_set(b)
        exact = sketcher.jaccard(a, b)
        sk_a, sk_b = sketcher.sketch_many([a, b])
        ours = sk_a.resemblance(sk_b)
        classic = []
        for shingles in (set_a, set_b):
            m = MinHash(num_perm=K, seed=1)
            m.update_batch([int(x).to_bytes(8, "little") for x in shingles])
            classic.append(m)
        rows.append((exact, ours, classic[0].jaccard(classic[1])))
    data = np.array(rows)
    exact, ours, classic = data[:, 0], data[:, 1], data[:, 2]
    expected = np.sqrt(exact * (1 - exact) / K)
    buckets = []
    for lo, hi in [(0.0, 0.2), (0.2, 0.5), (0.5, 0.8), (0.8, 0.9), (0.9, 0.95), (0.95, 1.01)]:
        sel = (exact >= lo) & (exact < hi)
        if sel.any():
            buckets.append(
                {
                    "jaccard": [lo, min(hi, 1.0)],
                    "pairs": int(sel.sum()),
                    "mae_ours": float(np.mean(np.abs(ours[sel] - exact[sel]))),
                    "mae_classic": float(np.mean(np.abs(classic[sel] - exact[sel]))),
                    "mean_sd_theory": float(np.mean(expected[sel])),
                    "bias_ours": float(np.mean(ours[sel] - exact[sel])),
                }
            )
    return {
        "pairs": int(exact.size),
        "mae_ours": float(np.mean(np.abs(ours - exact))),
        "mae_classic_minhash": float(np.mean(np.abs(classic - exact))),
        "mean_sd_theory": float(np.mean(expected)),
        "mean_abs_error_theory": float(np.mean(expected) * np.sqrt(2 / np.pi)),
        "bias_ours": float(np.mean(ours - exact)),
        "by_jaccard": buckets,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small smoke run (80 pages, 1 round)")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--repeat", type=int, default=None, help="timed rounds (default 3, quick 1)")
    parser.add_argument("--cpu", type=int, default=None, help="CPU to pin to (default: the first allowed)")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        cpu = args.cpu if args.cpu is not None else min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
    repeat = args.repeat or (1 if args.quick else 3)

    htmls = load_corpus(args.corpus, 80 if args.quick else None)
    start = time.perf_counter()
    texts = [html_to_text(h) for h in htmls]
    extraction = time.perf_counter() - start
    print(
        f"corpus: {len(htmls)} pages, {sum(map(len, htmls)) / 1e6:.1f} M chars of HTML, "
        f"{sum(len(t.encode()) for t in texts) / 1e6:.2f} MB of text (extracted in {extraction:.2f} s); "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    result = throughput(texts, htmls, repeat)
    print(f"\n{'method':<22} {'seconds':>8} {'MB/s':>8} {'MB/CPU s':>9}")
    for name, seconds in result["seconds"].items():
        print(f"{name:<22} {seconds:8.3f} {result['mb_per_s'][name]:8.1f} {result['mb_per_cpu_s'][name]:9.1f}")
    print(f"{'html extraction':<22} {'':>8} {result['html_extraction_mb_text_per_s']:8.1f}  (lexbor, MB of text/s)")
    print()
    for name, ratio in result["ratios"].items():
        print(f"{name:<26} {ratio:6.2f}x")
    if result["texts_sniffed_as_html"]:
        print(f"({result['texts_sniffed_as_html']} extracted texts look like HTML to the sniffer and are re-parsed)")

    load_before = os.getloadavg()[0]
    html_result = html_throughput(htmls, texts, repeat, 10 if args.quick else 60)
    print(f"\nfrom raw HTML ({html_result['megabytes_html']:.1f} MB; load average {load_before:.2f} -> "
          f"{os.getloadavg()[0]:.2f})")
    print(f"{'method':<28} {'CPU s':>7} {'wall s':>7} {'MB HTML/CPU s':>14}")
    for name, cpu_s in html_result["cpu_seconds"].items():
        print(f"{name:<28} {cpu_s:7.3f} {html_result['seconds'][name]:7.3f} "
              f"{html_result['mb_html_per_cpu_s'][name]:14.1f}")
    for name, ratio in html_result["ratios"].items():
        print(f"{name:<28} {ratio:6.2f}x")
    print(f"{'ceiling with lexbor':<28} {html_result['ceiling_ours/selectolax+rensa']:6.2f}x  "
          "(selectolax + rensa / (lexbor floor + ours from text))")
    rate = html_result["mb_html_per_cpu_s"]["html: ours"]
    ratio = html_result["ratios"]["ours/selectolax+rensa"]
    default_ratio = html_result["ratios"]["default/selectolax+rensa"]
    trafilatura_ratio = html_result["ratios"]["default/trafilatura+rensa"]
    text_ratio = result["ratios"]["ours/rensa"]
    print(f"targets: plain text, default >= 5x rensa: {'met' if text_ratio >= 5 else 'NOT met'} ({text_ratio:.2f}x); "
          f"HTML, the default (each page's own text) >= 1.3x selectolax + rensa: "
          f"{'met' if default_ratio >= 1.3 else 'NOT met'} ({default_ratio:.2f}x), >= 10x trafilatura + rensa: "
          f"{'met' if trafilatura_ratio >= 10 else 'NOT met'} ({trafilatura_ratio:.1f}x); whole body >= 1.7x: "
          f"{'met' if ratio >= 1.7 else 'NOT met'}; >= 60 MB of HTML per CPU second: "
          f"{'met' if rate >= 60 else 'NOT met'} ({rate:.1f})")

    acc = accuracy(texts, 40 if args.quick else 300)
    print(
        f"\naccuracy over {acc['pairs']} pairs: mean |estimate - Jaccard| ours {acc['mae_ours']:.4f}, "
        f"classic MinHash {acc['mae_classic_minhash']:.4f} (theory: sd {acc['mean_sd_theory']:.4f}, "
        f"mean abs error {acc['mean_abs_error_theory']:.4f}); bias ours {acc['bias_ours']:+.4f}"
    )
    for b in acc["by_jaccard"]:
        print(
            f"  J in [{b['jaccard'][0]:.2f}, {b['jaccard'][1]:.2f}): {b['pairs']:4d} pairs  "
            f"MAE ours {b['mae_ours']:.4f}  classic {b['mae_classic']:.4f}  sd theory {b['mean_sd_theory']:.4f}"
        )
    print(f"load average at the end {os.getloadavg()[0]:.2f}")

    report = {
        "benchmark": "sketch",
        "quick": args.quick,
        "corpus": str(args.corpus),
        "pages": len(htmls),
        "repeat": repeat,
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "rensa": version("rensa"),
            "datasketch": version("datasketch"),
            "selectolax": version("selectolax"),
            "lxml": version("lxml"),
            "trafilatura": version("trafilatura"),
            "pinned_cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "load_average_end": os.getloadavg()[0],
        },
        "throughput": result,
        "html": html_result,
        "accuracy": acc,
    }
    output = args.output or RESULTS / ("sketch-quick.json" if args.quick else "sketch.json")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {output.relative_to(ROOT) if output.is_relative_to(ROOT) else output}")


if __name__ == "__main__":
    main()
