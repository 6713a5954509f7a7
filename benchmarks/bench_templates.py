"""Near-duplicate accuracy on real template-heavy documentation sites, served as shipped and stripped of semantics.

Corpora: the Debian documentation packages of ``tests/accuracy/corpora.py`` (Javadoc 17 and 11, Sphinx with the
Read-the-Docs theme, rustdoc, doxygen, Python's own documentation, and Python's documentation served twice by two
hosts), each page in two variants: ``served`` (bytes as shipped) and ``stripped`` (no ``<main>``, ``<nav>``, roles,
ARIA or telling ids and classes; the same visible text). Labels come from the independent labeller
(``tests/accuracy/labels.py``: exact Jaccard of word 5-shingles of each page's main content, found with
per-generator selectors); scores from ``tests/accuracy/evaluate.py``.

A method is a function from the pages of a corpus variant, ``(key, HTML bytes)`` in crawl order, to a
:class:`MethodResult`: one decision per page, ``("kept", None)`` or ``("dropped", key of the kept page)``. Built in:

* ``body``: ``Sketcher(content="body")`` (the whole visible body, the default of earlier versions), with the
  first-seen-is-kept decision of ``Deduper`` (its embedded ``SketchIndex``, default threshold);
* ``main``: the same with ``Sketcher(content="main")`` (``<main>``, else ``<article>``, else ``<body>``, minus
  nav/header/footer/aside and their ARIA roles).
* ``auto`` (the default): ``Sketcher()``, each page's own text, its host's template learned as a crawl learns it:
  from the host's first :data:`~scrapy_neardup.core.host_template.SAMPLE_PAGES` pages in crawl order;
* ``auto-batch``: the same, the template learned over all of the host's pages, as ``neardup dedupe`` learns it;
* ``auto-none`` (by name only): the same without host templates;
* ``auto-contained``, ``auto-contained-articles`` (by name only): ``auto`` plus a rule the product does not apply, a
  page also dropped when a larger kept page (a kept article page) holds at least 0.9 of it
  (``benchmarks/containment.py``).

Add a method by putting it in :data:`METHODS`, or name one on the command line as ``module:attribute`` (a method,
or a factory without arguments returning one; ``module`` importable with the repository root on ``sys.path``).

Columns: pages; false drops (dropped with main-content J <= 0.5 to the page named), grey drops (0.5 < J < 0.75),
precision (drops with J >= 0.75 over all drops); real pairs (J >= 0.9) and how many were left whole (both pages
kept), recall = 1 - whole / real; MB of HTML per CPU second of the sketching (``time.process_time``; the whole
method when it reports no sketching time); and the groups of the same sketches through the product's
``GroupBuilder`` (pages in crawl order), both linkages: transitive (Broder's clusters: ``largest_group``) and
representative (every member shares >= t positions with its group's first page, which stays visible: the default
of ``neardup es groups``; ``representative_group``), each with its largest group, the member pairs of J <= 0.5 in
it and in all groups, and the members of J <= 0.5 to their group's first page (table: ``group``, ``g-false``,
``all-f`` transitive; ``rep``, ``r-false``, ``all-f`` representative).

Prints a table and writes ``benchmarks/results/templates.json``.

    python benchmarks/bench_templates.py [--corpus NAME ...] [--variant served|stripped] [--method NAME ...]
                                         [--threshold R] [--worst N] [--output FILE]
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import logging
import os
import platform
import sys
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "accuracy"))

import containment  # noqa: E402
from corpora import CORPUS_NAMES, VARIANTS, Corpus, Variant, load_corpus  # noqa: E402
from evaluate import Decision, components_report, evaluate, star_groups  # noqa: E402
from labels import labels_for  # noqa: E402

from scrapy_neardup.core.clustering import GroupBuilder  # noqa: E402
from scrapy_neardup.core.dedupe import Deduper  # noqa: E402
from scrapy_neardup.core.host_template import SAMPLE_PAGES, learn_template  # noqa: E402
from scrapy_neardup.core.mirror_table import host_of  # noqa: E402
from scrapy_neardup.core.sketch import Sketcher  # noqa: E402
from scrapy_neardup.core.text import ContentMode  # noqa: E402
from scrapy_neardup.core.theory import DEFAULT_THRESHOLD  # noqa: E402

logger = logging.getLogger(__name__)
RESULTS = ROOT / "benchmarks" / "results"


@dataclass(frozen=True)
class MethodResult:
    """What a method returns for one corpus variant.

    Attributes:
        decisions: one per page: ``("kept", None)`` or ``("dropped", key of the kept page it near-duplicates)``.
        sketch_cpu_seconds: CPU seconds spent sketching (``None``: the bench times the whole call).
        groups: transitive group ids per page, if the method makes any (``None``: the groups of the decisions).
        representative_groups: representative group ids per page, if the method makes any (``None``: the groups
            of the decisions, which are representative groups too: each drop names a kept page).
    """

    decisions: Mapping[str, Decision]
    sketch_cpu_seconds: float | None = None
    groups: Mapping[str, Hashable] | None = None
    representative_groups: Mapping[str, Hashable] | None = None


Method = Callable[[Sequence[tuple[str, bytes]]], MethodResult]


def product_method(content: ContentMode, learn: str | None = None, threshold: float = DEFAULT_THRESHOLD) -> Method:
    """The product's sketching with ``Sketcher(content=content)`` and ``Deduper``'s first-seen-is-kept decisions
    (default ``k``; ``t`` chosen for ``threshold`` as the settings choose it: ``--threshold``, default 0.9);
    groups from ``GroupBuilder`` on the same sketches, both linkages.

    ``learn`` (``"auto"`` mode): how each host's template is learned: ``"batch"`` from all of the host's pages (as
    ``neardup dedupe`` does), ``"crawl"`` from its first
    :data:`~scrapy_neardup.core.host_template.SAMPLE_PAGES` pages in crawl order (as a crawl does, holding them
    until then), ``None`` not at all."""

    def run(pages: Sequence[tuple[str, bytes]]) -> MethodResult:
        sketcher = Sketcher(content=content)
        start = time.process_time()
        templates = _templates(sketcher, pages, learn) if learn is not None else None
        sketches = sketcher.sketch_many([html for _, html in pages], templates=templates)
        cpu = time.process_time() - start
        deduper = Deduper(sketcher, threshold=threshold)
        builders = {linkage: GroupBuilder(sketcher.num_perm, deduper.min_shared, sketcher.tag, linkage=linkage)
                    for linkage in ("transitive", "representative")}
        decisions: dict[str, Decision] = {}
        for (key, _), sketch in zip(pages, sketches, strict=True):
            verdict = deduper.check_sketch(key, sketch)
            decisions[key] = ("kept", None) if verdict.match is None else ("dropped", verdict.match.key)
            if not sketch.empty:
                for builder in builders.values():
                    builder.add(key, sketch)
        groups = {linkage: {key: number for number, members in enumerate(builder.groups()) for key in members}
                  for linkage, builder in builders.items()}
        return MethodResult(decisions, cpu, groups["transitive"], groups["representative"])

    return run


def _templates(sketcher: Sketcher, pages: Sequence[tuple[str, bytes]], learn: str) -> list[Any]:
    """Each page's host template hashes, learned as ``learn`` says (see :func:`product_method`)."""
    blocks = sketcher.block_hashes([html for _, html in pages])
    by_host: dict[str, list[Any]] = {}
    for (key, _), hashes in zip(pages, blocks, strict=True):
        if hashes is not None:  # pages that mark their main content are sketched without a template
            by_host.setdefault(host_of(key) or "", []).append(hashes)
    limit = None if learn == "batch" else SAMPLE_PAGES
    learned = {host: learn_template(sample[:limit]).hashes for host, sample in by_host.items()}
    return [learned.get(host_of(key) or "") for key, _ in pages]


