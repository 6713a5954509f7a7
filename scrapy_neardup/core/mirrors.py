"""Mirror hosts: which host's pages are (almost) all near-duplicates of another host's, so that a crawler can stop
downloading it. No Scrapy, Twisted or Elasticsearch here; the Scrapy layer feeds the table
(:mod:`scrapy_neardup.crawl.mirrors`).

A host is ``scheme://hostname:port`` (:func:`host_of`). For a pair of hosts (B, A), ``twins(B, A)`` is the set of
*checked* pages of B that have a near-duplicate on A, learnt in either direction: B's page dropped naming A's
page, or A's page dropped naming B's page (per-host download slots fetch two hosts side by side, so either may
hold the first copy). With ``n_B`` the checked pages of B, B is a *mirror* of A when

    n_B >= min_pages   and   |twins(B, A)| / n_B >= share,

and A was first seen before B (the host first seen of the two is the one kept). A host that is a mirror of
nothing is never skipped, whatever share of its pages the other hosts copy; a host that copies only part of
another (below ``share``) is never skipped either. The price of a skip: pages of B not fetched yet that exist
nowhere else are not crawled; at most ``1 - share`` of B's checked pages had no twin, and the same share is
expected among the unfetched ones. ``share = 1.0`` skips only perfect mirrors.

State (:meth:`MirrorTable.save`, :meth:`MirrorTable.load`): a small JSON file written atomically; decisions are
not stored but recomputed from the counts with the current ``min_pages`` and ``share``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .index import StateError
from .storage import write_atomically

#: File of the mirror table in the state directory, next to the index.
MIRRORS_FILE = "neardup-hosts.json"
MIRRORS_FORMAT = 1
DEFAULT_MIN_PAGES = 20
DEFAULT_SHARE = 0.9
_DEFAULT_PORTS = {"http": 80, "https": 443}


def host_of(url: str) -> str | None:
    """``scheme://hostname:port`` of ``url`` (lower case, the default port made explicit); ``None`` when the URL
    has no host (e.g. the ``no-url:`` keys the pipeline gives items without a URL)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    scheme = parts.scheme.lower()
    port = port if port is not None else _DEFAULT_PORTS.get(scheme, 0)
    return f"{scheme}://{parts.hostname.lower()}:{port}"


@dataclass(frozen=True, slots=True)
class MirrorDecision:
    """Host ``mirror`` is a mirror of ``original``: ``copies`` of its ``checked`` pages have a twin there."""

    mirror: str
    original: str
    copies: int
    checked: int

    def describe(self) -> str:
        return (f"host {self.mirror} mirrors host {self.original}: {self.copies} of {self.checked} pages are "
                "copies; skipping its requests")


