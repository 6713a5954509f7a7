"""The order of a fleet's batches: the sequencer index ``<index>-order``.

Design notes: docs/architecture.md#es_integrationbackendsequencer
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from elasticsearch import ApiError, AuthorizationException, BadRequestError, ConflictError, NotFoundError

from ..mapping import ALREADY_EXISTS, F_SEQ, REPLICA_SETTINGS, error_type
from ..retry import ShardsUnavailable
from .transport import _POLL_FIRST, _POLL_MAX

if TYPE_CHECKING:
    from elasticsearch import AsyncElasticsearch

#: One logger for the package, under the name it had as one module: log filters and tests select it.
logger = logging.getLogger("es_integration.backend")

#: Places of one batch's written pages in the order (a batch writes at most ``_MAX_BATCH`` = 256 pages).
SPAN = 1024
#: The order of a batch whose marker is not written yet: after every batch that holds one.
LATER = 1 << 62
#: Seconds for an index another process has just created to appear on the node a request reaches.
_APPEARS_WITHIN = 10.0


def sequencer_index(index: str) -> str:
    """The sequencer index of the backend's index ``index``."""
    return f"{index}-order"


class Sequencer:
    """Markers in ``<index>-order`` (module doc): :meth:`acquire` a batch's place, :meth:`wait` for every
    earlier marker, :meth:`orders` of other batches' writer tokens."""

    def __init__(self, client: AsyncElasticsearch, index: str, *, pending_timeout: float) -> None:
        self.index = sequencer_index(index)
        self.data_index = index
        self.pending_timeout = pending_timeout
        self.base = 0
        self._es = client
        #: whether checkpoints can be read (the ``monitor`` privilege); without, no wait (a warning once)
        self.checkpoints = True

    async def open(self) -> None:
        """Create the sequencer index (one shard, no fields; ``_meta.base``) unless it exists; read ``base``."""
        if not await self._es.indices.exists(index=self.index):
            base = await self._largest_seq() + 1
            try:
                await self._es.indices.create(
                    index=self.index,
                    settings={"number_of_shards": 1, **REPLICA_SETTINGS},
                    mappings={"dynamic": False, "_source": {"enabled": False}, "_meta": {"base": base}},
                )
                logger.debug("created the sequencer index %s (base %d)", self.index, base)
            except BadRequestError as exc:
                if error_type(exc) != ALREADY_EXISTS:
                    raise
        meta = await self._meta()
        self.base = int(meta.get("base", 0))

    async def _meta(self) -> dict[str, Any]:
        """The sequencer's ``_meta``. Another process may have created the index a moment ago: the node this
        request reaches may not have applied that cluster state yet (HTTP 404 for a few ms), so wait a little."""
        delay = _POLL_FIRST
        deadline = time.monotonic() + _APPEARS_WITHIN
        while True:
            try:
                mapping = await self._es.indices.get_mapping(index=self.index)
                meta: dict[str, Any] = next(iter(mapping.body.values()))["mappings"].get("_meta", {})
                return meta
            except NotFoundError:
                if time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, _POLL_MAX)

    async def _largest_seq(self) -> int:
        try:
            response = await self._es.search(index=self.data_index, size=0, aggs={"seq": {"max": {"field": F_SEQ}}})
        except ApiError as exc:
            if exc.meta.status == 404:
                return 0
            raise
        value = response["aggregations"]["seq"]["value"]
        return int(value) if value is not None else 0

    async def acquire(self, token: str) -> int:
        """The marker ``_seq_no`` of the batch written under ``token`` (written now, or read back when an
        earlier attempt of this call landed)."""
        try:
            answer = await self._es.create(index=self.index, id=token, document={})
            return int(answer["_seq_no"])
        except ConflictError:
            doc = await self._es.get(index=self.index, id=token, realtime=True)
            return int(doc["_seq_no"])

    def order(self, seq: int, place: int) -> int:
        """The order of the ``place``-th written page of the batch holding marker ``seq``."""
        return self.base + seq * SPAN + place

    async def wait(self, seq: int) -> None:
        """Wait until every marker up to ``seq`` is applied on every started copy (at most ``pending_timeout``)."""
        delay = _POLL_FIRST
        deadline = time.monotonic() + self.pending_timeout
        while self.checkpoints and time.monotonic() < deadline:
            try:
                stats = await self._es.indices.stats(index=self.index, metric="docs", level="shards")
            except AuthorizationException:
                logger.warning(
                    "no 'monitor' privilege on %s: cannot wait for the write checkpoint; concurrent crawlers "
                    "are then ordered slightly less strictly", self.index,
                )
                self.checkpoints = False
                break
            if local_checkpoint(stats.body) >= seq:
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, _POLL_MAX)

    async def orders(self, tokens: set[str]) -> dict[str, int]:
        """The order of each batch written under one of ``tokens``, after all its pages (``place`` ``SPAN -
        1``); :data:`LATER` for a batch with no marker yet. Call after :meth:`wait` (module doc)."""
        if not tokens:
            return {}
        response = await self._es.mget(index=self.index, ids=sorted(tokens), realtime=True)
        out: dict[str, int] = {}
        for doc in response["docs"]:
            if "error" in doc:
                raise ShardsUnavailable(f"reading the marker {doc['_id']} failed")
            out[doc["_id"]] = self.order(int(doc["_seq_no"]), SPAN - 1) if doc.get("found") else LATER
        return out


def local_checkpoint(stats: dict[str, Any]) -> int:
    """The lowest local checkpoint among the started copies of a single-shard index, from index stats at shard
    level; -1 while no primary is started (e.g. during a failover). A read may run on any started copy."""
    checkpoints: list[int] = []
    primary = False
    for index_stats in stats["indices"].values():
        for copies in index_stats["shards"].values():
            for copy in copies:
                if copy["routing"]["state"] != "STARTED":
                    continue
                primary = primary or bool(copy["routing"]["primary"])
                checkpoints.append(int(copy["seq_no"]["local_checkpoint"]))
    return min(checkpoints) if primary else -1
