"""``neardup report out.jsonl -o report.html``: one self-contained HTML page (inline CSS and SVG, no external asset)
about the output of ``neardup dedupe``: totals, the duplicate rate per host, the largest groups, every duplicate with
its evidence and a side-by-side view of the pair, and a plot of the pairs' estimated resemblance against the S-curve
``p(r) = P[Binomial(k, r) >= t]`` of the settings.
"""

from __future__ import annotations

import argparse
import html
import json
import shlex
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.evidence import describe_evidence, evidence, mirror_evidence, sides
from ..core.params import SketchParams
from ..core.report_html import cards, largest, page, plot, rate_bar, table
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
    p.add_argument("input", nargs="?", help="JSON-lines output of neardup dedupe, - for stdin, or a crawl's state "
                   "directory (NEARDUP_STATE_DIR: the pages its store keeps, the groups among them, the mirror "
                   "hosts); with the Elasticsearch commands, --es-url URL --index NAME instead: an index")
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
    if args.input is None:
        parser.error("give the input: a neardup dedupe output, - (stdin) or a state directory")
    if args.views < 0:
        parser.error(f"--views must be >= 0, got {args.views}")
    if args.input != "-" and Path(args.input).is_dir():
        _write(args.output, state_report(args.input, params))
        return 0
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
    _write(args.output, render_report(records, order, args, sketcher, params.min_shared))
    return 0


def _write(path: str, page: str) -> None:
    try:
        Path(path).write_text(page, encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"cannot write {path}: {exc.strerror}") from None


def state_report(state: str, params: SketchParams) -> str:
    """The report of a crawl's state directory: its store keeps the pages kept (their signatures, no text) and
    the mirror hosts found; the groups are those of the stored pages sharing ``>= t`` of ``k`` positions (none
    when every page was checked against the others; some after recrawls changed pages), each member with its
    evidence against its representative (:func:`render_decisions`)."""
    from ..core.clustering import leader_labels
    from ..core.mirror_table import MirrorTable, host_of
    from ..errors import StateError
    from ..store.embedded import EmbeddedBackend

    backend = EmbeddedBackend(params.num_perm, params.min_shared, params.tag, state_dir=state)
    try:
        index = backend.read()
        mirrors = MirrorTable().load(state)  # the default thresholds: the crawl's are not saved
    except StateError as exc:
        raise CommandError(str(exc)) from None
    docs = index.live()
    values, _ = index.stored(docs)
    keys = [index.key(int(d)) for d in docs.tolist()]
    labels = leader_labels(values, params.min_shared, np.arange(len(keys)))[0] if len(keys) else np.zeros(0)
    rows = []
    for row, label in enumerate(labels.tolist()):
        if label != row:
            shared = int(np.count_nonzero(values[row] == values[label]))
            # What of both stored pages was sketched, as the store remembers it.
            fields = {**evidence(shared, params.num_perm, "near_duplicate"),
                      **sides(index.sketched(int(docs[row])), index.sketched(int(docs[label])))}
            rows.append(Decision(keys[row], keys[label], shared / params.num_perm, fields,
                                 f"neardup explain --state {shlex.quote(state)} {shlex.quote(keys[label])} "
                                 f"{shlex.quote(keys[row])}"))
    hosts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for key in keys:
        hosts[host_of(key) or "(no URL)"][0] += 1
    for decision in rows:
        hosts[host_of(decision.page) or "(no URL)"][1] += 1
    note = ("The store keeps the pages a crawl kept (their signatures, not their text) and the mirror hosts it "
            "found; a page dropped as a duplicate is not stored (the crawl's NEARDUP_REPORT lists each drop). The "
            "groups below are stored pages sharing at least t positions (pages changed by recrawls).")
    return render_decisions(f"state directory {state}", params.num_perm, params.min_shared, rows, hosts, note,
                            mirrors=[(m.mirror, m.original, m.copies, m.checked) for m in mirrors])


@dataclass(frozen=True)
class Decision:
    """A page grouped with (or dropped for) another: ``of`` is the page it was compared with, ``evidence`` the
    fields of :func:`~scrapy_neardup.core.evidence.evidence`, ``explain`` the command showing the pair."""

    page: str
    of: str
    resemblance: float | None
    evidence: dict[str, Any] | None
    explain: str | None = None


def render_decisions(source: str, k: int, t: int, rows: list[Decision], hosts: dict[str, list[int]], note: str,
                     mirrors: Sequence[tuple[str, str, int, int]] = ()) -> str:
    """A report page of stored pages and the decisions among them (a store's or an index's): totals, the pairs'
    resemblance against the S-curve ``p(r) = P[Binomial(k, r) >= t]``, the rate per host (``hosts``: host ->
    ``[pages, duplicates]``), the largest groups, the mirror hosts, and every decision with its evidence."""
    esc = html.escape
    pages = sum(n for n, _ in hosts.values())
    parts = [f"<h1>Near-duplicate report</h1><p class=sub>{esc(source)} &middot; t = {t} of k = {k}</p>",
             f"<p class=sub>{esc(note)}</p>",
             cards([(pages, "pages"), (pages - len(rows), "kept"), (len(rows), "duplicates"),
                    (f"{len(rows) / max(1, pages):.1%}", "duplicate rate")])]
    parts.append("<h2>Resemblance of the duplicate pairs</h2>" + plot(
        [d.resemblance for d in rows if d.resemblance is not None], k, t))
    ordered = sorted(hosts.items(), key=lambda item: (-item[1][1], item[0]))
    parts.append("<h2>Duplicate rate per host</h2>" + table(
        ["host", "pages", "duplicates", "rate"], [[esc(h), str(n), str(d), rate_bar(d, n)] for h, (n, d) in ordered],
        numeric=0))
    groups = Counter(d.of for d in rows)
    parts.append("<h2>Largest groups</h2>" + table(
        ["kept page", "pages"], [[esc(of), str(n + 1)] for of, n in largest(groups)], empty="no duplicates",
        numeric=1))
    parts.append("<h2>Mirror hosts</h2>" + table(
        ["mirror", "mirrors", "copies of checked pages", "evidence"],
        [[esc(m), esc(o), f"{c} of {n}", esc(describe_evidence(mirror_evidence(c, n)))] for m, o, c, n in mirrors],
        empty="none found"))
    cells = []
    for d in rows:
        ev = esc(describe_evidence(d.evidence)) if d.evidence else "(no evidence)"
        why = f"<br><code>{esc(d.explain)}</code>" if d.explain else ""
        cells.append([esc(d.page), esc(d.of), "" if d.resemblance is None else f"{d.resemblance:.3f}", ev + why])
    parts.append(f"<h2>Every duplicate ({len(rows)})</h2><p class=sub>The command under each shows the pair.</p>"
                 + table(["page", "duplicate of", "resemblance", "evidence"], cells, empty="no duplicates"))
    return page("Near-duplicate report", "".join(parts))


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
        for kept, n in largest(groups))
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


