"""The HTML pieces of the reports (``neardup report`` and the crawl's ``NEARDUP_REPORT``): one self-contained page,
inline CSS and SVG, nothing loaded from elsewhere."""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Iterable, Sequence

from .theory import curve


def page(title: str, body: str) -> str:
    """A whole HTML document holding ``body`` (already HTML), with the reports' style inline."""
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body>{body}</body></html>\n")


def cards(values: Iterable[tuple[object, str]]) -> str:
    """The row of headline figures: ``(value, label)`` each."""
    return '<div class="cards">' + "".join(
        f'<div class="card"><b>{html.escape(str(value))}</b>{html.escape(label)}</div>' for value, label in values
    ) + "</div>"


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], empty: str = "none", numeric: int = 0) -> str:
    """A table of already escaped cells; the last ``numeric`` columns are right-aligned."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = [f"<td class=n>{c}</td>" if i >= len(row) - numeric else f"<td>{c}</td>" for i, c in enumerate(row)]
        body.append(f"<tr>{''.join(cells)}</tr>")
    if not body:
        body.append(f'<tr><td colspan="{len(headers)}">{html.escape(empty)}</td></tr>')
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def largest(counts: Counter[str], n: int = 10) -> list[tuple[str, int]]:
    """The ``n`` largest counts, ties by key: a report of the same data reads the same whatever order it came in."""
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]


def rate_bar(part: int, whole: int) -> str:
    """A small bar and the percentage ``part / whole``."""
    share = part / whole if whole else 0.0
    return f'<span class=bar style="width:{100 * share:.0f}px"></span> {share:.0%}'


def plot(resemblances: list[float], k: int, t: int) -> str:
    """Inline SVG: the S-curve ``p(r) = P[Binomial(k, r) >= t]`` of ``t`` of ``k``, and the pairs' estimated
    resemblances as a histogram (their count per 0.01 of ``r``, scaled to the largest bar)."""
    width, height, left, top, plot_w, plot_h = 640, 300, 50, 15, 560, 220

    def x(r: float) -> float:
        return left + r * plot_w

    def y(p: float) -> float:
        return top + (1 - p) * plot_h

    points = " ".join(f"{x(r):.1f},{y(p):.1f}" for r, p in curve(k, t))
    counts = Counter(min(99, int(r * 100)) for r in resemblances)
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



CSS = """body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1100px;
padding:1.5em 2em;color:#1f2933;background:#fff}h1{font-size:1.6em;margin:.2em 0}h2{font-size:1.2em;
margin-top:2em;border-bottom:1px solid #e4e7eb;padding-bottom:.3em}h3{font-size:1em;margin:.3em 0}
.sub{color:#616e7c;margin:.2em 0}.cards{display:flex;gap:1em;flex-wrap:wrap;margin:1em 0}
.card{background:#f5f7fa;border-radius:8px;padding:.7em 1.2em;min-width:7em;color:#52606d}
.card b{display:block;font-size:1.6em;color:#1f2933}table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.35em .6em;border-bottom:1px solid #eef0f3;vertical-align:top;word-break:break-all}
th{color:#52606d;font-weight:600;word-break:normal}td.n{text-align:right;white-space:nowrap}
.bar{display:inline-block;height:.7em;background:#e0796b;border-radius:2px;vertical-align:middle}
svg .frame{fill:#fafbfc;stroke:#d9dde2}svg .curve{fill:none;stroke:#2f6fbf;stroke-width:2}
svg .hist{fill:#e0796b;opacity:.75}svg .ax{stroke:#9aa5b1}svg .lab{font-size:11px;fill:#52606d;text-anchor:middle}
svg .end{text-anchor:end}.cols{display:grid;grid-template-columns:1fr 1fr;gap:1.2em}
.text{background:#fafbfc;border:1px solid #e4e7eb;border-radius:6px;padding:.7em;max-height:18em;overflow:auto;
font-size:.92em}del{background:#fbd5d0;text-decoration:none}ins{background:#cdeccd;text-decoration:none}
.same{color:#7b8794;font-style:italic;white-space:nowrap}
.view{border-top:1px dashed #d9dde2;padding-top:.6em;margin-top:1em}a{color:#2f6fbf}"""


