"""The rounds of the crawler backend: check-and-insert of a batch of pages against an index shared by many
crawlers, and why its answers are those of the embedded index.

Design notes: docs/architecture.md#es_integrationbackendprotocol
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from scrapy_neardup.core.match import Match
from scrapy_neardup.core.sketch import Sketch
from scrapy_neardup.core.stored_signature import StoredSignature, shared_counts, verified
from scrapy_neardup.errors import EsError
from scrapy_neardup.store.backend import Decision

from ..mapping import (
    DUPLICATE,
    F_CRAWL,
    F_FINGERPRINT,
    F_KEY,
    F_SEQ,
    F_SIG,
    F_STATUS,
    F_WRITER,
    KEPT,
    PENDING,
    ROOT,
    fingerprint_hex,
    stored_fields,
)
from .hits import _Searches
from .pages import _best, _Candidate, _Page, doc_id_of
from .requests import _POLL_FIRST, _POLL_MAX
from .writes import _Writes

#: One logger for the package, under the name it had as one module: log filters and tests select it.
logger = logging.getLogger("es_integration.backend")

#: Pages decided together at most (a longer call is decided in runs of this many).
_MAX_BATCH = 256
#: Rounds of a batch whose keys other crawlers keep writing at the same time.
_MAX_ROUNDS = 5
#: What a real-time read of a page's own document (or of a pending candidate) returns.
_OWN_SOURCE = [F_KEY, F_STATUS, F_SEQ, F_FINGERPRINT, F_SIG, F_WRITER, F_CRAWL]


def _batches(pages: Sequence[tuple[str, Sketch]], size: int) -> Iterator[list[tuple[str, Sketch]]]:
    """Runs of at most ``size`` pages with distinct keys, in order: a key seen again starts a new run, so that
    its second page is decided against the first one's outcome (a revisit)."""
    run: list[tuple[str, Sketch]] = []
    keys: set[str] = set()
    for key, sketch in pages:
        if key in keys or len(run) >= size:
            yield run
            run, keys = [], set()
        run.append((key, sketch))
        keys.add(key)
    if run:
        yield run


