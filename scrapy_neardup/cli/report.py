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

from ..core.sketch import Sketcher
from ..core.theory import curve
from ..errors import CommandError
from .explain import Side, explain
from .jsonl import ID_FIELD_HELP, choose_id_field, open_input, read_records, record_host
from .options import add_sketch_options, params_from_args

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
    try:
        params = params_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
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
    parts.append("<h2>Resemblance of the duplicate pairs</h2>" + _plot(records, dups, k, min_shared))
    rows = "".join(
        f"<tr><td>{esc(host)}</td><td class=n>{n}</td><td class=n>{d}</td><td><span class=bar style=\"width:"
        f"{100 * d / n:.0f}px\"></span> {d / n:.0%}</td></tr>"
        for host, (n, d) in sorted(per_host.items(), key=lambda item: (-item[1][1], item[0])))
    parts.append("<h2>Duplicate rate per host</h2><table><tr><th>host</th><th>records</th><th>duplicates</th>"
                 f"<th>rate</th></tr>{rows}</table>")
    rows = "".join(
        f"<tr><td>{esc(_name(records.get(kept, {}), kept, args.url_field))}</td><td class=n>{n + 1}</td></tr>"
        for kept, n in groups.most_common(20))
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
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>Near-duplicate report</title>"
            f"<style>{_CSS}</style></head><body>{''.join(parts)}</body></html>\n")


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


def _plot(records: dict[str, dict[str, Any]], dups: list[str], k: int, t: int) -> str:
    """Inline SVG: the S-curve ``p(r)`` of ``t`` of ``k`` and, below it, a tick per duplicate pair at its estimated
    resemblance (their count per 0.01 of ``r`` as a histogram)."""
    width, height, left, top, plot_w, plot_h = 640, 300, 50, 15, 560, 220

    def x(r: float) -> float:
        return left + r * plot_w

    def y(p: float) -> float:
        return top + (1 - p) * plot_h

    points = " ".join(f"{x(r):.1f},{y(p):.1f}" for r, p in curve(k, t))
    counts = Counter(min(99, int(float(records[rid].get("resemblance") or 0) * 100)) for rid in dups)
    most = max(counts.values(), default=1)
    bars = "".join(f'<rect x="{x(b / 100):.1f}" y="{y(n / most):.1f}" width="{plot_w / 100:.1f}" '
                   f'height="{plot_h * n / most:.1f}" class="hist"><title>{n} pairs at r = {b / 100:.2f}</title></rect>'
                   for b, n in sorted(counts.items()))
    axis = "".join(f'<line x1="{x(r)}" y1="{y(0)}" x2="{x(r)}" y2="{y(0) + 5}" class="ax"/><text x="{x(r)}" '
                   f'y="{y(0) + 18}" class="lab">{r:.1f}</text>' for r in (0, 0.2, 0.4, 0.6, 0.8, 1.0))
    axis += "".join(f'<text x="{left - 8}" y="{y(p) + 4}" class="lab end">{p:.1f}</text>' for p in (0, 0.5, 1.0))
    return (f'<svg viewBox="0 0 {width} {height}" style="width:100%;max-width:{width + 180}px" role="img" '
            f'aria-label="estimated resemblance of the duplicate pairs and the S-curve">'
            f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" class="frame"/>{bars}'
            f'<polyline points="{points}" class="curve"/>{axis}'
            f'<text x="{left + plot_w / 2}" y="{height - 8}" class="lab">resemblance r (bars: duplicate pairs, '
            f'scaled to the largest; line: probability a pair at r is flagged)</text></svg>')


_CSS = """body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1100px;
padding:1.5em 2em;color:#1f2933;background:#fff}h1{font-size:1.6em;margin:.2em 0}h2{font-size:1.2em;
margin-top:2em;border-bottom:1px solid #e4e7eb;padding-bottom:.3em}h3{font-size:1em;margin:.3em 0}
.sub{color:#616e7c;margin:.2em 0}.cards{display:flex;gap:1em;flex-wrap:wrap;margin:1em 0}
.card{background:#f5f7fa;border-radius:8px;padding:.7em 1.2em;min-width:7em;color:#52606d}
.card b{display:block;font-size:1.6em;color:#1f2933}table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.35em .6em;border-bottom:1px solid #eef0f3;vertical-align:top;word-break:break-all}
th{color:#52606d;font-weight:600}td.n{text-align:right;white-space:nowrap}
.bar{display:inline-block;height:.7em;background:#e0796b;border-radius:2px;vertical-align:middle}
svg .frame{fill:#fafbfc;stroke:#d9dde2}svg .curve{fill:none;stroke:#2f6fbf;stroke-width:2}
svg .hist{fill:#e0796b;opacity:.75}svg .ax{stroke:#9aa5b1}svg .lab{font-size:11px;fill:#52606d;text-anchor:middle}
svg .end{text-anchor:end}.cols{display:grid;grid-template-columns:1fr 1fr;gap:1.2em}
.text{background:#fafbfc;border:1px solid #e4e7eb;border-radius:6px;padding:.7em;max-height:18em;overflow:auto;
font-size:.92em}del{background:#fbd5d0;text-decoration:none}ins{background:#cdeccd;text-decoration:none}
.same{color:#7b8794;font-style:italic;white-space:nowrap}
.view{border-top:1px dashed #d9dde2;padding-top:.6em;margin-top:1em}a{color:#2f6fbf}"""

__all__ = ["DEFAULT_VIEWS", "add_report", "render_report", "run_report"]
