"""Mirror hosts: which host's pages are (almost) all near-duplicates of another host's, so that a crawler can stop
downloading it. No Scrapy, Twisted or Elasticsearch here; the Scrapy layer feeds the table
(:mod:`scrapy_neardup.crawl.mirrors`).

Design notes: docs/architecture.md#scrapy_neardupcoremirror_table
"""

from __future__ import annotations

import functools
import json
import os
import re
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..errors import StateError
from .atomic_files import write_atomically
from .evidence import describe_evidence, mirror_evidence

#: File of the mirror table in the state directory, next to the index.
MIRRORS_FILE = "neardup-hosts.json"
MIRRORS_FORMAT = 1
DEFAULT_MIN_PAGES = 20
DEFAULT_SHARE = 0.9
#: Seconds between two exchanges with a fleet's :class:`HostStore`.
DEFAULT_SYNC_INTERVAL = 5.0
_DEFAULT_PORTS = {"http": 80, "https": 443}


def host_of(url: str) -> str | None:
    """``scheme://hostname:port`` of ``url`` (lower case, the default port made explicit); ``None`` when the URL
    has no host (e.g. the ``no-url:`` keys the pipeline gives items without a URL).

    A crawl asks it of every link a spider yields (98,000 on 527 pages of documentation), three or four times
    over: only the URL's scheme and authority are read and cached, so that a site of any size hits the cache."""
    authority = _AUTHORITY.match(url)
    return _host_of(authority.group() if authority is not None else url)


#: A URL's scheme and authority, up to the first ``/``, ``?`` or ``#`` after ``//`` (RFC 3986, section 3.2).
_AUTHORITY = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*")


@functools.lru_cache(maxsize=4096)
def _host_of(url: str) -> str | None:
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

    @property
    def evidence(self) -> dict[str, Any]:
        """``{"rule": "mirror", "shared": copies, "k": checked, "interval"}`` (:func:`~.evidence.mirror_evidence`)."""
        return mirror_evidence(self.copies, self.checked)

    def describe(self) -> str:
        return (f"host {self.mirror} mirrors host {self.original}: {self.copies} of {self.checked} pages are "
                f"copies; skipping its requests ({describe_evidence(self.evidence)})")


@dataclass(frozen=True, slots=True)
class HostCounts:
    """The counts a process shares with its fleet (or, pulled, the sum over the other processes).

    Attributes:
        checked: host -> checked pages ``n_H``.
        first_seen: host -> when it was first met (``time.time()`` seconds; pulled: the fleet's minimum).
        twins: ``(B, A)`` -> ``|twins(B, A)|``, checked pages of B with a near-duplicate on A.
        holds: ``(A, B)`` -> contents with pages on both A and B whose kept copy is on A (a store may leave it
            empty: each process then goes by its own).
    """

    checked: dict[str, int] = field(default_factory=dict)
    first_seen: dict[str, float] = field(default_factory=dict)
    twins: dict[tuple[str, str], int] = field(default_factory=dict)
    holds: dict[tuple[str, str], int] = field(default_factory=dict)


@dataclass(slots=True)
class _Content:
    """One content: the hosts its checked pages are on (host -> their keys) and the host holding its kept copy."""

    pages: dict[str, set[str]]
    holder: str


class HostStore(ABC):
    """Where the processes of a fleet share their mirror counts (see the module doc); a backend that has one
    returns it from :meth:`scrapy_neardup.store.backend.Backend.host_store`.

    Every method may raise any exception: the caller (the crawl's mirror middleware) logs, counts and goes on
    with its local counts, so a failing store never fails the crawl.
    """

    @abstractmethod
    async def open(self) -> None:
        """Connect and create the store when missing."""

    @abstractmethod
    async def push(self, counts: HostCounts) -> None:
        """Replace this process's counts in the store by ``counts`` (cumulative since the process started)."""

    @abstractmethod
    async def pull(self) -> HostCounts:
        """The sums over every *other* process (checked and twins summed, first-seen the minimum)."""

    @abstractmethod
    async def close(self) -> None:
        """Release connections."""


