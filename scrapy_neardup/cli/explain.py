"""``neardup explain A B``: why two pages are (or are not) near-duplicates, shown as the product sees them.

Each side is a file, an ``http(s)`` URL (fetched), or - ``neardup explain pages.jsonl ID1 ID2`` - a record of a
JSON-lines file (its host's template learned over the whole file, as ``neardup dedupe`` does). For each page: the
text that was sketched and how much of the page's whole text was left out (template blocks, link lists, what lies
outside the marked main content); then the word differences of the two sketched texts, the signature positions
shared of ``k``, the estimated resemblance with its 95% interval, the exact Jaccard of the two shingle sets and the
decision the settings take. ``--html FILE`` writes the same as one self-contained page.
"""

from __future__ import annotations

import argparse
import difflib
import html
import json
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.blocks import own_text, split_blocks
from ..core.evidence import evidence
from ..core.host_template import learn_hosts
from ..core.sketch import Sketch, Sketcher, auto_reading, jaccard
from ..core.text import clean_text
from ..errors import CommandError
from .jsonl import ID_FIELD_HELP, choose_id_field, open_input, read_records, record_host, record_pages
from .options import add_sketch_options, params_or_exit

#: Seconds to wait for a page given as a URL.
FETCH_TIMEOUT = 30.0
#: Words of a difference shown in the terminal before it is cut (the HTML page shows all).
_SHOWN_WORDS = 40


@dataclass
class Side:
    """One page as the product sees it: its name, the text sketched, and the page's whole body text."""

    name: str
    content: Any
    template: np.ndarray | None = None
    sketched: str = ""
    whole: str = ""
    marked: bool = False
    prose: bool = False

    @property
    def how(self) -> str:
        """What was sketched: the marked main content, the text left after template removal, or the whole body;
        of it, only the passages of prose where those were read (:func:`scrapy_neardup.core.blocks.passages`)."""
        if self.marked:
            how = "main content"
        else:
            how = "text left after template removal" if self.template is not None else "whole body (link lists out)"
        return f"{how}, its passages of prose" if self.prose else how

    @property
    def removed_share(self) -> float:
        """Share of the page's whole words that were not sketched."""
        whole = len(self.whole.split())
        return 0.0 if whole == 0 else max(0.0, 1.0 - len(self.sketched.split()) / whole)


def add_explain(sub: Any) -> None:
    """Register ``neardup explain`` on the ``neardup`` sub-parsers."""
    p = sub.add_parser(
        "explain", help="why two pages are (or are not) near-duplicates: texts, differences, evidence",
        description="Show two pages as they are sketched, side by side: the text sketched (and what was left out), "
        "their word differences, the shared positions of k, the estimated resemblance with its 95% interval, the "
        "exact Jaccard and the decision the settings take. A and B are files or http(s) URLs; or give a JSON-lines "
        "file and two record ids: neardup explain pages.jsonl ID1 ID2.",
    )
    p.add_argument("pages", nargs="+", metavar="PAGE", help="A B (files or URLs), or FILE.jsonl ID1 ID2")
    p.add_argument("--text-field", default="text", help="JSON lines: field holding the text or HTML (default: text)")
    p.add_argument("--id-field", default=None, help=ID_FIELD_HELP)
    p.add_argument("--url-field", default="url", help="JSON lines: field holding the page URL (default: url)")
    p.add_argument("--html", metavar="FILE", default=None, help="also write a self-contained HTML page to FILE")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--state", metavar="DIR", default=None,
                   help="A and B are keys (URLs) of pages kept in the embedded store of the state directory DIR "
                   "(its signatures are compared: the store keeps no text)")
    add_sketch_options(p)
    p.set_defaults(handler=run_explain)


