"""``neardup es report`` and ``neardup es explain``: the evidence of an index's decisions.

``report`` sweeps the documents sketched with the parameters (their compact signatures, group fields and URL) and
writes one self-contained HTML page: totals, duplicate rate per host, the largest groups, every duplicate with its
evidence against the page it names (``neardup.duplicate_of``: written by ``neardup es groups --assign`` or by a
crawl) and the command that shows the pair, and the pairs' resemblance against the S-curve. ``explain`` compares
two documents: side by side as sketched when both hold their text (``--text-field``), else by their stored
signatures.
"""

from __future__ import annotations

import argparse
import shlex
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from scrapy_neardup.cli.explain import (
    Side,
    compare_stored,
    explain,
    render_html,
    render_stored_text,
    render_text,
)
from scrapy_neardup.cli.options import add_sketch_options
from scrapy_neardup.cli.report import Decision, render_decisions
from scrapy_neardup.core.evidence import Rule, evidence, sides
from scrapy_neardup.core.match import Sketched
from scrapy_neardup.core.mirror_table import host_of
from scrapy_neardup.core.params import SketchParams
from scrapy_neardup.core.sketch import Sketcher
from scrapy_neardup.core.stored_signature import decode_many
from scrapy_neardup.errors import EsError

from .cli_jobs import connection_options, job_params, run_job
from .indexing import get_field
from .mapping import (
    DUPLICATE,
    F_DUPLICATE_OF,
    F_FINGERPRINT,
    F_KEY,
    F_SIG,
    F_STATUS,
    ROOT,
    TEXT_FIELDS,
    require_tag,
    stored_sketched,
)
from .names import validate_field_name
from .sweep import point_in_time, sliced_sweep

#: The doc-value fields a report reads of each document.
_FIELDS = [F_SIG, F_FINGERPRINT, F_STATUS, F_DUPLICATE_OF, F_KEY, *TEXT_FIELDS]


def add_report_commands(commands: Any) -> None:
    """Add ``report`` and ``explain`` to the ``neardup es`` commands."""
    p = commands.add_parser(
        "report", help="an HTML report of an index's near-duplicates, with the evidence of each",
        description="Sweep the documents sketched with these parameters and write one self-contained HTML page: "
        "totals, duplicate rate per host, the largest groups, every duplicate (neardup.duplicate_of, written by "
        "`neardup es groups --assign` or a crawl) with its evidence against the page it names, and the pairs "
        "against the S-curve. Each document's compact signature, URL and group fields are held in memory meanwhile.",
    )
    p.add_argument("-o", "--output", required=True, help="HTML file to write")
    p.add_argument("--url-field", default="url", help="URL field (default: url; else the page key neardup.key)")
    connection_options(p)
    add_sketch_options(p, with_threshold=True, title="sketch parameters (as when the index was sketched)")
    p.set_defaults(func=lambda args: run_job("report", _report_job, args))

    p = commands.add_parser(
        "explain", help="why two documents of an index are (or are not) near-duplicates",
        description="Compare two documents (by _id, or by their page key neardup.key): side by side as they are "
        "sketched when both hold their text in --text-field, with the differences, shared positions, the "
        "estimate with its 95% interval and the decision; else by their stored signatures.",
    )
    p.add_argument("pages", nargs=2, metavar="ID", help="two document ids (or page keys)")
    p.add_argument("--text-field", default="text", help="field holding the text or HTML (default: text)")
    p.add_argument("--url-field", default="url", help="URL field (default: url)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--html", metavar="FILE", default=None, help="also write a self-contained HTML page to FILE")
    connection_options(p)
    add_sketch_options(p, with_threshold=True, title="sketch parameters (as when the index was sketched)")
    p.set_defaults(func=lambda args: run_job("explain", _explain_job, args))


def extend_core_commands(subparsers: Any) -> None:
    """``neardup report`` and ``neardup explain`` (when the ``neardup`` command has them) take an index too."""
    if "report" in subparsers.choices:
        extend_core_report(subparsers.choices["report"])
    if "explain" in subparsers.choices:
        extend_core_explain(subparsers.choices["explain"])


