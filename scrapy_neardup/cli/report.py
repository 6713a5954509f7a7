"""``neardup report out.jsonl -o report.html``: one self-contained HTML page (inline CSS and SVG, no external asset)
about the output of ``neardup dedupe``: totals, the duplicate rate per host, the largest groups, every duplicate with
its evidence and a side-by-side view of the pair, and a plot of the pairs' estimated resemblance against the S-curve
``p(r) = P[Binomial(k, r) >= t]`` of the settings.
"""

from __future__ import annotations

import argparse
import html
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from ..core.report_html import page, plot
from ..core.sketch import Sketcher
from ..errors import CommandError
from .explain import Side, explain
from .jsonl import ID_FIELD_HELP, choose_id_field, open_input, read_records, record_host
from .options import add_sketch_options, params_or_exit

#: Side-by-side views written by default (each holds both texts).
DEFAULT_VIEWS = 200


def add_report(sub: Any) -> None:
    """Register ``neardup report`` on the ``neardup`` sub-parsers."""
    p = sub.add_parser(
        "report", help="an HTML report of the output of neardup dedupe",
        description="Write one self-contained HTML page about the JSON-lines output of `neardup dedupe`: totals, "
        "duplicate rate per host, largest groups, every duplicate with its evidence and a side-by-side view, and "
        "the pairs' estimated resemblance against the S-curve of the settings (give the sketch options the "
        "dedupe run used).",
    )
    p.add_argument("input", help="JSON-lines output of neardup dedupe, or - for stdin")
    p.add_argument("-o", "--output", required=True, help="HTML file to write")
    p.add_argument("--text-field", default="text", help="field holding the text or HTML (default: text)")
    p.add_argument("--id-field", default=None, help=ID_FIELD_HELP)
    p.add_argument("--url-field", default="url", help="field holding the page URL (default: url)")
    p.add_argument("--views", type=int, default=DEFAULT_VIEWS,
                   help=f"side-by-side views of duplicate pairs to include (default: {DEFAULT_VIEWS})")
    add_sketch_options(p)
    p.set_defaults(handler=run_report)