class MirrorTable:
    """Counts, per pair of hosts, the checked pages of one whose content has a page on the other, and which of
    the two holds the kept copies (see the module doc).

    Args:
        min_pages: ``N``, checked pages a host needs before it can be called a mirror.
        share: the share of its checked pages that must have a twin on the other host, in (0, 1].
    """

    def __init__(self, min_pages: int = DEFAULT_MIN_PAGES, share: float = DEFAULT_SHARE) -> None:
        if min_pages < 1 or not 0 < share <= 1:
            raise ValueError(f"min_pages must be >= 1 and share in (0, 1], got {min_pages}, {share}")
        self.min_pages = min_pages
        self.share = share
        self._seen: dict[str, float] = {}  # host -> first met (time.time(), strictly increasing here)
        self._last_seen = 0.0
        self._checked: dict[str, int] = {}
        self._twins: dict[str, dict[str, set[str]]] = {}  # B -> A -> B's pages with a twin on A
        # Contents with pages on two hosts or more, by the key of their kept page (a kept page alone is no pair).
        self._contents: dict[str, _Content] = {}
        self._holds: dict[str, dict[str, int]] = {}  # A -> B -> contents of A and B held by A
        self._mirror_of: dict[str, MirrorDecision] = {}
        self._fleet = HostCounts()  # the other processes' sums (set_fleet)
        self._fleet_twins: dict[str, dict[str, int]] = {}  # B -> A -> others' |twins(B, A)|
        self._fleet_holds: dict[str, dict[str, int]] = {}  # A -> B -> others' holds(A, B)

    # -- feeding ---------------------------------------------------------------------------------------------

    def see(self, host: str) -> None:
        """Record that ``host`` was met; of two hosts holding as many contents of each other, the one met first
        is the original."""
        if host not in self._seen:
            # Strictly increasing, so that two hosts met within one clock tick keep their order.
            self._last_seen = self._seen[host] = max(time.time(), self._last_seen + 1e-6)

    def record(self, key: str, duplicate_of: str | None, representative_of: str | None = None) -> list[MirrorDecision]:
        """Record one checked page: kept (``duplicate_of=None``) or found a near-duplicate of the kept page
        ``duplicate_of``.

        Args:
            representative_of: the kept page whose content this page is the canonical copy of (the earlier page
                named this one its canonical URL): the content is then held by this page's host, whether this
                page was dropped (naming ``duplicate_of``) or kept.

        Returns the hosts this page made mirrors (usually none).
        """
        host = host_of(key)
        if host is None:
            return []
        self.see(host)
        self._checked[host] = self._checked.get(host, 0) + 1
        kept = duplicate_of if duplicate_of is not None else representative_of
        kept_host = host_of(kept) if kept is not None else None
        if kept is None or kept_host is None:
            return self._decide(host)
        self.see(kept_host)
        content = self._contents.get(kept)
        if content is None:
            content = self._contents[kept] = _Content({kept_host: {kept}}, kept_host)
        self._count_holds(content, -1)
        for other, pages in content.pages.items():
            if other != host:
                self._twins.setdefault(host, {}).setdefault(other, set()).add(key)
                self._twins.setdefault(other, {}).setdefault(host, set()).update(pages)
        content.pages.setdefault(host, set()).add(key)
        if representative_of is not None:
            content.holder = host
        self._count_holds(content, +1)
        decisions: list[MirrorDecision] = []
        for member in content.pages:
            decisions += self._decide(member)
        return decisions

    def _count_holds(self, content: _Content, sign: int) -> None:
        row = self._holds.setdefault(content.holder, {})
        for other in content.pages:
            if other != content.holder:
                row[other] = row.get(other, 0) + sign

    # -- reading ---------------------------------------------------------------------------------------------

    def mirror_of(self, host: str) -> MirrorDecision | None:
        """The decision that made ``host`` a mirror, or ``None`` when its requests must be fetched."""
        return self._mirror_of.get(host)

    def checked(self, host: str) -> int:
        """Checked pages of ``host``, the fleet's included."""
        return self._checked.get(host, 0) + self._fleet.checked.get(host, 0)

    def copies(self, host: str, on: str) -> int:
        """Checked pages of ``host`` with a near-duplicate on ``on``, the fleet's included."""
        return len(self._twins.get(host, {}).get(on, ())) + self._fleet_twins.get(host, {}).get(on, 0)

    def holds(self, host: str, of: str) -> int:
        """Contents with pages on both ``host`` and ``of`` whose kept copy is on ``host``, the fleet's included."""
        return self._holds.get(host, {}).get(of, 0) + self._fleet_holds.get(host, {}).get(of, 0)

    def first_seen(self, host: str) -> float:
        """When ``host`` was first met by this process or the fleet (``inf``: never)."""
        return min(self._seen.get(host, float("inf")), self._fleet.first_seen.get(host, float("inf")))

    def original_of_pair(self, one: str, other: str) -> str:
        """Which of two hosts is the original: the one holding more of their common contents, else the one met
        first."""
        mine, theirs = self.holds(one, other), self.holds(other, one)
        if mine != theirs:
            return one if mine > theirs else other
        return one if self.first_seen(one) <= self.first_seen(other) else other

    def copy_share(self, host: str) -> float:
        """The largest share of ``host``'s checked pages with a twin on one host it is a copy of (whose pages
        hold their contents); 0.0 when none."""
        checked = self.checked(host)
        if checked == 0:
            return 0.0
        shares = [self.copies(host, other) / checked for other in self.twin_hosts(host)
                  if self.original_of_pair(host, other) == other]
        return max(shares, default=0.0)

    @property
    def decisions(self) -> list[MirrorDecision]:
        return list(self._mirror_of.values())

    def twin_hosts(self, host: str) -> set[str]:
        """The hosts with a page whose content ``host`` has a page of too."""
        return self._twins.get(host, {}).keys() | self._fleet_twins.get(host, {}).keys()

    def _decide(self, host: str) -> list[MirrorDecision]:
        if host in self._mirror_of:
            return []
        checked = self.checked(host)
        if checked < self.min_pages:
            return []
        best: MirrorDecision | None = None
        best_rank: tuple[int, int, float] | None = None
        for other in self.twin_hosts(host):
            copies = self.copies(host, other)
            # Only the host holding the kept copies is kept at this one's expense (the tolerance absorbs
            # 0.9 * 10 != 9.0).
            if copies < self.share * checked - 1e-9 or self.original_of_pair(host, other) != other:
                continue
            # The host named is the one holding the kept copies of this host's pages: of a site A, its mirror B
            # and a copy C, C's pages are twins of B's as much as of A's, but A holds them. Then the most
            # copies, then the host met first: never the order in which a set lists hosts.
            rank = (self.holds(other, host), copies, -self.first_seen(other))
            if best_rank is None or rank > best_rank:
                best, best_rank = MirrorDecision(host, other, copies, checked), rank
        if best is None:
            return []
        self._mirror_of[host] = best
        return [best]

    # -- the fleet -------------------------------------------------------------------------------------------

    def local_counts(self) -> HostCounts:
        """This process's own counts, to push to the fleet's :class:`HostStore`."""
        return HostCounts(
            checked=dict(self._checked),
            first_seen=dict(self._seen),
            twins={(b, a): len(pages) for b, row in self._twins.items() for a, pages in row.items()},
            holds={(a, b): n for a, row in self._holds.items() for b, n in row.items() if n},
        )

    def set_fleet(self, others: HostCounts) -> list[MirrorDecision]:
        """Replace the other processes' counts by ``others`` (what :meth:`HostStore.pull` returned; sums, so
        each pull replaces the previous one); returns the decisions the new totals imply."""
        self._fleet = others
        self._fleet_twins = {}
        for (b, a), copies in others.twins.items():
            self._fleet_twins.setdefault(b, {})[a] = copies
        self._fleet_holds = {}
        for (a, b), held in others.holds.items():
            self._fleet_holds.setdefault(a, {})[b] = held
        decisions: list[MirrorDecision] = []
        for host in self._checked.keys() | others.checked.keys():
            decisions += self._decide(host)
        return decisions

    # -- state -----------------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "format": MIRRORS_FORMAT,
            "hosts": sorted(self._seen, key=self._seen.__getitem__),
            "checked": self._checked,
            "twins": [[b, a, sorted(pages)] for b, row in self._twins.items() for a, pages in row.items()],
            "holds": [[a, b, n] for a, row in self._holds.items() for b, n in row.items() if n],
        }

    def merge_json(self, data: dict[str, Any]) -> list[MirrorDecision]:
        """Add saved counts to this table; returns the decisions they imply with this table's settings.

        A file without ``holds`` (written before the table counted them) leaves the pairs to "met first"."""
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
        for a, b, held in data.get("holds", []):
            row = self._holds.setdefault(str(a), {})
            row[str(b)] = row.get(str(b), 0) + int(held)
        decisions: list[MirrorDecision] = []
        for host in list(self._seen):
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


