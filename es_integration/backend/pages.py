"""The records a batch is decided with: each page (:class:`_Page`), the stored version of a revisited key
(:class:`_Version`), a kept candidate (:class:`_Candidate`) and the best of them; and :func:`doc_id_of`, the one
document id of a key."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scrapy_neardup.core.match import Sketched, best_first
from scrapy_neardup.core.stored_signature import StoredSignature, decode_many
from scrapy_neardup.store.backend import Decision

from ..mapping import KEPT, ROOT
from ..retry import ShardsUnavailable


@dataclass(frozen=True, slots=True)
class _Candidate:
    """A kept document a page matches: its ``_id`` and key, the shared positions, whether the texts are equal,
    and its place in the write order (ties go to the earliest)."""

    id: str
    key: str
    shared: int
    exact: bool
    order: int
    kept: Sketched | None = None  # what of it was sketched (None: a document written before that was stored)


@dataclass(frozen=True, slots=True)
class _Version:
    """A key's stored kept version, read before its page is decided (a recrawl)."""

    values: np.ndarray  # uint16[k]
    fingerprint: str
    order: int
    crawls: tuple[str, ...] = ()  # the crawls that kept or revisited this content (repeats: see .rounds)


@dataclass(eq=False, slots=True)
class _Page:
    """One page of a batch while it is decided (see :meth:`.rounds.Rounds._round`)."""

    pos: int
    key: str
    stored: StoredSignature
    fingerprint: str
    doc_id: str
    #: ``(_seq_no, _primary_term)`` of the document under ``doc_id`` when (a) read one: writes are conditional
    prior: tuple[int, int] | None = None
    own: _Version | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    seq: int = -1  # the ``_seq_no`` of its pending write on its shard (-1: not written yet)
    order: int = -1  # its place in the fleet's write order (:mod:`.sequencer`), once its batch holds a marker
    conflict: bool = False
    decided: bool = False
    new_content: bool = False  # kept or revisited: later pages of the batch compare with its content
    decision: Decision | None = None
    #: what of the page was sketched, written on its document (the kept side of later duplicates' evidence)
    text: dict[str, Any] = field(default_factory=dict)

    def reset(self) -> None:
        self.prior, self.own, self.fields, self.seq, self.order = None, None, {}, -1, -1
        self.conflict = self.decided = self.new_content = False
        self.decision = None

    def take_own(self, doc: Mapping[str, Any], num_perm: int) -> None:
        """Note what the key's document holds: nothing, a kept version (this is a recrawl), or something a
        write replaces conditionally (a duplicate, an unchecked or an abandoned pending record)."""
        if "error" in doc:
            raise ShardsUnavailable(f"reading {self.doc_id} failed on its shard")
        if not doc.get("found"):
            return
        self.prior = (int(doc["_seq_no"]), int(doc["_primary_term"]))
        source = doc["_source"].get(ROOT, {})
        if source.get("status") != KEPT:
            return
        values, valid = decode_many([source.get("sig")], num_perm)
        if valid[0]:
            order = int(source.get("seq", doc["_seq_no"]))
            crawls = source.get("crawl")
            crawls = tuple(crawls) if isinstance(crawls, list) else (crawls,) if isinstance(crawls, str) else ()
            self.own = _Version(values[0], str(source.get("fingerprint", "")), order, crawls)

    def landed(self, answer: Any) -> None:
        self.seq = int(answer["_seq_no"])


def doc_id_of(key: str) -> str:
    """The ``_id`` of a key's document: one document per key, so that a recrawl finds its page by id (a hash:
    ``_id`` is limited to 512 bytes, URLs are not; 128 bits make a collision among 10^12 keys ~10^-15)."""
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _best(candidates: list[_Candidate]) -> _Candidate:
    """The best kept candidate: exact first, then most shared positions, then the earliest kept."""
    ranks = best_first([c.exact for c in candidates], [c.shared for c in candidates], [c.order for c in candidates])
    return candidates[int(ranks[0])]
