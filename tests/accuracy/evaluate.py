"""Scores a method's near-duplicate decisions on a corpus against the labels (:mod:`labels`).

A method decides each page in crawl order: kept, or dropped as a near-duplicate of a named kept page. A drop is
judged by the main-content Jaccard similarity ``J`` of the dropped page and the page it names:

* false drop: ``J <= 0.5`` (a distinct page lost);
* grey drop: ``0.5 < J < 0.75`` (debatable);
* correct drop: ``J >= 0.75``.

Precision is correct drops over all drops. Recall is measured on the real near-duplicate pairs (``J >= 0.9``): a
pair is left whole when both its pages were kept; recall = 1 - whole / real pairs (a pair with at least one page
dropped counts as caught, whichever page it names).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from corpora import Corpus
from labels import Labels, labels_for

logger = logging.getLogger(__name__)

FALSE_MAX = 0.5
CORRECT_MIN = 0.75
REAL_MIN = 0.9
#: A method's decision for one page: ``("kept", None)`` or ``("dropped", key of the kept page it near-duplicates)``.
Decision = tuple[Literal["kept", "dropped"], str | None]


@dataclass(frozen=True)
class Drop:
    """One drop, for debugging: the dropped page, the page it names, their main-content Jaccard and word counts."""

    dropped: str
    kept: str
    jaccard: float
    dropped_words: int
    kept_words: int


@dataclass(frozen=True)
class Evaluation:
    """The scores of one method on one corpus variant (see the module doc)."""

    pages: int
    kept: int
    drops: int
    false_drops: int
    grey_drops: int
    correct_drops: int
    precision: float
    real_pairs: int
    whole: int
    recall: float
    worst_false_drops: tuple[Drop, ...]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def evaluate(corpus: Corpus, decisions: Mapping[str, Decision] | Sequence[tuple[str, Decision]], worst: int = 10,
             labels: Labels | None = None) -> Evaluation:
    """Score ``decisions`` (one per page of ``corpus``: a mapping, or ``(key, decision)`` pairs in crawl order)
    against the corpus' labels.

    ``worst`` false drops (lowest Jaccard first, then crawl order) are listed with their paths.

    Raises:
        ValueError: a page has no decision, a decision is malformed, or a drop names a page that is not a page of
            the corpus.
    """
    labels = labels or labels_for(corpus)
    if not isinstance(decisions, Mapping):
        decisions = dict(decisions)
    missing = [key for key in labels.keys if key not in decisions]
    if missing:
        raise ValueError(f"{len(missing)} pages of {corpus.name} have no decision, e.g. {missing[0]}")
    drops: list[Drop] = []
    dropped: set[str] = set()
    for key in labels.keys:
        verdict, named = decisions[key]
        if verdict == "kept":
            continue
        if verdict != "dropped" or named is None:
            raise ValueError(f"bad decision for {key}: {(verdict, named)!r}")
        if named not in corpus:
            raise ValueError(f"{key} is dropped as a near-duplicate of {named}, which is no page of {corpus.name}")
        dropped.add(key)
        drops.append(Drop(key, named, labels.jaccard(key, named), int(labels.words[labels.index(key)]),
                          int(labels.words[labels.index(named)])))
    false = [d for d in drops if d.jaccard <= FALSE_MAX]
    grey = [d for d in drops if FALSE_MAX < d.jaccard < CORRECT_MIN]
    correct = len(drops) - len(false) - len(grey)
    real = labels.real_pairs(REAL_MIN)
    whole = sum(1 for a, b, _ in real if a not in dropped and b not in dropped)
    false.sort(key=lambda d: (d.jaccard, corpus.position(d.dropped)))
    return Evaluation(
        pages=len(labels),
        kept=len(labels) - len(drops),
        drops=len(drops),
        false_drops=len(false),
        grey_drops=len(grey),
        correct_drops=correct,
        precision=correct / len(drops) if drops else 1.0,
        real_pairs=len(real),
        whole=whole,
        recall=1.0 - whole / len(real) if real else 1.0,
        worst_false_drops=tuple(false[:worst]),
    )


@dataclass(frozen=True)
class ComponentsReport:
    """How far grouping drifts: the largest group, and how many member pairs are distinct pages, in it and in all
    groups.

    Attributes:
        groups: number of groups (singletons included).
        largest: members of the largest group (the first in crawl order on ties).
        largest_members: up to 10 of its keys, in crawl order.
        member_pairs: pairs of members of the largest group.
        false_pairs: of those, the pairs whose main-content Jaccard is <= 0.5.
        grouped_pages: pages in groups of two or more.
        all_member_pairs: pairs of members of one group, over all groups.
        all_false_pairs: of those, the pairs whose main-content Jaccard is <= 0.5 (distinct pages in one group).
        false_to_first: members whose main-content Jaccard to their group's first page in crawl order (the page a
            keep-first rule leaves visible: a representative group's representative) is <= 0.5.
    """

    groups: int
    largest: int
    largest_members: tuple[str, ...]
    member_pairs: int
    false_pairs: int
    grouped_pages: int = 0
    all_member_pairs: int = 0
    all_false_pairs: int = 0
    false_to_first: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def components_report(corpus: Corpus, groups: Mapping[str, Hashable], labels: Labels | None = None) -> ComponentsReport:
    """Report on per-page group ids (pages with equal ids are one group; pages without an id are singletons)."""
    labels = labels or labels_for(corpus)
    members: dict[Hashable, list[str]] = defaultdict(list)
    for key in labels.keys:  # crawl order
        members[groups.get(key, ("singleton", key))].append(key)
    largest = max(members.values(), key=len)
    pairs = len(largest) * (len(largest) - 1) // 2
    grouped = all_pairs = all_false = to_first = false = 0
    for group in members.values():
        if len(group) < 2:
            continue
        jaccards = labels.jaccard_matrix([labels.index(key) for key in group])
        distinct = int(np.count_nonzero(jaccards[np.triu_indices(len(group), k=1)] <= FALSE_MAX))
        grouped += len(group)
        all_pairs += len(group) * (len(group) - 1) // 2
        all_false += distinct
        to_first += int(np.count_nonzero(jaccards[0, 1:] <= FALSE_MAX))
        if group is largest:
            false = distinct
    return ComponentsReport(len(members), len(largest), tuple(largest[:10]), pairs, false, grouped, all_pairs,
                            all_false, to_first)


def star_groups(decisions: Mapping[str, Decision]) -> dict[str, str]:
    """Group ids from decisions: each kept page leads a group of itself and the pages dropped naming it."""
    return {key: key if verdict == "kept" else str(named) for key, (verdict, named) in decisions.items()}
