"""The rounds of the crawler backend: check-and-insert of a batch of pages against an index shared by many
crawlers, and why its answers are those of the embedded index.

Design notes: docs/architecture.md#es_integrationbackendrounds
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from scrapy_neardup.core.match import Match, Sketched
from scrapy_neardup.core.sketch import Sketch
from scrapy_neardup.core.stored_signature import StoredSignature, shared_counts, verified
from scrapy_neardup.errors import EsError
from scrapy_neardup.store.backend import Decision

from ..mapping import DUPLICATE, KEPT, PENDING, ROOT, fingerprint_hex, stored_fields, stored_sketched, text_fields
from .pages import _best, _Candidate, _Page, doc_id_of
from .searches import OWN_SOURCE

if TYPE_CHECKING:
    from scrapy_neardup.core.params import SketchParams

    from .searches import Searches
    from .sequencer import Sequencer
    from .transport import Transport
    from .writes import Writes

#: One logger for the package, under the name it had as one module: log filters and tests select it.
logger = logging.getLogger("es_integration.backend")

#: Pages decided together at most (a longer call is decided in runs of this many).
_MAX_BATCH = 256
#: Rounds of a batch whose keys other crawlers keep writing at the same time.
_MAX_ROUNDS = 5


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


class Rounds:
    """Check-and-insert of batches of pages (module doc), from the parts given.

    Args:
        transport: the index's requests (each step under its retry rule).
        searches: candidate searches, and the settling of other crawlers' pending pages.
        writes: the pending writes, revisit notes and decisions.
        params: ``k = params.num_perm`` positions; a page sharing ``>= t = params.min_shared`` of them with a
            kept page is its near-duplicate.
        crawl_id: this crawl's identity (repeats, module doc).
    """

    def __init__(
        self, transport: Transport, searches: Searches, writes: Writes, params: SketchParams, *, crawl_id: str
    ) -> None:
        self.transport = transport
        self.searches = searches
        self.writes = writes
        self.index = transport.index
        self.num_perm = params.num_perm
        self.min_shared = params.min_shared
        self.tag = params.tag
        self.crawl_id = crawl_id
        #: the fleet's order of batches (set once the index is open)
        self.sequencer: Sequencer | None = None
        self.round_no = 0

    async def decide(self, batch: Sequence[tuple[str, Sketch]]) -> list[Decision]:
        """Decide a batch of distinct keys; pages whose conditional write met another crawler's write of the
        same key are decided again in a further round (at most ``_MAX_ROUNDS``)."""
        pages = [
            _Page(pos, key, StoredSignature.from_sketch(sketch), fingerprint_hex(sketch.fingerprint), doc_id_of(key),
                  text=text_fields(sketch))
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
        sequencer, searches, writes, call = self._sequencer, self.searches, self.writes, self.transport.call
        self.round_no += 1
        token = f"{searches.writer}-{self.round_no}"
        # One after the other (not gathered): a failing node then fails one request, reported as such.
        hits = await call("searching candidates", searches.search_many, [p.stored for p in pages],
                          [p.doc_id for p in pages])
        owns = await call("reading the pages' own documents", self.transport.mget, [p.doc_id for p in pages],
                          OWN_SOURCE)
        # Settle what other crawlers are deciding right now: own documents and candidates left pending.
        waiting = {doc["_id"] for doc in owns if searches.waits_for(doc)}
        waiting.update(hit["_id"] for page_hits in hits for hit, _ in page_hits if searches.waits_for(hit))
        settled = await searches.read_settled(waiting) if waiting else {}
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
                kept = [c for c in searches.kept(page_hits, settled, page, before=None) if c.id not in rewritten]
                if kept and not self._local_matches(page, written, later=[]):
                    page.decision = Decision.duplicate(self._match(_best(kept)))
                    continue
            page.fields = self._pending_fields(page, token)
            written.append(page)
        noted = await call("noting revisits", writes.note_revisits, revisited, token) if revisited else []
        if not written:
            return noted
        # (b) pending writes; pages whose key another crawler wrote meanwhile go to the next round.
        again = await call("writing pending pages", writes.write_pending, written, token)
        written = [page for page in written if page not in again]
        again += noted
        if not written:
            return again
        # (c) the batch's place in the fleet's order; every earlier batch's writes visible on every copy;
        # candidates written before each page.
        marker = await call("ordering the batch", sequencer.acquire, token)
        for place, page in enumerate(written):
            page.order = sequencer.order(marker, place)
        await call("waiting for earlier writes", self._settle_writes, marker)
        ours = {page.doc_id for page in written}
        hits = await call("searching candidates", searches.search_many, [p.stored for p in written],
                                [p.doc_id for p in written])
        searches.batch_orders = await call("reading the order of pending pages", sequencer.orders, {
            str(hit["_source"][ROOT].get("writer", "")) for page_hits in hits for hit, _ in page_hits
            if hit["_id"] not in ours and searches.is_pending(hit) and "seq" not in hit["_source"][ROOT]})
        # Only pages written before each one are waited for, and the decisions taken are written before any
        # wait, so waits never form a cycle (module doc, "Why waiting ends").
        foreign = [{hit["_id"]: hit for hit, _ in page_hits
                    if hit["_id"] not in ours and searches.order(hit) < page.order}
                   for page, page_hits in zip(written, hits, strict=True)]
        waiting = {i for before in foreign for i, hit in before.items() if searches.waits_for(hit)}
        # One read first: most pending candidates have settled meanwhile, and those need no wait.
        settled = await searches.read_settled(waiting, wait=False) if waiting else {}
        for i, (page, page_hits) in enumerate(zip(written, hits, strict=True)):
            unsettled = {j for j, hit in foreign[i].items() if searches.waits_for(settled.get(j, hit))}
            if unsettled:
                await call("writing the decisions", writes.write_decisions, written[:i])
                settled.update(await searches.read_settled(unsettled))
            kept = [c for c in searches.kept(page_hits, settled, page, before=page.order) if c.id not in ours]
            kept += self._local_matches(page, written[:i], later=written[i + 1 :])
            self._conclude(page, kept)
        # (d) the decisions not written yet.
        await call("writing the decisions", writes.write_decisions, written)
        return again

    @property
    def _sequencer(self) -> Sequencer:
        if self.sequencer is None:
            raise RuntimeError("ElasticsearchBackend used before open() or after close()")
        return self.sequencer

    async def _settle_writes(self, marker: int) -> None:
        """Refresh the pages' index and wait until every marker up to the batch's (``marker``) is applied on
        every started copy of the sequencer: every earlier batch's pending writes are then visible on every copy
        of every shard, and its marker readable (:mod:`.sequencer`). The two at once: every earlier batch's
        pending writes were acknowledged before this batch's marker was, so the refresh need not wait."""
        await asyncio.gather(self._sequencer.wait(marker), self.writes.refresh())

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
        versions: list[tuple[_Page, np.ndarray, str, int, Sketched | None]] = [
            (other, other.stored.values, other.fingerprint, other.order, stored_sketched(other.text))
            for other in earlier
            if other.decision is None or other.new_content  # in (a) its outcome is not known yet
        ]
        # A later page's stored version: what of it was sketched is not read (its evidence omits the kept side).
        versions += [(o, o.own.values, o.own.fingerprint, o.own.order, None) for o in later if o.own is not None]
        if not versions:
            return []
        found = verified(np.vstack([v[1] for v in versions]), None, page.stored.values, self.min_shared)
        out = []
        for row, shared in found:
            other, _, fingerprint, order, kept = versions[row]
            out.append(_Candidate(other.doc_id, other.key, shared, fingerprint == page.fingerprint, order, kept))
        return out

    def _pending_fields(self, page: _Page, token: str) -> dict[str, Any]:
        # Position tokens only where the position query needs them (a threshold below the band layout's).
        stored = stored_fields(page.stored, positions=not self.searches.bands)
        return {
            "key": page.key, "tag": self.tag, **stored, "fingerprint": page.fingerprint, "empty": False,
            "status": PENDING, "group": page.doc_id, "writer": token, "crawl": [self.crawl_id], **page.text,
        }

    def _match(self, candidate: _Candidate) -> Match:
        return Match(
            key=candidate.key, shared=candidate.shared, resemblance=candidate.shared / self.num_perm,
            exact=candidate.exact, kept=candidate.kept,
        )
