"""The writes of a round (module doc of :mod:`.rounds`): :class:`Writes` writes the pages ``pending`` in step (b),
refreshes the index for step (c), and writes the decisions of step (d).

Replicas and failover
---------------------
With replicas (``auto_expand_replicas: 0-1`` gives one on a cluster of two or more nodes) a search or a
multi-get may run on any started copy. Writes are acknowledged once every in-sync copy has them, so a replica
promoted after its primary dies holds every acknowledged write (and the sequencer's markers, see
:mod:`.sequencer`). A request in flight when the primary died is retried
by Elasticsearch on the new primary, or fails and is retried here (on another node when ``url`` lists several);
a ``create`` that had landed answers "conflict" and its ``_seq_no`` is read back. Answers that cover no copy of
the shard (a search or refresh with failed shards, a multi-get item with an error) count as retryable failures
or as "still pending", never as "no such page".
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from elasticsearch import ConflictError

from ..mapping import F_WRITER, ROOT
from ..retry import ItemsRefused, ShardsUnavailable
from .pages import _Page

if TYPE_CHECKING:
    from .transport import Transport

#: One logger for the package, under the name it had as one module: log filters and tests select it.
logger = logging.getLogger("es_integration.backend")

#: Crawls named on a document at most (see "Repeats within one crawl" in :mod:`.rounds`): concurrent crawls on
#: one index beyond this many may meet a page again as a revisit instead of a repeat.
_CRAWLS_KEPT = 8


class Writes:
    """The writes of a round into one index.

    Args:
        transport: the index's requests.
        crawl_id: this crawl's identity, noted on the documents of the pages it revisits.
    """

    def __init__(self, transport: Transport, *, crawl_id: str) -> None:
        self.transport = transport
        self.index = transport.index
        self.crawl_id = crawl_id

    async def write_pending(self, pages: list[_Page], token: str) -> list[_Page]:
        """Write the pages as ``pending`` (created, or replacing the document read in (a) if unchanged since:
        ``if_seq_no``); each page's ``_seq_no`` is its place in the write order. One page: a create (or an
        index) request; several: one bulk request, whose items keep their order on the one shard.

        Idempotent under retries: a write that landed in an earlier attempt answers "conflict" and is read
        back (ours when it holds ``token``). Returns the pages whose key another crawler wrote meanwhile.

        Raises:
            ItemsRefused: some bulk items were refused (e.g. HTTP 429 inside the response): retried.
        """
        todo = [page for page in pages if page.seq < 0 and not page.conflict]
        if len(pages) == 1 and todo:
            (page,) = todo
            try:
                if page.prior is None:
                    answer = await self.transport.es.create(index=self.index, id=page.doc_id,
                                                            document={ROOT: page.fields})
                else:
                    answer = await self.transport.es.index(index=self.index, id=page.doc_id,
                                                           document={ROOT: page.fields},
                                                           if_seq_no=page.prior[0], if_primary_term=page.prior[1])
                page.landed(answer)
            except ConflictError:
                await self._claim(todo, token)
        elif todo:
            operations: list[dict[str, Any]] = []
            for page in todo:
                action: dict[str, dict[str, Any]]
                if page.prior is None:
                    action = {"create": {"_index": self.index, "_id": page.doc_id}}
                else:
                    action = {"index": {"_index": self.index, "_id": page.doc_id, "if_seq_no": page.prior[0],
                                        "if_primary_term": page.prior[1]}}
                operations += [action, {ROOT: page.fields}]
            await self._write_each(todo, operations, token, "pending write(s)")
        return [page for page in pages if page.conflict]

    async def note_revisits(self, pages: list[_Page], token: str) -> list[_Page]:
        """Note this crawl on the documents of unchanged revisits (one bulk of updates, each conditional on the
        ``_seq_no`` read in (a), carrying ``token``); returns the pages whose document changed meanwhile, to be
        decided again (a retried update that had landed is recognized by its token, as in :meth:`_claim`).
        See "Repeats within one crawl" in :mod:`.rounds`."""
        todo = [page for page in pages if page.seq < 0 and not page.conflict]
        if not todo:
            return [page for page in pages if page.conflict]
        operations: list[dict[str, Any]] = []
        for page in todo:
            assert page.prior is not None and page.own is not None
            crawls = [self.crawl_id, *(c for c in page.own.crawls if c != self.crawl_id)][:_CRAWLS_KEPT]
            operations += [
                {"update": {"_index": self.index, "_id": page.doc_id, "if_seq_no": page.prior[0],
                            "if_primary_term": page.prior[1]}},
                # seq: the order the document had, which a document without one took from its _seq_no
                {"doc": {ROOT: {"crawl": crawls, "writer": token, "seq": page.own.order}}},
            ]
        await self._write_each(todo, operations, token, "revisit note(s)")
        return [page for page in pages if page.conflict]

    async def _write_each(self, todo: list[_Page], operations: list[dict[str, Any]], token: str, what: str) -> None:
        """Send ``operations`` (one bulk item per page of ``todo``, in order) and take each item's result: a page
        whose write landed records it; those that conflicted (409) are claimed (:meth:`_claim`); any other refusal
        raises :class:`~es_integration.retry.ItemsRefused` (retried), naming ``what`` was refused."""
        response = await self.transport.bulk(operations)
        conflicts, refused = [], 0
        for page, item in zip(todo, response["items"], strict=True):
            (result,) = item.values()
            status = int(result.get("status", 500))
            if 200 <= status < 300:
                page.landed(result)
            elif status == 409:
                conflicts.append(page)
            else:
                refused += 1
        if conflicts:
            await self._claim(conflicts, token)
        if refused:
            raise ItemsRefused(f"the bulk request refused {refused} {what}")

    async def _claim(self, pages: list[_Page], token: str) -> None:
        """After a conflict: a page whose document holds ``token`` was written by an earlier attempt of this
        very request (its ``_seq_no`` is read back); otherwise another crawler wrote its key meanwhile."""
        docs = await self.transport.mget([page.doc_id for page in pages], [F_WRITER])
        for page, doc in zip(pages, docs, strict=True):
            if "error" in doc:
                raise ShardsUnavailable(f"reading back {page.doc_id} failed")
            if doc.get("found") and doc["_source"].get(ROOT, {}).get("writer") == token:
                page.landed(doc)
            else:
                page.conflict = True

    async def write_decisions(self, pages: list[_Page]) -> None:
        """Write each page's final status and ``seq`` (one index request for one page, else one bulk)."""
        todo = [page for page in pages if not page.decided]
        if len(pages) == 1 and todo:
            await self.transport.es.index(index=self.index, id=todo[0].doc_id, document={ROOT: todo[0].fields})
            todo[0].decided = True
            return
        if not todo:
            return
        operations: list[dict[str, Any]] = []
        for page in todo:
            operations += [{"index": {"_index": self.index, "_id": page.doc_id}}, {ROOT: page.fields}]
        response = await self.transport.bulk(operations)
        for page, item in zip(todo, response["items"], strict=True):
            (result,) = item.values()
            page.decided = 200 <= int(result.get("status", 500)) < 300
        refused = sum(1 for page in todo if not page.decided)
        if refused:
            raise ItemsRefused(f"the bulk request refused {refused} decision(s)")

    async def refresh(self) -> None:
        """Refresh the index: every acknowledged write searchable (a copy that failed to refresh: retried)."""
        response = await self.transport.es.indices.refresh(index=self.index)
        if response["_shards"].get("failed", 0):
            raise ShardsUnavailable(f"the refresh failed on {response['_shards']['failed']} shard copy(ies)")