def contained_method(articles_only: bool, threshold: float = DEFAULT_THRESHOLD) -> Method:
    """``auto`` (templates learned as a crawl learns them) plus a rule the product does not apply
    (``benchmarks/containment.py``): a page is also dropped when a larger kept page holds at least 0.9 of it
    (``articles_only``: a kept page that declares itself an article)."""

    def run(pages: Sequence[tuple[str, bytes]]) -> MethodResult:
        sketcher = Sketcher()
        start = time.process_time()
        sketches = sketcher.sketch_many([html for _, html in pages], templates=_templates(sketcher, pages, "crawl"))
        cpu = time.process_time() - start
        articles = containment.declares_article([html for _, html in pages]) if articles_only else None
        matched, dropped = containment.decide([key for key, _ in pages], sketches, sketcher, threshold=threshold,
                                              articles=articles)
        logger.info("containment alone dropped %d of %d pages", dropped, len(pages))
        decisions: dict[str, Decision] = {key: ("kept", None) if match is None else ("dropped", match)
                                          for key, match in matched.items()}
        return MethodResult(decisions, cpu)

    return run


#: The built-in methods, each made for a threshold.
METHODS: dict[str, Callable[[float], Method]] = {
    "body": lambda threshold: product_method("body", threshold=threshold),
    "main": lambda threshold: product_method("main", threshold=threshold),
    "auto": lambda threshold: product_method("auto", "crawl", threshold),
    "auto-batch": lambda threshold: product_method("auto", "batch", threshold),
}

#: Also available by name: ``auto`` without host templates (each page read alone); ``auto`` with the containment
#: rule the product does not apply, in every kept page or in kept article pages only.
EXTRA_METHODS: dict[str, Callable[[float], Method]] = {
    "auto-none": lambda threshold: product_method("auto", None, threshold),
    "auto-contained": lambda threshold: contained_method(False, threshold),
    "auto-contained-articles": lambda threshold: contained_method(True, threshold),
}


def resolve_method(name: str, threshold: float = DEFAULT_THRESHOLD) -> Method:
    """A method by name (:data:`METHODS`, made for ``threshold``) or ``module:attribute`` (a method, or a factory
    taking no argument)."""
    if name in METHODS or name in EXTRA_METHODS:
        return {**METHODS, **EXTRA_METHODS}[name](threshold)
    if ":" not in name:
        raise SystemExit(f"unknown method {name!r}: one of {', '.join(METHODS)} or module:attribute")
    module, attribute = name.split(":", 1)
    found = getattr(importlib.import_module(module), attribute)
    required = [p for p in inspect.signature(found).parameters.values() if p.default is inspect.Parameter.empty]
    method: Method = found() if not required else found
    return method


