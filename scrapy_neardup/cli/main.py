"""The ``neardup`` command: dedupe JSON lines, compare two pages, draw the S-curve, run Elasticsearch jobs."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import sys
from collections.abc import Iterator, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import IO, Any

import numpy as np

from .. import __version__
from ..core.dedupe import Deduper
from ..core.evidence import match_evidence
from ..core.host_template import learn_hosts
from ..core.params import DEFAULT_NUM_PERM
from ..core.sketch import Sketcher
from ..core.theory import (
    DEFAULT_LOW,
    DEFAULT_THRESHOLD,
    curve,
    describe_rule,
    flag_probability,
    midpoint,
    min_shared_for,
)
from ..errors import CommandError, InputError
from .explain import add_explain
from .jsonl import ID_FIELD_HELP, choose_id_field, json_line, open_input, read_records, record_host, record_pages
from .options import add_progress_option, add_sketch_options, add_threshold_options, params_or_exit
from .progress import progress_bar
from .report import add_report

logger = logging.getLogger(__name__)

_BATCH = 512
#: Exit status after Ctrl-C: 128 + SIGINT, what a shell reports for a command SIGINT stopped.
INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``neardup`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        if hasattr(args, "handler"):
            return int(args.handler(args, parser) or 0)
        parser.print_help(sys.stderr)
        return 2
    except (CommandError, InputError) as exc:
        print(f"neardup: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. piped into head
        return 0
    except KeyboardInterrupt:
        # Ctrl-C, for every subcommand: the command's own finally blocks have run (output flushed, summary
        # printed, connections closed); one line instead of a traceback, and the shell's status for SIGINT.
        print("neardup: interrupted", file=sys.stderr)
        return INTERRUPTED


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neardup", description="Near-duplicate detection with MinHash sketches (t of k positions)."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    _add_dedupe(sub)
    _add_compare(sub)
    add_explain(sub)
    add_report(sub)
    _add_curve(sub)
    _add_es(sub)
    return parser


# -- dedupe ------------------------------------------------------------------------------------------------------


def _add_dedupe(sub: Any) -> None:
    p = sub.add_parser(
        "dedupe",
        help="mark or drop near-duplicate records of a JSON-lines file",
        description="Read JSON lines; write every record back in input order with 'duplicate_of' (id of the kept "
        "record it near-duplicates, or null), 'resemblance' (estimated, or null) and 'evidence' (rule, shared "
        "positions of k, 95% interval of the resemblance; or null). First seen is kept. "
        "Records without usable text are kept with duplicate_of null and counted in the summary.",
    )
    p.add_argument("input", help="JSON-lines file, or - for stdin")
    p.add_argument("-o", "--output", default="-", help="output JSON-lines file, or - for stdout (default)")
    p.add_argument("--text-field", default="text", help="field holding the text or HTML (default: text)")
    p.add_argument("--id-field", default=None, help=ID_FIELD_HELP + "; records without one get their line number")
    p.add_argument("--url-field", default="url",
                   help="field holding the page URL, whose host's template --content auto learns over the whole "
                        "input (default: url; records without one are sketched without a template)")
    p.add_argument("--drop", action="store_true", help="write kept records only")
    add_progress_option(p)
    add_sketch_options(p)
    p.set_defaults(handler=_run_dedupe)


def _run_dedupe(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    params = params_or_exit(args, parser)
    sketcher = Sketcher.from_params(params)
    deduper = Deduper(sketcher, min_shared=params.min_shared)
    auto = sketcher.content == "auto"
    with open_input(args.input, rereadable=auto) as (source, size), _open_output(args.output) as sink:
        templates: dict[str, np.ndarray] = {}
        if auto:
            # The hosts' templates from the whole input first (see scrapy_neardup.core.host_template), then the pages.
            progress = progress_bar("templates", args.progress, total=size, unit="B")
            try:
                templates = learn_record_templates(source, sketcher, args.text_field, args.url_field, progress)
            finally:
                progress.close()
            source.seek(0)
        progress = progress_bar("dedupe", args.progress, total=size, unit="B")
        fields: set[str] = set()  # of the first batch: named when no record has the text field
        try:
            for batch in _record_batches(source, progress):
                if args.id_field is None and batch:
                    args.id_field = choose_id_field(None, batch[0][1], args.url_field, "neardup dedupe")
                if not fields:
                    fields.update(name for _, record in batch for name in record)
                _dedupe_batch(deduper, batch, args, sink, templates)
        finally:
            progress.close()
            print(f"neardup dedupe: {deduper.stats.summary()}", file=sys.stderr)
    _fail_if_nothing_checked(deduper, args.text_field, fields)
    return 0


def _fail_if_nothing_checked(deduper: Deduper, text_field: str, fields: set[str]) -> None:
    """Every record was skipped for its text: the records were written back unchanged (duplicate_of null), but
    nothing was compared, which is never what was meant (usually a wrong --text-field). Some records skipped is
    bad input counted in the summary, as the crawl passes such pages through and counts them: exit 0."""
    stats = deduper.stats
    if stats.seen == 0 or stats.skipped < stats.seen:
        return
    reasons = ", ".join(f"{k}: {v}" for k, v in sorted(stats.skipped_by_reason.items()))
    hint = ""
    if stats.skipped_by_reason.get("missing") == stats.seen:
        hint = f"; the records have fields: {', '.join(sorted(fields)) or 'none'} (choose one with --text-field)"
    raise CommandError(f"no record could be checked: none of the {stats.seen} records has usable text in "
                       f"--text-field {text_field!r} ({reasons}){hint}")


def learn_record_templates(source: IO[bytes], sketcher: Sketcher, text_field: str, url_field: str,
                           progress: Any = None) -> dict[str, np.ndarray]:
    """The template of each host of the JSON-lines records in ``source`` (host of ``url_field``), learned over all
    its records (:class:`~scrapy_neardup.core.host_template.TemplateLearner`), as the block hashes sketches take."""
    learner = learn_hosts(record_pages(source, text_field, url_field, None if progress is None else progress.update),
                          sketcher.block_hashes)
    return {host: learner.learn(host).hashes for host in learner.hosts}


def _record_batches(source: IO[bytes], progress: Any) -> Iterator[list[tuple[int, dict[str, Any]]]]:
    """``(line number, record)`` batches; an unparsable line ends the run after the records before it."""
    batch: list[tuple[int, dict[str, Any]]] = []
    try:
        for number, record in read_records(source, progress.update):
            batch.append((number, record))
            if len(batch) >= _BATCH:
                yield batch
                batch = []
    except InputError:
        yield batch
        raise
    if batch:
        yield batch


def _dedupe_batch(
    deduper: Deduper, batch: list[tuple[int, dict[str, Any]]], args: argparse.Namespace, sink: IO[str],
    templates: dict[str, np.ndarray],
) -> None:
    # A missing or null id becomes the line number: duplicate_of null must only ever mean "kept".
    ids = [number if record.get(args.id_field) is None else record[args.id_field] for number, record in batch]
    # Index keys are JSON so that duplicate_of comes back with the id's own type (int stays int).
    keys = [json.dumps(i, ensure_ascii=False) for i in ids]
    hosts = [record_host(record, args.url_field) for _, record in batch]
    verdicts = deduper.check_many(keys, [record.get(args.text_field) for _, record in batch],
                                  [templates.get(host) if host is not None else None for host in hosts])
    for (_, record), verdict in zip(batch, verdicts, strict=True):
        if args.drop and not verdict.kept:
            continue
        match = verdict.match
        record["duplicate_of"] = json.loads(match.key) if match else None
        record["resemblance"] = match.resemblance if match else None
        record["evidence"] = match_evidence(match, deduper.sketcher.num_perm, sketch=verdict.sketch) if match else None
        sink.write(json_line(record))


@contextlib.contextmanager
def _open_output(path: str) -> Iterator[IO[str]]:
    # backslashreplace writes a lone surrogate as the JSON escape \udXXX: the output stays valid UTF-8 JSON.
    if path == "-":
        out = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", errors="backslashreplace", newline="\n")
        try:
            yield out
        finally:
            out.flush()
            out.detach()
        return
    try:
        handle = open(path, "w", encoding="utf-8", errors="backslashreplace", newline="\n")  # noqa: SIM115
    except OSError as exc:
        raise CommandError(f"cannot write {path}: {exc.strerror}") from None
    with handle:
        yield handle


# -- compare -----------------------------------------------------------------------------------------------------


def _add_compare(sub: Any) -> None:
    p = sub.add_parser(
        "compare",
        help="estimated resemblance, exact Jaccard and shared positions of two files",
        description="Compare two text or HTML files (HTML is detected from the content).",
    )
    p.add_argument("a", help="first file")
    p.add_argument("b", help="second file")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_sketch_options(p)
    p.set_defaults(handler=_run_compare)


def _run_compare(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    params = params_or_exit(args, parser)
    sketcher, t = Sketcher.from_params(params), params.min_shared
    contents = [_read_file(args.a), _read_file(args.b)]
    a, b = sketcher.sketch_many(contents)
    shared = a.shared_positions(b)
    result = {
        "a": args.a,
        "b": args.b,
        "resemblance": shared / sketcher.num_perm,
        "jaccard": sketcher.jaccard(contents[0], contents[1]),
        "shared_positions": shared,
        "num_perm": sketcher.num_perm,
        "min_shared": t,
        "near_duplicate": shared >= t,
        "exact_duplicate": a.fingerprint == b.fingerprint,
    }
    if args.json:
        print(json.dumps(result))
    else:
        verdict = "exact duplicates" if result["exact_duplicate"] else (
            "near-duplicates" if result["near_duplicate"] else "not near-duplicates")
        print(f"estimated resemblance: {result['resemblance']:.4f}")
        print(f"exact Jaccard:         {result['jaccard']:.4f}")
        print(f"shared positions:      {shared} of {sketcher.num_perm} (near-duplicate at >= {t})")
        print(f"verdict:               {verdict}")
    return 0


def _read_file(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}") from None


# -- curve -------------------------------------------------------------------------------------------------------


def _add_curve(sub: Any) -> None:
    p = sub.add_parser(
        "curve",
        help="the S-curve p(r) = P[Binomial(k, r) >= t]",
        description="Probability that two pages of resemblance r are flagged, for r = 0.00 .. 1.00.",
    )
    p.add_argument("--num-perm", type=int, default=DEFAULT_NUM_PERM, metavar="K",
                   help=f"signature positions k (default {DEFAULT_NUM_PERM})")
    add_threshold_options(p)
    p.add_argument("--json", action="store_true", help="print the curve as JSON")
    p.add_argument("--png", metavar="FILE", help="draw the curve into a PNG file (needs matplotlib)")
    p.set_defaults(handler=_run_curve)


def _run_curve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    params = params_or_exit(args, parser)
    k, t = params.num_perm, params.min_shared
    points = curve(k, t)
    if args.json:
        payload = {"num_perm": k, "min_shared": t,
                   "points": [{"resemblance": r, "probability": p} for r, p in points]}
        print(json.dumps(payload))
    else:
        print(describe_rule(k, t))
        print(f"p(r) = P[Binomial({k}, r) >= {t}], p = 1/2 at r = {midpoint(k, t):.3f}")
        for r, p in points[::5]:
            print(f"  r = {r:4.2f}  p = {p:.3e}")
    if args.png:
        _draw_curve(args.png, k, t, args.threshold)
    return 0


def _draw_curve(path: str, k: int, t: int, threshold: float | None) -> None:
    try:
        # lazy: matplotlib is optional (the "plot" extra)
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CommandError("--png needs matplotlib: pip install 'scrapy-neardup[plot]'") from None
    rs = np.linspace(0, 1, 1001)
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    ax.plot(rs, flag_probability(rs, k, t), color="#1f5fa8", linewidth=2, label=f"p(r), k={k}, t={t}")
    ax.axvline(t / k, color="#a83a1f", linestyle="--", linewidth=1, label=f"t/k = {t / k:.3f}")
    if threshold is not None or t == min_shared_for(DEFAULT_THRESHOLD, k):
        target = DEFAULT_THRESHOLD if threshold is None else threshold
        p_target = float(flag_probability(target, k, t)[0])
        ax.plot([target], [p_target], "o", color="#2a8a3a", label=f"p({target:g}) = {p_target:.4f}")
    p_low = float(flag_probability(DEFAULT_LOW, k, t)[0])
    ax.plot([DEFAULT_LOW], [p_low], "s", color="#7a3aa8", label=f"p({DEFAULT_LOW:g}) = {p_low:.1e}")
    ax.set_xlabel("resemblance r (Jaccard of shingle sets)")
    ax.set_ylabel("probability of being flagged")
    ax.set_title("S-curve of the t-of-k near-duplicate rule")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left")
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as exc:
        raise CommandError(f"cannot write {path}: {exc.strerror}") from None
    finally:
        plt.close(fig)


# -- es ----------------------------------------------------------------------------------------------------------


def _add_es(sub: Any) -> None:
    """Add the command groups other packages register under the ``neardup.commands`` entry point group.

    ``es_integration`` registers ``es`` there (see pyproject.toml): the core never imports it, so the command
    works without the Elasticsearch client installed, and a third package can add its own group the same way.
    The entry points load sorted by name, so that one may add commands to a group another made: the local node
    launcher (``neardup-devnode``) registers ``es-devnode``, which comes after ``es``, and adds ``start``,
    ``stop`` and ``status`` to it through ``es_integration.cli.add_command``.
    """
    for entry in sorted(entry_points(group="neardup.commands"), key=lambda e: e.name):
        try:
            register = entry.load()
        except ImportError as exc:  # its dependencies are not installed: the core commands still work
            logger.debug("neardup %s commands unavailable: %s", entry.name, exc)
            continue
        register(sub)


if __name__ == "__main__":
    sys.exit(main())