class _Rounds(_Writes, _Searches):
    """The rounds (a base of :class:`~es_integration.backend.ElasticsearchBackend`)."""

    _round_no: int
    crawl_id: str

    async def _decide(self, batch: Sequence[tuple[str, Sketch]]) -> list[Decision]:
        """Decide a batch of distinct keys; pages whose conditional write met another crawler's write of the
        same key are decided again in a further round (at most ``_MAX_ROUNDS``)."""
        pages = [
            _Page(pos, key, StoredSignature.from_sketch(sketch), fingerprint_hex(sketch.fingerprint), doc_id_of(key))
            for pos, (key, sketch) in enumerate(batch)
        ]
        todo = pages
        for _ in range(_MAX_ROUNDS):
            for page in todo:
                page.reset()
            todo = await self._round(todo)
            if not todo:
                return [page.decision for page in pages if page.decision is not None]
        raise EsError(f"checking {len(todo)} page(s) in {self.index}: other crawlers kept rewriting their keys")

    async def _round(self, pages: list[_Page]) -> list[_Page]:
        """One round (module doc): (a) candidates and own documents, answers that need no write; (b) pending
        writes; (c) checkpoint wait, refresh, candidates written before each page, local resolution in write
        order; (d) decisions. Returns the pages to decide again."""
        self._round_no += 1
        token = f"{self._writer}-{self._round_no}"
        # One after the other (not gathered): a failing node then fails one request, reported as such.
        hits = await self._call("searching candidates", self._search_many, [p.stored for p in pages],
                                [p.doc_id for p in pages])
        owns = await self._call("reading the pages' own documents", self._mget, [p.doc_id for p in pages],
                                _OWN_SOURCE)
        # Settle what other crawlers are deciding right now: own documents and candidates left pending.
        waiting = {doc["_id"] for doc in owns if self._waits_for(doc)}
        waiting.update(hit["_id"] for page_hits in hits for hit, _ in page_hits if self._waits_for(hit))
        settled = await self._read_settled(waiting) if waiting else {}
        for page, own in zip(pages, owns, strict=True):
            page.take_own(settled.get(own["_id"], own), self.num_perm)
        # (a) in batch order; pages needing a write join `written`.
        written: list[_Page] = []
        revisited: list[_Page] = []
        for page, page_hits in zip(pages, hits, strict=True):
            if page.own is not None and page.own.fingerprint == page.fingerprint:
                # Unchanged: the stored version is this content (module doc: repeats).
                if self.crawl_id in page.own.crawls:
                    page.decision = Decision.repeat()
                else:
                    page.decision = Decision.revisit(False)
                    revisited.append(page)
                continue
            if page.own is None:
                rewritten = {w.doc_id for w in written}
                kept = [c for c in self._kept(page_hits, settled, page, before=None) if c.id not in rewritten]
                if kept and not self._local_matches(page, written, later=[]):
                    page.decision = Decision.duplicate(self._match(_best(kept)))
                    continue
            page.fields = self._pending_fields(page, token)
            written.append(page)
        noted = await self._call("noting revisits", self._note_revisits, revisited, token) if revisited else []
        if not written:
            return noted
        # (b) pending writes; pages whose key another crawler wrote meanwhile go to the next round.
        again = await self._call("writing pending pages", self._write_pending, written, token)
        written = [page for page in written if page not in again]
        again += noted
        if not written:
            return again
        # (c) the batch's place in the fleet's order; every earlier batch's writes visible on every copy;
        # candidates written before each page.
        marker = await self._call("ordering the batch", self._sequencer.acquire, token)
        for place, page in enumerate(written):
            page.order = self._sequencer.order(marker, place)
        await self._call("waiting for earlier writes", self._settle_writes, marker)
        ours = {page.doc_id for page in written}
        hits = await self._call("searching candidates", self._search_many, [p.stored for p in written],
                                [p.doc_id for p in written])
        self._batch_orders = await self._call("reading the order of pending pages", self._sequencer.orders, {
            str(hit["_source"][ROOT].get("writer", "")) for page_hits in hits for hit, _ in page_hits
            if hit["_id"] not in ours and self._is_pending(hit) and "seq" not in hit["_source"][ROOT]})
        # Only pages written before each one are waited for, and the decisions taken are written before any
        # wait, so waits never form a cycle (module doc, "Why waiting ends").
        foreign = [{hit["_id"]: hit for hit, _ in page_hits if hit["_id"] not in ours and self._order(hit) < page.order}
                   for page, page_hits in zip(written, hits, strict=True)]
        waiting = {i for before in foreign for i, hit in before.items() if self._waits_for(hit)}
        # One read first: most pending candidates have settled meanwhile, and those need no wait.
        settled = await self._read_settled(waiting, wait=False) if waiting else {}
        for i, (page, page_hits) in enumerate(zip(written, hits, strict=True)):
            unsettled = {j for j, hit in foreign[i].items() if self._waits_for(settled.get(j, hit))}
            if unsettled:
                await self._call("writing the decisions", self._write_decisions, written[:i])
                settled.update(await self._read_settled(unsettled))
            kept = [c for c in self._kept(page_hits, settled, page, before=page.order) if c.id not in ours]
            kept += self._local_matches(page, written[:i], later=written[i + 1 :])
            self._conclude(page, kept)
        # (d) the decisions not written yet.
        await self._call("writing the decisions", self._write_decisions, written)
        return again

    def _conclude(self, page: _Page, kept: list[_Candidate]) -> None:
        """A written page's decision from its kept candidates and its own stored version (ties go to it)."""
        best = _best(kept) if kept else None
        own = page.own
        page.fields["seq"] = page.order
        page.fields.pop("writer", None)  # only a pending page needs it (who is deciding it); ~35 bytes a page less
        if own is not None:
            shared = int(shared_counts(own.values, page.stored.values))
            mine = (False, shared)  # not exact: an exact own version is an unchanged revisit, decided in (a)
            if best is None or shared >= self.min_shared and (best.exact, best.shared) <= mine:
                page.fields["status"] = KEPT  # changed: its new content replaces the stored one
                page.decision, page.new_content = Decision.revisit(True), True
                return
        if best is None:
            page.fields["status"] = KEPT
            page.decision, page.new_content = Decision.kept(), True
            return
        page.fields.update(status=DUPLICATE, group=best.id, duplicate_of=best.key, shared=best.shared)
        page.decision = Decision.duplicate(self._match(best))

    def _local_matches(self, page: _Page, earlier: list[_Page], *, later: list[_Page]) -> list[_Candidate]:
        """Kept candidates among the batch's written pages, as a page checked alone in turn would see them: the
        new content of earlier ones decided kept (or revisited), the stored version of later revisited keys."""
        versions: list[tuple[_Page, np.ndarray, str, int]] = [
            (other, other.stored.values, other.fingerprint, other.order)
            for other in earlier
            if other.decision is None or other.new_content  # in (a) its outcome is not known yet
        ]
        versions += [(o, o.own.values, o.own.fingerprint, o.own.order) for o in later if o.own is not None]
        if not versions:
            return []
        found = verified(np.vstack([v[1] for v in versions]), None, page.stored.values, self.min_shared)
        out = []
        for row, shared in found:
            other, _, fingerprint, order = versions[row]
            out.append(_Candidate(other.doc_id, other.key, shared, fingerprint == page.fingerprint, order))
        return out

    def _pending_fields(self, page: _Page, token: str) -> dict[str, Any]:
        # Position tokens only where the position query needs them (a threshold below the band layout's).
        stored = stored_fields(page.stored, positions=not self._bands)
        return {
            "key": page.key, "tag": self.tag, **stored, "fingerprint": page.fingerprint, "empty": False,
            "status": PENDING, "group": page.doc_id, "writer": token, "crawl": [self.crawl_id],
        }

    def _match(self, candidate: _Candidate) -> Match:
        return Match(
            key=candidate.key, shared=candidate.shared, resemblance=candidate.shared / self.num_perm,
            exact=candidate.exact,
        )

    async def _read_settled(self, ids: set[str], *, wait: bool = True) -> dict[str, dict[str, Any]]:
        """Real-time reads of ``ids`` polled until none is pending with a live writer (module doc); those still
        pending after ``pending_timeout`` are abandoned (a warning is logged) and returned as read. With
        ``wait=False``, one read, whatever it finds."""
        out: dict[str, dict[str, Any]] = {}
        todo = set(ids)
        deadline = time.monotonic() + self.pending_timeout
        delay = _POLL_FIRST
        while todo:
            docs = await self._call("reading pending pages", self._mget, sorted(todo), _OWN_SOURCE)
            for doc in docs:
                if "error" in doc:  # its shard copy failed (e.g. a failover): still pending for us
                    continue
                out[doc["_id"]] = doc
                if not self._waits_for(doc):
                    todo.discard(doc["_id"])
            if not todo or not wait:
                break
            if time.monotonic() >= deadline:
                logger.warning(
                    "ignoring %d page(s) left pending for over %.0fs in %s (a crawler stopped mid-check?)",
                    len(todo), self.pending_timeout, self.index,
                )
                self._abandoned.update((i, out[i].get("_seq_no")) for i in todo if i in out)
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, _POLL_MAX)
        return out