class MirrorTable:
    """Counts, per pair of hosts, the checked pages of one that have a near-duplicate on the other.

    Args:
        min_pages: ``N``, checked pages a host needs before it can be called a mirror.
        share: the share of its checked pages that must have a twin on the other host, in (0, 1].
    """

    def __init__(self, min_pages: int = DEFAULT_MIN_PAGES, share: float = DEFAULT_SHARE) -> None:
        if min_pages < 1 or not 0 < share <= 1:
            raise ValueError(f"min_pages must be >= 1 and share in (0, 1], got {min_pages}, {share}")
        self.min_pages = min_pages
        self.share = share
        self._order: dict[str, int] = {}  # host -> rank in first-seen order
        self._checked: dict[str, int] = {}
        self._twins: dict[str, dict[str, set[str]]] = {}  # B -> A -> B's pages with a twin on A
        self._mirror_of: dict[str, MirrorDecision] = {}

    # -- feeding ---------------------------------------------------------------------------------------------

    def see(self, host: str) -> None:
        """Record that ``host`` was met (its first request); the first seen of two mirrors is kept."""
        self._order.setdefault(host, len(self._order))

    def record(self, key: str, duplicate_of: str | None) -> list[MirrorDecision]:
        """Record one checked page: kept (``duplicate_of=None``) or found a near-duplicate of ``duplicate_of``.

        Returns the hosts this page made mirrors (usually none).
        """
        host = host_of(key)
        if host is None:
            return []
        self.see(host)
        self._checked[host] = self._checked.get(host, 0) + 1
        other = host_of(duplicate_of) if duplicate_of is not None else None
        if other is None or other == host:
            return self._decide(host)
        self.see(other)
        self._twins.setdefault(host, {}).setdefault(other, set()).add(key)
        assert duplicate_of is not None
        self._twins.setdefault(other, {}).setdefault(host, set()).add(duplicate_of)
        return self._decide(host) + self._decide(other)

    # -- reading ---------------------------------------------------------------------------------------------

    def mirror_of(self, host: str) -> MirrorDecision | None:
        """The decision that made ``host`` a mirror, or ``None`` when its requests must be fetched."""
        return self._mirror_of.get(host)

    def checked(self, host: str) -> int:
        return self._checked.get(host, 0)

    def copies(self, host: str, on: str) -> int:
        """Checked pages of ``host`` with a near-duplicate on ``on``."""
        return len(self._twins.get(host, {}).get(on, ()))

    @property
    def decisions(self) -> list[MirrorDecision]:
        return list(self._mirror_of.values())

    def _decide(self, host: str) -> list[MirrorDecision]:
        if host in self._mirror_of:
            return []
        checked = self._checked.get(host, 0)
        if checked < self.min_pages:
            return []
        rank = self._order[host]
        best: MirrorDecision | None = None
        for other, pages in self._twins.get(host, {}).items():
            # Only a host seen earlier is kept at this one's expense (the tolerance absorbs 0.9 * 10 != 9.0).
            qualifies = self._order[other] < rank and len(pages) >= self.share * checked - 1e-9
            if qualifies and (best is None or len(pages) > best.copies):
                best = MirrorDecision(host, other, len(pages), checked)
        if best is None:
            return []
        self._mirror_of[host] = best
        return [best]

    # -- state -----------------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "format": MIRRORS_FORMAT,
            "hosts": sorted(self._order, key=self._order.__getitem__),
            "checked": self._checked,
            "twins": [[b, a, sorted(pages)] for b, row in self._twins.items() for a, pages in row.items()],
        }

    def merge_json(self, data: dict[str, Any]) -> list[MirrorDecision]:
        """Add saved counts to this table; returns the decisions they imply with this table's settings."""
        if not isinstance(data, dict) or data.get("format") != MIRRORS_FORMAT:
            raise ValueError("not a mirror table of format 1")
        for host in data["hosts"]:
            self.see(str(host))
        for host, count in data["checked"].items():
            self._checked[host] = self._checked.get(host, 0) + int(count)
        for b, a, pages in data["twins"]:
            self.see(b)
            self.see(a)
            self._twins.setdefault(b, {}).setdefault(a, set()).update(map(str, pages))
        decisions: list[MirrorDecision] = []
        for host in list(self._order):
            decisions += self._decide(host)
        return decisions

    def save(self, state_dir: str | os.PathLike[str]) -> Path:
        """Write the table to ``state_dir/neardup-hosts.json`` atomically (temporary file, fsync, rename)."""
        directory = Path(state_dir)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / MIRRORS_FILE
        write_atomically(path, json.dumps(self.to_json()).encode("utf-8"))
        return path

    def load(self, state_dir: str | os.PathLike[str]) -> list[MirrorDecision]:
        """Merge ``state_dir/neardup-hosts.json`` when it exists; returns the decisions it implies.

        Raises:
            StateError: the file is damaged (it is left untouched).
        """
        directory = Path(state_dir)
        for tmp in directory.glob(f"{MIRRORS_FILE}.*.tmp"):  # an interrupted save, never renamed into place
            tmp.unlink(missing_ok=True)
        path = directory / MIRRORS_FILE
        if not path.exists():
            return []
        try:
            return self.merge_json(json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, KeyError, TypeError) as exc:
            raise StateError(f"{path} is damaged ({exc}); move it away or set NEARDUP_RESET") from None


def discard(state_dir: str | os.PathLike[str]) -> None:
    """Remove the saved mirror table (``NEARDUP_RESET``)."""
    (Path(state_dir) / MIRRORS_FILE).unlink(missing_ok=True)


__all__ = ["MIRRORS_FILE", "MirrorDecision", "MirrorTable", "discard", "host_of"]