def extend_core_report(parser: argparse.ArgumentParser) -> None:
    """Give ``neardup report`` the connection options: with ``--index`` it writes the report of an index (as
    ``neardup es report``), otherwise it runs as before."""
    connection_options(parser, index_required=False, progress=False)
    files = parser.get_default("handler")

    def handler(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        if args.index is None:
            return int(files(args, parser))
        if args.input is not None:
            parser.error("give either an input (a file or a state directory) or --index, not both")
        return run_job("report", _report_job, args)

    parser.set_defaults(handler=handler)


def extend_core_explain(parser: argparse.ArgumentParser) -> None:
    """Give ``neardup explain`` the connection options: with ``--index``, A and B are two documents of an index
    (as ``neardup es explain``), otherwise it runs as before."""
    connection_options(parser, index_required=False, progress=False)
    files = parser.get_default("handler")

    def handler(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        if args.index is None:
            return int(files(args, parser))
        if len(args.pages) != 2 or args.state is not None:
            parser.error("explain --index takes two document ids (or page keys), without --state")
        return run_job("explain", _explain_job, args)

    parser.set_defaults(handler=handler)


def _write(path: str, text: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise EsError(f"cannot write {path}: {exc.strerror}") from None


def _report_job(args: argparse.Namespace, client: Any) -> int:
    validate_field_name(args.url_field)
    params = job_params(args)
    require_tag(client, args.index, params.tag)
    _write(args.output, index_report(client, args.index, params, url_field=args.url_field))
    return 0


def index_report(client: Any, index: str, params: SketchParams, *, url_field: str = "url") -> str:
    """The report page of ``index`` (module doc). Each duplicate's ``shared`` positions are counted between its
    stored signature and that of the page its ``neardup.duplicate_of`` names (an ``_id``, or a crawl's page key):
    rule ``exact`` for equal fingerprints, ``near_duplicate`` at ``shared >= t``, ``transitive`` below (groups
    made with ``--transitive``); no evidence when the page named is not in the index."""
    from .groups.queries import sketched

    ids: list[str] = []
    keys: list[str | None] = []
    names: list[str] = []
    sigs: list[object] = []
    prints: list[object] = []
    targets: list[str | None] = []
    texts: list[Sketched | None] = []  # what of each page was sketched, as its document says
    with point_in_time(client, index) as pit:
        for hits in sliced_sweep(client, pit, query=sketched(params.tag), source=[url_field], docvalue_fields=_FIELDS):
            for hit in hits:
                fields = hit.get("fields") or {}
                key = (fields.get(F_KEY) or [None])[0]
                url = get_field(hit.get("_source") or {}, url_field)
                ids.append(hit["_id"])
                keys.append(key)
                names.append(url if isinstance(url, str) and url else key or hit["_id"])
                sigs.append((fields.get(F_SIG) or [None])[0])
                prints.append((fields.get(F_FINGERPRINT) or [None])[0])
                duplicate = (fields.get(F_STATUS) or [None])[0] == DUPLICATE
                targets.append((fields.get(F_DUPLICATE_OF) or [None])[0] if duplicate else None)
                texts.append(stored_sketched({name[len(ROOT) + 1:]: fields.get(name) for name in TEXT_FIELDS}))
    values, valid = decode_many(sigs, params.num_perm)
    row_of = {doc_id: row for row, doc_id in enumerate(ids)}
    for row, key in enumerate(keys):
        if key is not None:
            row_of.setdefault(key, row)  # a crawl's duplicate_of is a page key
    hosts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    rows = []
    for row, target in enumerate(targets):
        host = hosts[host_of(names[row]) or "(no URL)"]
        host[0] += 1
        if target is None:
            continue
        host[1] += 1
        of = row_of.get(target)
        fields, resemblance, command = None, None, None
        if of is not None and valid[row] and valid[of]:
            shared = int(np.count_nonzero(values[row] == values[of]))
            exact = prints[row] is not None and prints[row] == prints[of]
            rule: Rule = "exact" if exact else ("near_duplicate" if shared >= params.min_shared else "transitive")
            fields = {**evidence(shared, params.num_perm, rule), **sides(texts[row], texts[of])}
            resemblance = shared / params.num_perm
            command = f"neardup es explain --index {index} {shlex.quote(ids[of])} {shlex.quote(ids[row])}"
        rows.append(Decision(names[row], names[of] if of is not None else target, resemblance, fields, command))
    rows.sort(key=lambda decision: (decision.of, decision.page))  # an index has no order of its own
    note = ("Every document sketched with these parameters; a duplicate is one whose neardup.status is "
            "'duplicate' (written by `neardup es groups --assign` or by a crawl), compared with the page its "
            "neardup.duplicate_of names. The command under each shows the pair (add the connection options).")
    return render_decisions(f"index {index}", params.num_perm, params.min_shared, rows, hosts, note)


def _explain_job(args: argparse.Namespace, client: Any) -> int:
    import json

    for name in (args.text_field, args.url_field):
        validate_field_name(name)
    params = job_params(args)
    docs = [_document(client, args.index, wanted, args) for wanted in args.pages]
    names = [d["name"] for d in docs]
    texts = [d["text"] for d in docs]
    if all(isinstance(t, str) for t in texts):
        result = explain(Sketcher.from_params(params), params.min_shared,
                         [Side(n, t) for n, t in zip(names, texts, strict=True)])
        print(json.dumps(result, ensure_ascii=False) if args.json else render_text(result))
        if args.html:
            _write(args.html, render_html(result))
        return 0
    values, valid = decode_many([d["sig"] for d in docs], params.num_perm)
    if not valid.all():
        raise EsError(f"{' and '.join(n for n, ok in zip(names, valid, strict=True) if not ok)}: no readable "
                      f"signature made with {params.tag} (and no text in {args.text_field!r})")
    # A missing fingerprint equals no other (a negative stand-in, distinct per document).
    fingerprints = [int(d["fingerprint"], 16) if d["fingerprint"] else -1 - i for i, d in enumerate(docs)]
    result = compare_stored(names, values, fingerprints, params.min_shared, f"index {args.index}")
    print(json.dumps(result, ensure_ascii=False) if args.json else render_stored_text(result))
    return 0


def _document(client: Any, index: str, wanted: str, args: argparse.Namespace) -> dict[str, Any]:
    """One document by ``_id``, else by its page key: its name (URL), text, signature and fingerprint."""
    response = client.search(
        index=index, query={"bool": {"should": [{"ids": {"values": [wanted]}}, {"term": {F_KEY: wanted}}]}},
        source=[args.text_field, args.url_field], docvalue_fields=[F_SIG, F_FINGERPRINT, F_KEY], size=1,
    )
    hits = response["hits"]["hits"]
    if not hits:
        raise EsError(f"index {index} has no document with _id or page key {wanted}")
    hit = hits[0]
    source, fields = hit.get("_source") or {}, hit.get("fields") or {}
    url = get_field(source, args.url_field)
    name = url if isinstance(url, str) and url else (fields.get(F_KEY) or [hit["_id"]])[0]
    return {"name": name, "text": get_field(source, args.text_field), "sig": (fields.get(F_SIG) or [None])[0],
            "fingerprint": (fields.get(F_FINGERPRINT) or [None])[0]}
