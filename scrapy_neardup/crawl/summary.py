"""The pipeline's one-line summary of a crawl, logged at close: what was checked, kept, dropped, passed through."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..core.dedupe import SKIP_EMPTY, SKIP_MISSING, SKIP_NOT_TEXT
from .outage import describe_unchecked

if TYPE_CHECKING:
    from .outage import BackendOutage
    from .settings import NearDupSettings

#: Stat names by reason an item was not checked (see :func:`scrapy_neardup.core.dedupe.skip_reason`).
SKIP_STATS = {
    SKIP_MISSING: "skipped_no_text",
    SKIP_NOT_TEXT: "skipped_bad_text",
    SKIP_EMPTY: "skipped_empty",
}


def summarize(counts: Mapping[str, int], config: NearDupSettings, outage: BackendOutage,
              text_field_note: str | None = None) -> str:
    """One line with what the pipeline did: ``counts`` are its ``neardup/*`` counters (without the prefix);
    ``text_field_note``: said last when no item had the text field."""
    c = counts.get
    dropping = config.action != "mark"
    verb = "dropped" if dropping else "marked"
    skipped = sum(c(name, 0) for name in SKIP_STATS.values())
    verdict = f"dropped {c('dropped', 0)}" if dropping else f"marked {c('marked', 0)}"
    line = (
        f"Near-duplicates: checked {c('checked', 0)} items, kept {c('kept', 0)}, {verdict} "
        f"({c('exact_duplicates', 0)} exact), passed through {skipped} without usable text"
    )
    if c("revisited", 0) or c("changed", 0):
        line += f", revisited {c('revisited', 0)} unchanged and {c('changed', 0)} changed pages"
        if c("revisits_dropped", 0):
            line += f" ({c('revisits_dropped')} unchanged dropped)"
    if c("repeats", 0):
        line += f", {c('repeats')} repeats {verb} (pages met again in this crawl, unchanged)"
    if c("canonical", 0):
        line += f", {c('canonical')} pages {verb} for their canonical link to a page checked earlier"
    if c("canonical_representatives", 0):
        line += (f", {c('canonical_representatives')} canonical pages met after a copy of theirs was kept "
                 "(reported to the hook's observers)")
    if c("soft404", 0):
        line += f", {c('soft404')} soft 404s {verb}"
    if c("backend_errors", 0):
        line += f", the backend failed to check {c('backend_errors')} pages"
    if c("unchecked", 0):
        line += f"; {describe_unchecked(c('unchecked', 0), c('checked', 0))} passed through unchecked"
        if c("unchecked_indexed", 0) or c("unchecked_unindexed", 0):
            line += (f" ({c('unchecked_indexed', 0)} written to the index afterwards, "
                     f"{c('unchecked_unindexed', 0)} not)")
    if outage.pauses:
        line += (f"; the crawl paused {outage.pauses} time(s), {outage.paused_seconds:.1f} s in all, "
                 "while the backend was down")
    if c("missing_url", 0):
        line += f", {c('missing_url')} without {config.url_field!r}"
    if c("mark_field_missing", 0):
        line += (f", {c('mark_field_missing')} passed through unmarked and unchecked (their item class has "
                 f"no field {config.mark_field!r})")
    if text_field_note is not None:
        line += "; " + text_field_note
    return line


