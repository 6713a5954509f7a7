"""What a groups run finds: the groups (:class:`Group`), the run's report (:class:`GroupReport`), and the step
that turns the linkage's labels into groups (:func:`make_groups`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from scrapy_neardup.core.evidence import Rule, evidence

from ..band_filter import BandFilter
from .model import SweptDocs

logger = logging.getLogger(__name__)

#: What joins pages into one group: ``"representative"`` (every member shares >= t positions with the group's
#: representative; leader clustering in the keep rule's order) or ``"transitive"`` (Broder's components).
Linkage = Literal["representative", "transitive"]
LINKAGES = ("representative", "transitive")


def check_linkage(linkage: str) -> None:
    if linkage not in LINKAGES:
        raise ValueError(f"linkage must be representative or transitive, got {linkage!r}")


@dataclass(frozen=True, slots=True)
class Group:
    """A near-duplicate group: ``members[0]`` is the representative; the others in indexing order.

    ``evidence`` is parallel to ``members``: None for the representative, and for each other member why it is in
    the group (:func:`member_evidence`): ``{"resemblance", "rule", "shared", "k", "interval"}`` against the
    representative (empty when the run did not read the signatures).
    """

    id: str
    representative: str
    members: list[str]
    evidence: tuple[dict[str, Any] | None, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"group": self.id, "representative": self.representative, "members": list(self.members)}

    def evidence_of(self, member: int) -> dict[str, Any] | None:
        """The evidence of ``members[member]`` (None for the representative, or when not known)."""
        return self.evidence[member] if member < len(self.evidence) else None


def member_evidence(shared: int, num_perm: int, min_shared: int) -> dict[str, Any]:
    """Why a member is in its group: ``resemblance = shared / k`` and the fields of
    :func:`scrapy_neardup.core.evidence.evidence`, ``shared`` being the signature positions it shares with the
    group's representative. Rule ``"near_duplicate"`` at ``shared >= t``; ``"transitive"`` below (only with
    transitive linkage: the member is linked to the representative through other members)."""
    rule: Rule = "near_duplicate" if shared >= min_shared else "transitive"
    return {"resemblance": round(shared / num_perm, 4), **evidence(shared, num_perm, rule)}


@dataclass
class GroupReport:
    """Outcome of :func:`find_groups` or :func:`find_new_groups`.

    Attributes:
        groups: groups of two or more documents, in indexing order of their representatives (with ``--new``:
            the groups holding a new document).
        swept: the documents read, for :func:`assign_groups` (with ``--new``: the new documents and the members
            of the older groups they join).
        documents: sketched documents swept (with ``--new``: new documents).
        queries: distinct stored signatures (identical ones take part in pair finding once).
        pairs: links found: pairs sharing ``>= t`` positions joining two clusters, plus joins of identical
            signatures.
        malformed: documents whose compact signature cannot be read (left out of the groups, logged).
        seconds: wall time; ``sweep_seconds``: of which reading the index.
        watermark: the ``neardup.seq`` up to which the groups cover the index (written by
            :func:`assign_groups`): the highest one swept, kept below the ``_seq_no`` of any page crawlers were
            deciding (:func:`_lowest_pending_seq`), which will settle with that seq.
        new: ``True`` for an incremental run.
        linkage: ``"representative"`` or ``"transitive"`` (see :func:`find_groups`).
        band_filter: with ``--new``, the band filter its queries used (None: every token was queried);
            :func:`assign_groups` extends it with the new documents.
        band_tokens: with ``--new``, the band tokens queried, of ``band_tokens_total`` distinct ones.
    """

    groups: list[Group] = field(default_factory=list)
    swept: SweptDocs | None = None
    documents: int = 0
    queries: int = 0
    pairs: int = 0
    malformed: int = 0
    seconds: float = 0.0
    sweep_seconds: float = 0.0
    watermark: int | None = None
    new: bool = False
    tag: str = ""
    min_shared: int = 0
    linkage: Linkage = "representative"
    #: rows of ``swept`` that are in a group
    grouped_rows: np.ndarray | None = None
    band_filter: BandFilter | None = None
    #: the watermark ``band_filter`` was written for
    band_filter_seq: int | None = None
    band_tokens: int = 0
    band_tokens_total: int = 0

    @property
    def duplicates(self) -> int:
        """Documents that are in a group and not its representative."""
        return sum(len(g.members) - 1 for g in self.groups)

    def summary(self) -> str:
        rate = self.documents / self.seconds if self.seconds > 0 else 0.0
        text = (
            f"{self.documents} {'new ' if self.new else ''}documents, {len(self.groups)} groups, "
            f"{self.duplicates} duplicates, {self.pairs} pairs, {self.seconds:.1f}s ({rate:.0f} docs/s)"
        )
        return text + (f", {self.malformed} malformed" if self.malformed else "")



def log_report(report: GroupReport, index: str) -> None:
    if report.malformed:
        logger.warning("%d documents of %s have an unreadable compact signature and were left out of the groups",
                       report.malformed, index)
    logger.info("groups in %s: %s", index, report.summary())



def make_groups(
    labels: np.ndarray, docs: SweptDocs, rows: np.ndarray, *, leaders: bool = False, min_shared: int = 0
) -> tuple[list[Group], np.ndarray]:
    """Groups of two or more of ``rows`` with equal labels (representative first, then members in indexing
    order; groups in indexing order of their representatives), and the rows in them. The representative is
    the label itself with ``leaders`` (:func:`~scrapy_neardup.core.clustering.leader_labels`' labels are rows),
    else the group's best page by the keep rule. Each member's evidence is counted on the swept signatures
    (``t = min_shared`` names its rule, :func:`member_evidence`); None where a row has no signature."""
    labels = labels[rows]
    inverse = np.unique(labels, return_inverse=True)[1]
    sizes = np.bincount(inverse)
    grouped = rows[sizes[inverse] > 1]
    if grouped.size == 0:
        return [], grouped
    ids = np.array(docs.ids(grouped.tolist()), dtype=object)
    # Ties are broken by _id: by its rank among the ids (an argsort of the str objects), not by a fixed-width
    # unicode copy of them (4 bytes a character, the peak of this step at 1M documents).
    id_rank = np.empty(ids.size, dtype=np.int64)
    id_rank[np.argsort(ids, kind="stable")] = np.arange(ids.size)
    seq, rank = docs.seq[grouped], docs.rank[grouped]
    label = labels[sizes[inverse] > 1]
    order = np.lexsort((id_rank, seq, label))
    cuts = np.flatnonzero(np.diff(label[order])) + 1
    values = docs.values()
    groups = []
    for part in np.split(order, cuts):
        if leaders:
            best = part[grouped[part] == label[part]][0]
        else:
            best = part[np.lexsort((id_rank[part], seq[part], rank[part]))[0]]
        representative = str(ids[best])
        others = [i for i in part.tolist() if i != best]
        members = [representative, *(str(ids[i]) for i in others)]
        found = _shared_with(values, int(grouped[best]), grouped[others])
        proof = [None if s is None else member_evidence(s, docs.num_perm, min_shared) for s in found]
        groups.append((int(seq[best]), representative, Group(representative, representative, members,
                                                             (None, *proof))))
    groups.sort(key=lambda g: (g[0], g[1]))
    return [g for _, _, g in groups], grouped


def _shared_with(values: np.ndarray, leader: int, rows: np.ndarray) -> list[int | None]:
    """Positions each of ``rows`` shares with row ``leader`` (the swept 16-bit values, the ones the groups were
    made from); None for a row without a signature."""
    found: list[int | None] = [None] * rows.size
    if leader >= values.shape[0]:
        return found
    have = np.flatnonzero(rows < values.shape[0])
    if have.size:
        counts = np.count_nonzero(values[rows[have]] == values[leader], axis=1)
        for at, count in zip(have.tolist(), counts.tolist(), strict=True):
            found[at] = int(count)
    return found