def run_one(corpus: Corpus, variant: Variant, name: str, method: Method, worst: int) -> dict[str, Any]:
    """Run ``method`` on one corpus variant and score it."""
    pages = corpus.html(variant)
    megabytes = sum(len(html) for _, html in pages) / 1e6
    start = time.process_time()
    result = method(pages)
    total_cpu = time.process_time() - start
    cpu = result.sketch_cpu_seconds if result.sketch_cpu_seconds is not None else total_cpu
    labels = labels_for(corpus)
    scores = evaluate(corpus, result.decisions, worst=worst, labels=labels)
    star = star_groups(result.decisions)
    components = components_report(corpus, result.groups if result.groups is not None else star, labels)
    representative = components_report(
        corpus, result.representative_groups if result.representative_groups is not None else star, labels)
    return {
        "corpus": corpus.name,
        "variant": variant,
        "method": name,
        "html_mb": round(megabytes, 3),
        "sketch_cpu_seconds": round(cpu, 3),
        "method_cpu_seconds": round(total_cpu, 3),
        "mb_html_per_cpu_s": round(megabytes / cpu, 2) if cpu > 0 else None,
        **scores.as_dict(),
        "largest_group": components.as_dict(),
        "representative_group": representative.as_dict(),
    }


def _path(key: str) -> str:
    return key.split("/", 3)[3] if key.count("/") >= 3 else key


def print_table(rows: Sequence[dict[str, Any]]) -> None:
    header = (f"{'corpus':<14} {'variant':<8} {'mode':<10} {'pages':>5} {'false':>5} {'grey':>4} {'prec':>6} "
              f"{'real':>5} {'whole':>5} {'recall':>6} {'MB/CPU s':>8} {'group':>5} {'g-false':>7} {'all-f':>6} "
              f"{'rep':>4} {'r-false':>7} {'all-f':>6}")
    print(header)
    print("-" * len(header))
    for r in rows:
        group, rep = r["largest_group"], r["representative_group"]
        print(f"{r['corpus']:<14} {r['variant']:<8} {r['method']:<10} {r['pages']:>5} {r['false_drops']:>5} "
              f"{r['grey_drops']:>4} {r['precision']:>6.3f} {r['real_pairs']:>5} {r['whole']:>5} "
              f"{r['recall']:>6.3f} {r['mb_html_per_cpu_s'] or 0:>8.1f} {group['largest']:>5} "
              f"{group['false_pairs']:>7} {group['all_false_pairs']:>6} {rep['largest']:>4} {rep['false_pairs']:>7} "
              f"{rep['all_false_pairs']:>6}")


def print_worst(rows: Sequence[dict[str, Any]], count: int) -> None:
    for r in rows:
        if not r["worst_false_drops"] or count == 0:
            continue
        print(f"\nworst false drops: {r['corpus']} {r['variant']} {r['method']}")
        for drop in r["worst_false_drops"][:count]:
            print(f"  J={drop['jaccard']:.3f} {_path(drop['dropped'])} ({drop['dropped_words']} words) "
                  f"-> {_path(drop['kept'])} ({drop['kept_words']} words)")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--corpus", action="append", choices=CORPUS_NAMES, help="default: all")
    parser.add_argument("--variant", action="append", choices=VARIANTS, help="default: both")
    parser.add_argument("--method", action="append", help=f"default: {', '.join(METHODS)}")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                        help=f"resemblance the built-in methods catch (default {DEFAULT_THRESHOLD})")
    parser.add_argument("--worst", type=int, default=3, help="worst false drops printed per row (all kept: 10)")
    parser.add_argument("--output", type=Path, default=RESULTS / "templates.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    names = args.method or list(METHODS)
    methods = {name: resolve_method(name, args.threshold) for name in names}
    rows: list[dict[str, Any]] = []
    corpora_info = []
    build_start = time.perf_counter()
    for corpus_name in args.corpus or CORPUS_NAMES:
        corpus = load_corpus(corpus_name)
        labels_for(corpus)
        corpora_info.append({"corpus": corpus.name, "generator": corpus.generator, "package": corpus.package,
                             "version": corpus.version, "hosts": list(corpus.hosts), "pages": len(corpus),
                             "reached": corpus.reached})
        for variant in args.variant or VARIANTS:
            for name, method in methods.items():
                rows.append(run_one(corpus, variant, name, method, worst=10))
                print(f"  {corpus.name} {variant} {name}: done", file=sys.stderr)
    elapsed = time.perf_counter() - build_start
    print_table(rows)
    print_worst(rows, args.worst)
    print(f"\n{elapsed:.1f} s in all; load average {os.getloadavg()[0]:.2f}")
    report = {
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
                    "load_average_end": os.getloadavg()[0]},
        "corpora": corpora_info,
        "rows": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
