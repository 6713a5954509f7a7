"""The crawl report: ``NEARDUP_REPORT = "report.html"`` writes one self-contained HTML page at the end of the crawl
(totals, duplicate rate per host, the largest groups, every drop or mark with its evidence and the command that
shows the pair side by side, the soft-404 and mirror-host decisions, and the pairs' estimated resemblance against
the S-curve of the settings).

A Scrapy extension (the add-on enables it when the setting is given): it listens to the items scraped and dropped,
so it costs the crawl one small record per duplicate and two counters per host; nothing on the sketching path.
"""

from __future__ import annotations

import html
import logging
import shlex
from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter
from scrapy import signals
from scrapy.exceptions import NotConfigured

from ..core.evidence import describe_evidence, evidence
from ..core.mirror_table import host_of
from ..core.report_html import cards, largest, page, plot, rate_bar, table
from .context import CrawlContext

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class CrawlReport:
    """Collects the crawl's decisions and writes ``NEARDUP_REPORT`` when the spider closes (module doc)."""

    def __init__(self, crawler: Crawler, path: str) -> None:
        self.crawler = crawler
        self.path = path
        context = CrawlContext.of(crawler)
        self.config = context.config
        self.hooks = context.hooks
        self.hosts: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # host -> [pages, duplicates]
        #: one row per duplicate: (url, rule, kept page or probe, resemblance or None, evidence dict or None)
        self.duplicates: list[tuple[str, str, str, float | None, dict[str, Any] | None]] = []

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> CrawlReport:
        path = crawler.settings.get("NEARDUP_REPORT")
        if not path:
            raise NotConfigured("NEARDUP_REPORT is not set")
        report = cls(crawler, str(path))
        crawler.signals.connect(report.item_scraped, signal=signals.item_scraped)
        crawler.signals.connect(report.item_dropped, signal=signals.item_dropped)
        crawler.signals.connect(report.spider_closed, signal=signals.spider_closed)
        return report

    def item_scraped(self, item: Any, **kwargs: Any) -> None:
        adapter = ItemAdapter(item)
        url = str(adapter.get(self.config.url_field))
        mark = adapter.get(self.config.mark_field) if self.config.action == "mark" else None
        if not isinstance(mark, dict) or mark.get("revisit"):
            self._count(url, False)
        elif mark.get("soft404"):
            self._add(url, "soft404", str(mark["soft404"]), mark.get("resemblance"), mark)
        elif mark.get("repeat"):
            self._add(url, "repeat", url, None, None)
        elif mark.get("duplicate_of") is not None:
            rule = str(mark.get("rule") or "near_duplicate")
            self._add(url, rule, str(mark["duplicate_of"]), mark.get("resemblance"), mark if "k" in mark else None)
        else:
            self._count(url, False)

    def item_dropped(self, item: Any, exception: BaseException, **kwargs: Any) -> None:
        url = str(getattr(exception, "url", None) or ItemAdapter(item).get(self.config.url_field))
        name = type(exception).__name__
        match = getattr(exception, "match", None)
        if name == "NearDuplicateDropped" and match is not None:
            fields = getattr(exception, "evidence", None)
            rule = fields["rule"] if fields else ("exact" if match.exact else "near_duplicate")
            self._add(url, rule, match.key, match.resemblance, fields)
        elif name == "Soft404Dropped":
            soft = exception.soft404  # type: ignore[attr-defined]
            fields = getattr(exception, "evidence", None) or evidence(soft.shared, soft.num_perm, "soft404")
            self._add(url, "soft404", soft.probe_url, soft.resemblance, fields)
        elif name == "CanonicalDropped":
            self._add(url, "canonical", str(exception.duplicate_of), None, None)  # type: ignore[attr-defined]
        elif name in ("RepeatDropped", "RevisitDropped"):
            self._add(url, "repeat" if name == "RepeatDropped" else "revisit", url, None, None)

    def _count(self, url: str, duplicate: bool) -> None:
        counts = self.hosts[host_of(url) or "(no URL)"]
        counts[0] += 1
        counts[1] += duplicate

    def _add(self, url: str, rule: str, of: str, resemblance: Any, fields: dict[str, Any] | None) -> None:
        self._count(url, True)
        r = float(resemblance) if isinstance(resemblance, (int, float)) else None
        self.duplicates.append((url, rule, of, r, fields))

    def spider_closed(self, spider: Any = None, reason: str = "") -> None:
        try:
            Path(self.path).write_text(self.render(reason), encoding="utf-8")
        except OSError as exc:
            logger.error("NEARDUP_REPORT: cannot write %s: %s", self.path, exc.strerror)
            return
        logger.info("Near-duplicate report written to %s", self.path)

    def render(self, reason: str = "") -> str:
        """The report page (module doc)."""
        esc = html.escape
        k, t = self.config.num_perm, self.config.min_shared
        pages = sum(n for n, _ in self.hosts.values())
        dups = self.duplicates
        rules = Counter(rule for _, rule, _, _, _ in dups)
        spider = getattr(self.crawler.spider, "name", "") if self.crawler.spider is not None else ""
        parts = [f"<h1>Near-duplicate report</h1><p class=sub>crawl of {esc(str(spider))}"
                 f"{' &middot; finished: ' + esc(reason) if reason else ''} &middot; t = {t} of k = {k}</p>"]
        parts.append(cards([(pages, "pages"), (pages - len(dups), "kept"), (len(dups), "dropped or marked"),
                            (rules["near_duplicate"], "near-duplicates"), (rules["exact"], "exact copies"),
                            (rules["soft404"], "soft 404s"), (f"{len(dups) / max(1, pages):.1%}", "duplicate rate")]))
        pairs = [r for _, rule, _, r, _ in dups if r is not None and rule in ("near_duplicate", "exact")]
        parts.append("<h2>Resemblance of the duplicate pairs</h2>" + plot(pairs, k, t))
        hosts = sorted(self.hosts.items(), key=lambda item: (-item[1][1], item[0]))
        parts.append("<h2>Duplicate rate per host</h2>" + table(
            ["host", "pages", "duplicates", "rate"],
            [[esc(h), str(n), str(d), rate_bar(d, n)] for h, (n, d) in hosts], numeric=0))
        groups = Counter(of for _, rule, of, _, _ in dups if rule in ("near_duplicate", "exact", "canonical"))
        parts.append("<h2>Largest groups</h2>" + table(
            ["kept page", "pages"], [[esc(of), str(n + 1)] for of, n in largest(groups)],
            empty="no duplicates", numeric=1))
        mirrors = getattr(self.hooks, "mirror_decisions", [])
        parts.append("<h2>Mirror hosts</h2><p class=sub>Requests to a mirror are skipped once most of its checked "
                     "pages are copies of pages of the host it mirrors; the interval is that of the share of copies."
                     "</p>" + table(
            ["mirror", "mirrors", "copies of checked pages", "evidence"],
            [[esc(m.mirror), esc(m.original), f"{m.copies} of {m.checked}", esc(describe_evidence(m.evidence))]
             for m in mirrors], empty="none found"))
        rows = []
        for url, rule, of, r, fields in dups:
            if fields:
                low, high = fields["interval"]
                ev = f"{esc(rule)}: {fields['shared']} of {fields['k']}, r in [{low:.3f}, {high:.3f}]"
            else:
                ev = esc(rule)
            why = ""
            if rule in ("near_duplicate", "exact", "soft404"):
                why = f"<br><code>neardup explain {esc(shlex.quote(of))} {esc(shlex.quote(url))}</code>"
            rows.append([esc(url), esc(of), "" if r is None else f"{r:.3f}", ev + why])
        parts.append(f"<h2>Every drop or mark ({len(dups)})</h2><p class=sub>The command under each shows the pair "
                     "side by side.</p>" + table(["page", "duplicate of", "resemblance", "evidence"], rows))
        return page("Near-duplicate report", "".join(parts))