def run_report(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    params = params_or_exit(args, parser)
    if args.views < 0:
        parser.error(f"--views must be >= 0, got {args.views}")
    records: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    with open_input(args.input) as (source, _):
        for number, record in read_records(source):
            if "duplicate_of" not in record:
                raise CommandError(f"line {number}: no 'duplicate_of' field: not an output of neardup dedupe")
            args.id_field = choose_id_field(args.id_field, record, args.url_field, "neardup report")
            rid = json.dumps(record.get(args.id_field, number), ensure_ascii=False)
            records[rid] = record
            order.append(rid)
    sketcher = Sketcher.from_params(params)
    page = render_report(records, order, args, sketcher, params.min_shared)
    try:
        Path(args.output).write_text(page, encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"cannot write {args.output}: {exc.strerror}") from None
    return 0


def _name(record: dict[str, Any], rid: str, url_field: str) -> str:
    url = record.get(url_field)
    return url if isinstance(url, str) else json.loads(rid) if rid.startswith('"') else rid


def render_report(records: dict[str, dict[str, Any]], order: list[str], args: argparse.Namespace,
                  sketcher: Sketcher, min_shared: int) -> str:
    """The report page (module doc) of the dedupe records ``records`` (by JSON id), in input ``order``."""
    esc = html.escape
    k = sketcher.num_perm
    dups = [rid for rid in order if records[rid].get("duplicate_of") is not None]
    exact = sum(1 for rid in dups if (records[rid].get("evidence") or {}).get("rule") == "exact")
    per_host: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for rid in order:
        host = record_host(records[rid], args.url_field) or "(no URL)"
        per_host[host][0] += 1
        per_host[host][1] += records[rid].get("duplicate_of") is not None
    groups = Counter(json.dumps(records[rid]["duplicate_of"], ensure_ascii=False) for rid in dups)

    parts = [f"<h1>Near-duplicate report</h1><p class=sub>{esc(str(args.input))} &middot; t = {min_shared} of "
             f"k = {k}</p>"]
    parts.append('<div class="cards">' + "".join(
        f'<div class="card"><b>{value}</b>{esc(label)}</div>' for value, label in (
            (len(order), "records"), (len(order) - len(dups), "kept"), (len(dups), "duplicates"),
            (exact, "exact copies"), (f"{len(dups) / max(1, len(order)):.1%}", "duplicate rate"))) + "</div>")
    resemblances = [float(records[rid].get("resemblance") or 0) for rid in dups]
    parts.append("<h2>Resemblance of the duplicate pairs</h2>" + plot(resemblances, k, min_shared))
    rows = "".join(
        f"<tr><td>{esc(host)}</td><td class=n>{n}</td><td class=n>{d}</td><td><span class=bar style=\"width:"
        f"{100 * d / n:.0f}px\"></span> {d / n:.0%}</td></tr>"
        for host, (n, d) in sorted(per_host.items(), key=lambda item: (-item[1][1], item[0])))
    parts.append("<h2>Duplicate rate per host</h2><table><tr><th>host</th><th>records</th><th>duplicates</th>"
                 f"<th>rate</th></tr>{rows}</table>")
    rows = "".join(
        f"<tr><td>{esc(_name(records.get(kept, {}), kept, args.url_field))}</td><td class=n>{n + 1}</td></tr>"
        for kept, n in groups.most_common(10))
    parts.append("<h2>Largest groups</h2><table><tr><th>kept page</th><th>pages</th></tr>"
                 f"{rows or '<tr><td colspan=2>no duplicates</td></tr>'}</table>")
    views, rows_html = [], []
    for number, rid in enumerate(dups):
        record = records[rid]
        kept = json.dumps(record["duplicate_of"], ensure_ascii=False)
        fields = record.get("evidence") or {}
        low, high = fields.get("interval", [None, None])
        evidence_text = (f"{esc(str(fields.get('rule')))}: {fields.get('shared')} of {fields.get('k')}, r in "
                         f"[{low:.3f}, {high:.3f}]") if low is not None else "(no evidence field)"
        view = ""
        if number < args.views and kept in records:
            view = f' <a href="#why-{number}">why</a>'
            views.append(_view(number, records[kept], record, kept, rid, args, sketcher, min_shared))
        kept_name = _name(records.get(kept, {}), kept, args.url_field)
        rows_html.append(
            f"<tr id=\"dup-{number}\"><td>{esc(_name(record, rid, args.url_field))}</td><td>{esc(kept_name)}</td>"
            f"<td class=n>{record.get('resemblance', 0):.3f}</td><td>{evidence_text}{view}</td></tr>")
    parts.append(f"<h2>Every duplicate ({len(dups)})</h2><table><tr><th>page</th><th>duplicate of</th>"
                 f"<th>resemblance</th><th>evidence</th></tr>{''.join(rows_html)}</table>")
    if views:
        parts.append("<h2>Side by side</h2>" + "".join(views))
    return page("Near-duplicate report", "".join(parts))


def _view(number: int, kept: dict[str, Any], dup: dict[str, Any], kept_id: str, dup_id: str,
          args: argparse.Namespace, sketcher: Sketcher, min_shared: int) -> str:
    """The side-by-side view of a duplicate and its kept page (sketched without a host template)."""
    esc = html.escape
    texts = [kept.get(args.text_field), dup.get(args.text_field)]
    if not all(isinstance(t, str) for t in texts):
        return ""
    result = explain(sketcher, min_shared, [Side(_name(kept, kept_id, args.url_field), texts[0]),
                                            Side(_name(dup, dup_id, args.url_field), texts[1])])
    cols: list[list[str]] = [[], []]
    diff = result["diff"]
    for at, (op, wa, wb) in enumerate(diff):
        if op == "equal":
            same = _fold(wa, first=at == 0, last=at == len(diff) - 1)
            cols[0].append(same)
            cols[1].append(same)
            continue
        cols[0].append(f"<del>{esc(wa)}</del>" if wa else "")
        cols[1].append(f"<ins>{esc(wb)}</ins>" if wb else "")
    low, high = result["interval"]
    heads = [f"<div><h3>{label}: {esc(str(p['name']))}</h3><p class=sub>{esc(p['sketched'])}, {p['words_sketched']}"
             f" of {p['words_whole']} words ({p['removed_share']:.0%} left out)</p><div class=text>"
             f"{' '.join(c for c in col if c)}</div></div>"
             for label, p, col in zip(("kept", "duplicate"), result["pages"], cols, strict=True)]
    return (f'<section id="why-{number}" class=view><p><b>{result["shared"]} of {result["k"]}</b> positions shared, '
            f"estimated resemblance {result['resemblance']:.3f} (95% interval {low:.3f} &ndash; {high:.3f}), exact "
            f"Jaccard {result['jaccard']:.3f} &middot; <a href=\"#dup-{number}\">back to the list</a></p>"
            f"<div class=cols>{''.join(heads)}</div></section>")


def _fold(words: str, first: bool, last: bool, keep: int = 12) -> str:
    """A run of words both texts share, its middle folded (the differences stay in sight): the ``keep`` words next
    to each difference are shown, the rest counted."""
    parts = words.split()
    head = [] if first else parts[:keep]
    tail = [] if last else parts[-keep:]
    if len(parts) <= len(head) + len(tail) + keep:
        return html.escape(words)
    folded = len(parts) - len(head) - len(tail)
    return (html.escape(" ".join(head)) + f' <span class="same">&hellip; {folded} words the same &hellip;</span> '
            + html.escape(" ".join(tail)))


__all__ = ["DEFAULT_VIEWS", "add_report", "render_report", "run_report"]