def run_explain(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    params = params_or_exit(args, parser)
    if args.state is not None:
        if len(args.pages) != 2:
            parser.error("explain --state DIR takes two keys")
        result = _stored_pair(args.state, params, args.pages)
        print(json.dumps(result, ensure_ascii=False) if args.json else render_stored_text(result))
        return 0
    sketcher = Sketcher.from_params(params)
    if len(args.pages) == 2:
        sides = [Side(name, _load(name)) for name in args.pages]
    elif len(args.pages) == 3:
        sides = _records(sketcher, args)
    else:
        parser.error("explain takes two pages (A B) or a JSON-lines file and two ids (FILE ID1 ID2)")
    result = explain(sketcher, params.min_shared, sides)
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        print(render_text(result))
    if args.html:
        try:
            Path(args.html).write_text(render_html(result), encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot write {args.html}: {exc.strerror}") from None
    return 0


def explain(sketcher: Sketcher, min_shared: int, sides: list[Side]) -> dict[str, Any]:
    """The comparison of two pages (module doc) as one JSON-ready dict.

    ``shared`` of ``k`` signature positions agree; the resemblance ``r`` (Jaccard of the shingle sets) is
    estimated by ``shared / k`` with its 95% Wilson interval (:func:`scrapy_neardup.core.evidence.evidence`), and
    ``jaccard`` is ``r`` computed exactly from the two sketched texts. The decision: ``"exact"`` when the
    normalized texts are equal, ``"near_duplicate"`` at ``shared >= t``, ``"kept"`` (both pages kept) otherwise.
    """
    a, b = sides
    for side in sides:
        cleaned = clean_text(side.content, None, sketcher.max_chars, sketcher.content)
        side.marked = cleaned.marked
        side.sketched = sketcher.text(side.content, template=side.template).decode("utf-8")
        if sketcher.content == "auto":  # were passages of prose read? (the same text without them differs)
            template, _ = auto_reading(cleaned, side.template)
            side.prose = own_text(split_blocks(cleaned.utf8), template).decode("utf-8") != side.sketched
        side.whole = clean_text(side.content, None, sketcher.max_chars, "body").text
    sketches: list[Sketch] = sketcher.sketch_many([a.content, b.content], templates=[a.template, b.template])
    k = sketcher.num_perm
    shared = sketches[0].shared_positions(sketches[1])
    sets = [sketcher.signatures([s.sketched.encode("utf-8")])[1] for s in sides]  # shingle counts
    exact = sketches[0].fingerprint == sketches[1].fingerprint
    decision = "exact" if exact else ("near_duplicate" if shared >= min_shared else "kept")
    fields = evidence(shared, k, "exact" if exact else "near_duplicate")
    return {
        "pages": [{"name": s.name, "sketched": s.how, **_counts(s, sketch), "shingles": int(n[0]),
                   "text": s.sketched, "left_out": _left_out(s)}
                  for s, sketch, n in zip(sides, sketches, sets, strict=True)],
        "shared": shared, "k": k, "t": min_shared, "resemblance": shared / k, "interval": fields["interval"],
        **_overlap(sketcher, a.sketched, b.sketched), "decision": decision,
        "diff": _diff(a.sketched.split(), b.sketched.split()),
    }


def _counts(side: Side, sketch: Sketch) -> dict[str, Any]:
    """Words sketched, words of the whole page and the share removed: the sketch's own counts where it has them
    (so that they are the evidence's ``words`` and ``removed``), else counted on the texts shown."""
    if sketch.removed is not None:
        return {"words_sketched": sketch.words, "words_whole": sketch.page_words, "removed_share": sketch.removed}
    return {"words_sketched": len(side.sketched.split()), "words_whole": len(side.whole.split()),
            "removed_share": round(side.removed_share, 3)}


def compare_stored(names: list[str], values: np.ndarray, fingerprints: list[int] | np.ndarray, min_shared: int,
                   source: str) -> dict[str, Any]:
    """Two stored pages compared by their signatures alone (a store or an index keeps no text to show): the
    ``shared`` positions of ``k`` where the stored values agree (``values``: ``uint16[2, k]``), the resemblance
    ``shared / k`` with its 95% interval, and the decision (``"exact"``: equal fingerprints of the normalized
    texts; ``"near_duplicate"``: ``shared >= t = min_shared``; else ``"kept"``). ``source`` says where they were
    read."""
    k = int(values.shape[1])
    shared = int(np.count_nonzero(values[0] == values[1]))
    exact = int(fingerprints[0]) == int(fingerprints[1])
    decision = "exact" if exact else ("near_duplicate" if shared >= min_shared else "kept")
    fields = evidence(shared, k, "exact" if exact else "near_duplicate")
    return {"pages": [{"name": n} for n in names], "source": source, "shared": shared, "k": k, "t": min_shared,
            "resemblance": shared / k, "interval": fields["interval"], "decision": decision, "evidence": fields}


def render_stored_text(result: dict[str, Any]) -> str:
    """:func:`compare_stored`'s result for a terminal."""
    low, high = result["interval"]
    a, b = (page["name"] for page in result["pages"])
    return "\n".join([
        f"A: {a}", f"B: {b}", f"compared: the signatures stored in {result['source']} (no text is kept there)",
        f"shared positions:      {result['shared']} of {result['k']} (near-duplicate at >= {result['t']})",
        f"estimated resemblance: {result['resemblance']:.3f}, 95% interval [{low:.3f}, {high:.3f}]",
        "decision:              " + _DECISIONS[result["decision"]],
    ])


def _stored_pair(state: str, params: Any, keys: list[str]) -> dict[str, Any]:
    """Two keys of the embedded store of ``state`` compared (:func:`compare_stored`)."""
    from ..errors import StateError
    from ..store.embedded import EmbeddedBackend

    backend = EmbeddedBackend(params.num_perm, params.min_shared, params.tag, state_dir=state)
    try:
        index = backend.read()
    except StateError as exc:
        raise CommandError(str(exc)) from None
    docs = [index.find(key) for key in keys]
    missing = [key for key, doc in zip(keys, docs, strict=True) if doc is None]
    if missing:
        raise CommandError(f"the store in {state} keeps no page under {', '.join(missing)} ({len(index)} pages "
                           "kept; a dropped page is not stored)")
    values, fingerprints = index.stored(np.array(docs, dtype=np.int64))
    return compare_stored(keys, values, fingerprints, params.min_shared, f"the store in {state}")


def _overlap(sketcher: Sketcher, a: str, b: str) -> dict[str, float]:
    """The exact Jaccard ``|A & B| / |A | B|`` of the two sketched texts' shingle sets, and the containment of
    each in the other (``|A & B| / |A|``: how much of A's text B holds; a page with an earlier page's article
    plus comments contains that page while their resemblance falls)."""
    from ..core.shingles import shingle_hashes

    sets = [np.unique(shingle_hashes([t.encode("utf-8")], sketcher.shingle, sketcher.shingle_size)[0]) for t in (a, b)]
    common = int(np.intersect1d(sets[0], sets[1], assume_unique=True).size)
    return {"jaccard": jaccard(sets[0], sets[1]),
            "a_in_b": common / sets[0].size if sets[0].size else 0.0,
            "b_in_a": common / sets[1].size if sets[1].size else 0.0}


def _left_out(side: Side) -> list[str]:
    """The runs of the page's whole text that were not sketched (template blocks, link lists, outside main)."""
    matcher = difflib.SequenceMatcher(None, side.whole.split(), side.sketched.split(), autojunk=False)
    whole = side.whole.split()
    return [" ".join(whole[i1:i2]) for op, i1, i2, _, _ in matcher.get_opcodes() if op in ("delete", "replace")]


def _diff(a: list[str], b: list[str]) -> list[list[str]]:
    """``[[op, words of A, words of B], ...]`` over the sketched words, ``op`` one of equal/delete/insert/replace."""
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return [[op, " ".join(a[i1:i2]), " ".join(b[j1:j2])] for op, i1, i2, j1, j2 in matcher.get_opcodes()]


def _load(name: str) -> bytes:
    if name.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(name, timeout=FETCH_TIMEOUT) as response:  # noqa: S310 (http(s) only)
                data: bytes = response.read()
                return data
        except OSError as exc:
            raise CommandError(f"cannot fetch {name}: {exc}") from None
    try:
        return Path(name).read_bytes()
    except OSError as exc:
        raise CommandError(f"cannot read {name}: {exc.strerror}") from None


def _records(sketcher: Sketcher, args: argparse.Namespace) -> list[Side]:
    """The two records ``ID1 ID2`` of the JSON-lines file, with their hosts' templates learned over the file."""
    path, wanted = args.pages[0], args.pages[1:]
    found: dict[str, dict[str, Any]] = {}
    with open_input(path, rereadable=True) as (source, _):
        id_field = args.id_field
        for _, record in read_records(source):
            id_field = choose_id_field(id_field, record, args.url_field, "neardup explain")
            rid = record.get(id_field)
            if rid is not None and str(rid) in wanted and str(rid) not in found:
                found[str(rid)] = record
        missing = [w for w in wanted if w not in found]
        if missing:
            raise CommandError(f"{path} has no record with {id_field} = {', '.join(missing)}")
        templates: dict[str, np.ndarray] = {}
        if sketcher.content == "auto":
            source.seek(0)
            learner = learn_hosts(record_pages(source, args.text_field, args.url_field), sketcher.block_hashes)
            templates = {host: learner.learn(host).hashes for host in learner.hosts}
    sides = []
    for w in wanted:
        record = found[w]
        if not isinstance(record.get(args.text_field), str):
            raise CommandError(f"record {w} of {path} has no text in field {args.text_field!r}")
        host = record_host(record, args.url_field)
        sides.append(Side(w, record[args.text_field], templates.get(host) if host else None))
    return sides


def _cut(words: str) -> str:
    parts = words.split()
    if len(parts) <= _SHOWN_WORDS:
        return words
    return " ".join(parts[:_SHOWN_WORDS]) + f" ... (+{len(parts) - _SHOWN_WORDS} words)"


def render_text(result: dict[str, Any]) -> str:
    """The comparison for a terminal: each page's sketched part, the differences, the evidence, the decision."""
    lines = []
    for label, page in zip("AB", result["pages"], strict=True):
        lines.append(f"{label}: {page['name']}")
        lines.append(f"   sketched: {page['sketched']}, {page['words_sketched']} of {page['words_whole']} words "
                     f"({page['removed_share']:.0%} of the page left out), {page['shingles']} shingles")
        for run in page["left_out"][:5]:
            lines.append(f"   left out: {_cut(run)}")
    changes = [d for d in result["diff"] if d[0] != "equal"]
    lines.append(f"differences of the sketched texts: {len(changes)}")
    for op, wa, wb in changes[:10]:
        shown = {"delete": f"A only: {_cut(wa)}", "insert": f"B only: {_cut(wb)}"}
        lines.append("   " + shown.get(op, f"A: {_cut(wa)}  ->  B: {_cut(wb)}"))
    if len(changes) > 10:
        lines.append(f"   ... {len(changes) - 10} more")
    low, high = result["interval"]
    lines += [
        f"shared positions:      {result['shared']} of {result['k']} (near-duplicate at >= {result['t']})",
        f"estimated resemblance: {result['resemblance']:.3f}, 95% interval [{low:.3f}, {high:.3f}]",
        f"exact Jaccard:         {result['jaccard']:.3f}",
        f"containment:           {result['a_in_b']:.3f} of A's shingles are in B, {result['b_in_a']:.3f} of B's in A",
        "decision:              " + _DECISIONS[result["decision"]],
    ]
    return "\n".join(lines)


_DECISIONS = {"exact": "exact copy: B is dropped as a duplicate of A",
              "near_duplicate": "near-duplicate: B is dropped as a duplicate of A",
              "kept": "not near-duplicates: both are kept"}


_CSS = """body{font:15px/1.5 system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222;padding:0 1em}
h1{font-size:1.4em}table.ev td{padding:2px 12px 2px 0}.cols{display:grid;grid-template-columns:1fr 1fr;gap:1.5em}
.text{background:#fafafa;border:1px solid #ddd;padding:.8em;white-space:pre-wrap;word-wrap:break-word}
del{background:#fdd;text-decoration:none}ins{background:#dfd;text-decoration:none}
.out{color:#777;font-size:.9em;border-left:3px solid #ccc;padding-left:.6em;margin:.3em 0}
.verdict{font-size:1.1em;font-weight:600;padding:.5em .8em;border-radius:4px;display:inline-block}
.near_duplicate,.exact{background:#fde8d8}.kept{background:#e3f4e3}"""


def _runs(n: int) -> str:
    return "nothing" if n == 0 else f"{n} run" if n == 1 else f"{n} runs"


def render_html(result: dict[str, Any]) -> str:
    """The comparison as one self-contained HTML page (inline CSS, no external assets)."""
    esc = html.escape
    sides: list[list[str]] = [[], []]
    for op, wa, wb in result["diff"]:
        if op == "equal":
            sides[0].append(esc(wa))
            sides[1].append(esc(wb))
        else:
            if wa:
                sides[0].append(f"<del>{esc(wa)}</del>")
            if wb:
                sides[1].append(f"<ins>{esc(wb)}</ins>")
    low, high = result["interval"]
    cols = []
    for label, page, body in zip("AB", result["pages"], sides, strict=True):
        out = "".join(f'<div class="out">{esc(run)}</div>' for run in page["left_out"])
        cols.append(
            f"<div><h2>{label}: {esc(str(page['name']))}</h2><p>Sketched: {esc(page['sketched'])}, "
            f"{page['words_sketched']} of {page['words_whole']} words ({page['removed_share']:.0%} left out)</p>"
            f'<div class="text">{" ".join(body)}</div>'
            f"<details><summary>Left out: {_runs(len(page['left_out']))}</summary>{out}</details></div>")
    decision = {"exact": "Exact copy", "near_duplicate": "Near-duplicates",
                "kept": "Not near-duplicates: both kept"}[result["decision"]]
    return (
        f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>neardup explain</title>"
        f"<style>{_CSS}</style></head><body><h1>Why these pages match (or not)</h1>"
        f'<p class="verdict {result["decision"]}">{decision}</p><table class=ev>'
        f"<tr><td>Shared positions</td><td>{result['shared']} of {result['k']} (near-duplicate at &ge; "
        f"{result['t']})</td></tr><tr><td>Estimated resemblance</td><td>{result['resemblance']:.3f} "
        f"(95% interval {low:.3f} &ndash; {high:.3f})</td></tr>"
        f"<tr><td>Exact Jaccard</td><td>{result['jaccard']:.3f}</td></tr>"
        f"<tr><td>Containment</td><td>{result['a_in_b']:.3f} of A's shingles in B, {result['b_in_a']:.3f} of B's "
        f"in A</td></tr></table>"
        f'<div class="cols">{"".join(cols)}</div></body></html>\n'
    )


