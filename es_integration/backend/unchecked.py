"""The queue of pages whose check failed, written to the index later with status ``unchecked``.

Design notes: docs/architecture.md#es_integrationbackendunchecked
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy_neardup.core.sketch import Sketch
from scrapy_neardup.core.stored_signature import StoredSignature
from scrapy_neardup.errors import EsError, NearDupError

from ..mapping import PENDING, ROOT, UNCHECKED, fingerprint_hex, stored_fields
from ..retry import retrying

if TYPE_CHECKING:
    from .searches import Searches
    from .transport import Transport

#: One logger for the package, under the name it had as one module: log filters and tests select it.
logger = logging.getLogger("es_integration.backend")

#: Unchecked pages per bulk request (and per attempt after a successful check).
_UNCHECKED_BATCH = 500
#: Seconds without attempts to write unchecked pages after one failed during the crawl.
_UNCHECKED_PAUSE = 5.0


@dataclass(frozen=True, slots=True)
class _Unchecked:
    """A page whose check failed, remembered until it is written with status ``unchecked``.

    Compact on purpose (about 0.6 KB with a 50-character URL, so 60 MB at the default cap), because up to
    ``max_unchecked`` of them are held: the stored 16 bits of each position rather than the sketch or its tokens.
    """

    key: str
    stored: StoredSignature  # the low 16 bits of each position, what the index stores
    fingerprint: int
    doc_id: str  # the _id its check used: the pending document, if the check got that far


class _Refused(NearDupError):
    """Pages a bulk request refused (a conflict, or HTTP 429 inside the response): another round reads them."""


class UncheckedQueue:
    """The pages whose check failed (module doc), until they are written with status ``unchecked``.

    Args:
        transport: the index's requests.
        searches: tells pages other crawlers are deciding right now (left to them), and whether pages carry
            position tokens (``searches.bands``).
        max_unchecked: pages remembered at most (about 0.6 KB each); beyond, only counted.
    """

    def __init__(self, transport: Transport, searches: Searches, *, max_unchecked: int) -> None:
        self.transport = transport
        self.searches = searches
        self.index = transport.index
        self.max_unchecked = max_unchecked
        #: the remembered pages by ``_id``
        self.pages: dict[str, _Unchecked] = {}
        #: no attempt during the crawl before this time (``time.monotonic()``), after a failed one
        self.retry_at = 0.0
        #: why the last attempt failed (for the warning at close)
        self.error = ""
        #: unchecked pages written to the index, and those beyond ``max_unchecked`` (never written)
        self.unchecked_indexed = 0
        self.unchecked_overflow = 0
        #: what became of the pages, filled by :meth:`report`
        self.close_stats: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.pages)

    def forget(self, doc_id: str) -> None:
        """A remembered page decided since (the pipeline tried it again): no longer unchecked."""
        self.pages.pop(doc_id, None)

    def remember(self, key: str, sketch: Sketch, doc_id: str) -> None:
        """Hold a page whose check failed for :meth:`_write`; count it when over ``max_unchecked``."""
        if len(self.pages) >= self.max_unchecked:
            self.unchecked_overflow += 1
            if self.unchecked_overflow == 1:
                logger.warning(
                    "over %d pages could not be checked against %s; later ones are passed through without "
                    "being remembered for the index (counted in neardup/unchecked_overflow)",
                    self.max_unchecked, self.index,
                )
            return
        self.pages[doc_id] = _Unchecked(key, StoredSignature.from_sketch(sketch), sketch.fingerprint, doc_id)

    async def write_quietly(self, *, limit: int | None, retries: int | None) -> None:
        """:meth:`_write`, keeping what cannot be written for later (and pausing further attempts)
        instead of failing: a successful check must not fail because an older page still cannot be written."""
        try:
            await self._write(limit=limit, retries=retries)
        except EsError as exc:
            self.error = str(exc)
            self.retry_at = time.monotonic() + _UNCHECKED_PAUSE
            logger.debug("could not write %d unchecked page(s) yet: %s", len(self.pages), exc)

    async def _write(self, *, limit: int | None, retries: int | None) -> None:
        """Write remembered pages (``limit`` at most; ``None``: all) as ``unchecked``, in bulk batches.

        ``retries`` bounds the retries of each request and the rounds for pages a bulk refused (``None``: the
        usual ``retries``). Pages not written stay remembered.

        Raises:
            EsError: a request failed after its retries.
        """
        entries = list(itertools.islice(self.pages.values(), limit))
        for start in range(0, len(entries), _UNCHECKED_BATCH):
            await self._write_batch(entries[start : start + _UNCHECKED_BATCH], retries)

    async def _write_batch(self, batch: list[_Unchecked], retries: int | None) -> None:
        """Read what each page's ``_id`` holds now, then create or conditionally overwrite it (module doc).

        A conflict (the failed check's own request landing late) or a refusal inside the bulk response (HTTP 429)
        sends the page to the next round, which reads it again.
        """
        todo = {entry.doc_id: entry for entry in batch}
        try:
            transport = self.transport
            async for attempt in retrying(transport.retries if retries is None else retries, transport.backoff,
                                          when=_Refused):
                with attempt:
                    await self._write_round(todo, retries)
        except _Refused:
            self.error = f"{len(todo)} refused by the bulk request"

    async def _write_round(self, todo: dict[str, _Unchecked], retries: int | None) -> None:
        """One round of :meth:`_write_batch`: written pages leave ``todo``; ``_Refused`` when some
        remain."""
        docs = await self.transport.call("reading unchecked pages", self.transport.mget, list(todo), retries=retries)
        operations: list[dict[str, Any]] = []
        for doc in docs:
            entry = todo[doc["_id"]]
            if "error" in doc:
                continue  # its shard copy failed: the next round reads it again
            status = doc["_source"][ROOT].get("status") if doc.get("found") else None
            if status is not None and (status != PENDING or self.searches.is_pending(doc)):
                # kept/duplicate: the check's lost answer had settled it, or a crawl before (final); unchecked:
                # written before; pending by a live crawler: being decided right now, with newer content.
                self._indexed(todo.pop(entry.doc_id))
                continue
            action: dict[str, dict[str, Any]]
            if status is not None:  # our own pending write (or an abandoned one): replaced, if unchanged since
                action = {"index": {"_index": self.index, "_id": entry.doc_id, "if_seq_no": doc["_seq_no"],
                                    "if_primary_term": doc["_primary_term"]}}
            else:
                action = {"create": {"_index": self.index, "_id": entry.doc_id}}
            operations += [action, {ROOT: self._unchecked_fields(entry)}]
        if not operations:
            return
        response = await self.transport.call("writing unchecked pages", self.transport.bulk, operations,
                                             retries=retries)
        for item in response["items"]:
            (result,) = item.values()
            if 200 <= int(result.get("status", 500)) < 300:
                self._indexed(todo.pop(result["_id"]))
        if todo:
            raise _Refused

    def _unchecked_fields(self, entry: _Unchecked) -> dict[str, Any]:
        """The ``neardup`` object of an unchecked page: no ``seq``, as it took no part in the write order."""
        return {
            "key": entry.key, "tag": self.searches.tag,
            **stored_fields(entry.stored, positions=not self.searches.bands),
            "fingerprint": fingerprint_hex(entry.fingerprint), "empty": False, "status": UNCHECKED,
            "group": entry.doc_id,
        }

    def _indexed(self, entry: _Unchecked) -> None:
        self.pages.pop(entry.doc_id, None)
        self.unchecked_indexed += 1

    def report(self) -> None:
        """Fill ``close_stats``; warn when pages passed through unchecked are not in the index."""
        unindexed = len(self.pages) + self.unchecked_overflow
        if not (unindexed or self.unchecked_indexed):
            return
        self.close_stats = {"unchecked_indexed": self.unchecked_indexed, "unchecked_unindexed": unindexed}
        if self.unchecked_overflow:
            self.close_stats["unchecked_overflow"] = self.unchecked_overflow
        if unindexed:
            why = self.error or "never attempted"
            if self.unchecked_overflow:
                why += f"; {self.unchecked_overflow} over the limit of {self.max_unchecked} remembered"
            logger.warning(
                "%d page(s) passed through unchecked could not be written to %s (%s): group discovery (neardup es "
                "groups) will not see them; their items are marked unchecked", unindexed, self.index, why,
            )
        else:
            logger.debug("wrote the %d page(s) passed through unchecked to %s (status 'unchecked')",
                         self.unchecked_indexed, self.index)
