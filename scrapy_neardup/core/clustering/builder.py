"""Groups of pages fed one at a time (:class:`GroupBuilder`), with an index of the pages that can still be
matched: representatives (the default linkage) or every page (Broder's transitive clusters)."""

from __future__ import annotations

import hashlib

from ..index import SketchIndex
from ..sketch import Sketch
from ..stored_signature import StoredSignature, StoredSketch
from .union_find import UnionFind

#: Links a page makes to earlier pages at most (the ones sharing most positions) in :class:`GroupBuilder`.
DEFAULT_MAX_LINKS = 10_000


class GroupBuilder:
    """Groups of pages fed one at a time, with the 16-bit stored values the indexes compare.

    ``linkage="representative"`` (the default, as ``neardup es groups``): pages are taken in order of addition;
    a page sharing ``>= t`` of the ``k`` positions with one or more representatives added before it joins the one
    it shares most with (ties: the earlier), otherwise it becomes a representative. Every member is linked to its
    representative (the t-of-k rule: flagged with probability ``P[Binomial(k, r) >= t]`` at resemblance ``r``),
    as every page the crawl pipeline drops names a kept page it near-duplicates; the index holds the
    representatives only. :meth:`groups` equals :func:`leader_clusters` over the same signatures in the same
    order.

    ``linkage="transitive"``: Broder's clusters. ``add`` links the page to every earlier page sharing ``>= t``
    positions, so :meth:`groups` equals :func:`broder_clusters` over the same signatures: chains of pages one
    small edit apart join distinct pages into one group.

    A page whose stored signature equals an earlier page's (an exact duplicate, or a copy differing only outside
    the sketch) joins that page's group directly: it would find the same pages, so it is neither queried nor
    indexed, which keeps templates repeated thousands of times linear instead of quadratic.

    Args:
        num_perm: ``k``.
        min_shared: ``t``.
        tag: the sketches' parameter tag (others are refused).
        max_links: transitive linkage: a page links to at most this many earlier pages (the ones sharing most
            positions); more is counted in :attr:`truncated`. It bounds the cost of huge groups of near-identical
            pages and can only split a group if none of the pages beyond the limit links to it another way.
        linkage: ``"representative"`` or ``"transitive"``.

    Attributes:
        pages: pages added. queried: pages looked up in the index (the others had a twin).
        links: pairs joined (a member to its representative, or the lookups' hits, plus twins).
        truncated: pages that hit ``max_links``.
    """

    def __init__(
        self, num_perm: int, min_shared: int, tag: str, *, max_links: int = DEFAULT_MAX_LINKS,
        linkage: str = "representative",
    ) -> None:
        if max_links < 1:
            raise ValueError(f"max_links must be positive, got {max_links}")
        if linkage not in ("representative", "transitive"):
            raise ValueError(f"linkage must be 'representative' or 'transitive', got {linkage!r}")
        self.index = SketchIndex(num_perm, min_shared, tag)
        self.max_links = max_links
        self.linkage = linkage
        self._uf: UnionFind[str] = UnionFind()
        self._first_with: dict[bytes, str] = {}
        # representative linkage: each representative's members (insertion order: representatives in order of
        # addition), and each member's representative
        self._members: dict[str, list[str]] = {}
        self._leader: dict[str, str] = {}
        self.pages = self.queried = self.links = self.truncated = 0

    def add(self, key: str, sketch: Sketch) -> None:
        """Group a non-empty page with the earlier pages it near-duplicates (keys must be unique)."""
        self.add_stored(key, StoredSignature.from_sketch(sketch), sketch.fingerprint)

    def add_stored(self, key: str, stored: StoredSignature, fingerprint: int = 0) -> None:
        """:meth:`add` for a stored signature (as swept from an index) and its fingerprint."""
        self.pages += 1
        digest = hashlib.blake2b(stored.digest(), digest_size=16).digest()
        twin = self._first_with.setdefault(digest, key)
        representative = self.linkage == "representative"
        if twin != key:
            self.links += 1
            if representative:  # the twin's representative is the one this page shares most with too
                self._join(key, self._leader.get(twin, twin))
            else:
                self._uf.union(twin, key)
            return
        self.queried += 1
        page = StoredSketch(stored, fingerprint)
        if representative:
            match = self.index.check_and_add(key, page)
            if match is None:
                self._members[key] = []
            else:
                self.links += 1
                self._join(key, match.key)
            return
        matches = self.index.query_and_add(key, page)
        if len(matches) > self.max_links:
            self.truncated += 1
            matches = matches[: self.max_links]
        self._uf.find(key)
        for match in matches:
            self._uf.union(match.key, key)
        self.links += len(matches)

    def _join(self, key: str, representative: str) -> None:
        self._members[representative].append(key)
        self._leader[key] = representative

    def representative(self, key: str) -> str:
        """Representative linkage: the representative of an added page's group (the page itself if it is one)."""
        if self.linkage != "representative":
            raise ValueError("representative() needs linkage='representative'")
        return self._leader.get(key, key)

    def groups(self) -> list[list[str]]:
        """Groups of two or more pages, each in order of addition (a representative group starts with its
        representative), in order of their first page."""
        if self.linkage == "representative":
            return [[rep, *members] for rep, members in self._members.items() if members]
        return [members for members in self._uf.groups() if len(members) > 1]
