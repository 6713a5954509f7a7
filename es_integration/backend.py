"""The Elasticsearch backend of the Scrapy pipeline: check-and-insert against an index shared by many crawlers.

Semantics
---------
Those of the embedded :class:`~scrapy_neardup.core.index.SketchIndex`: a page is a near-duplicate when it shares
``>= t`` of ``k`` signature positions with a *kept* page; the answer is the best kept match (exact duplicates
first, then most shared positions, then the earliest kept), else the page is kept under its key. Both compare
the low 16 bits of each position (see :mod:`es_integration.mapping`), so the counts are the same too.

Documents
---------
One document per checked page that was not answered at once (step a below), ``_id`` a random UUID, holding
only the ``neardup`` object: ``key`` (the page key, returned as ``Match.key``), ``positions``,
``fingerprint``, ``tag``, ``status`` (``pending`` -> ``kept`` | ``duplicate``; or ``unchecked``, below), ``seq``
(the write order), ``group`` and ``duplicate_of``/``shared`` for duplicates. The index has **one primary shard**
(created so when missing; refused otherwise), so ``_seq_no`` totally orders the writes.

Protocol (one page P)
---------------------
Within a process, calls are serialized by an ``asyncio.Lock``. Across processes:

a. Search P's candidates among documents with status ``kept`` or ``pending`` (a status seen in search may be
   stale; ``pending`` ones are re-read with a real-time multi-get, polled until they settle). If any is
   ``kept``, return the best one: P is a duplicate and nothing is written.
b. Write P as ``pending`` (``op_type=create``); its ``_seq_no`` is P's position in the write order.
c. Wait until the local checkpoint of every started copy of the shard (primary and replicas) reaches P's
   ``_seq_no`` (every earlier write is then applied wherever the search may run), refresh, and search again,
   now considering only candidates written *before* P (``seq < P's``); settle
   ``pending`` ones as in (a). If any is ``kept``, P is a duplicate of the best; else P is kept.
d. Write P's final status (``kept``, or ``duplicate`` with ``duplicate_of``) and ``seq``.

A pending page's outcome depends only on pages written before it, so waiting always ends (the earliest pending
page waits for nobody).

Guarantees
----------
* **One process** (any number of concurrent coroutines): identical answers to ``SketchIndex`` on the same
  stream.
* **Several processes**, while every process finishes its checks:

  - every duplicate names a page whose status is ``kept``, and ``kept`` is final;
  - no two kept pages share ``>= t`` positions (of two near-duplicates written in steps b, the later one sees
    the earlier one, settled, in step c);
  - the kept pages and the answers are those of the embedded index run over the pages in write order
    (``_seq_no``), except that a page answered in step (a) names the best kept match visible at that moment
    (a better one may still be pending): it is a duplicate either way. In particular, of concurrent
    near-duplicates of one page exactly one is kept, the earliest writer, and every other names it.
* **Not guaranteed** when a process dies (or stalls longer than ``pending_timeout``) between steps b and d:
  its page stays ``pending``; others wait up to ``pending_timeout`` (default 30 s) for it, then ignore it
  (a warning is logged). If that process was only slow and later keeps its page, two near-duplicates may both
  be kept. Also weaker without the ``monitor`` privilege on the index (no checkpoint wait; a warning is logged
  once): a write that is still in flight when a later page refreshes may be missed, in a window of
  microseconds.

Replicas and failover
---------------------
With replicas (``auto_expand_replicas: 0-1`` gives one on a cluster of two or more nodes) a search or a
multi-get may run on any started copy; hence the wait in (c) covers every copy. Writes are acknowledged once
every in-sync copy has them, so a replica promoted after its primary dies holds every acknowledged write, with
its ``_seq_no`` (the new primary continues the sequence). A request in flight when the primary died is retried
by Elasticsearch on the new primary, or fails and is retried here (on another node when ``url`` lists several);
a ``create`` that had landed answers "conflict" and its ``_seq_no`` is read back. Answers that cover no copy of
the shard (a search or refresh with failed shards, a multi-get item with an error) count as retryable failures
or as "still pending", never as "no such page".

Errors
------
Requests failing with a connection error, a timeout, or HTTP 429/502/503/504 are retried up to ``retries``
times with exponential backoff (0.1 s, 0.2 s, ...; the policy of :mod:`es_integration.retry`); then, or at
once for any other failure (wrong credentials, missing privileges, bad index),
:class:`~es_integration.client.EsError` (a :class:`~scrapy_neardup.core.backend.BackendError`) is raised with
a one-line message holding no secret. ``errors`` counts failed requests, ``retried`` the retries
(``neardup/backend_retries`` in the crawl's stats).

Unchecked pages
---------------
A page whose check raised is passed through by the pipeline without a decision ("unchecked"). So that a later
``neardup es groups`` pass still covers it, the backend remembers its key and stored signature (about 0.6 KB
with a 50-character URL; at most ``max_unchecked`` pages, 100,000 by default, beyond which pages are only
counted in ``unchecked_overflow``) and writes it with status ``unchecked`` once Elasticsearch answers again:
one bulk batch after each later successful check (one attempt; after a failure, none for ``_UNCHECKED_PAUSE``
= 5 s, so a flapping node does not slow every check), and all that remain in :meth:`close` (with the usual
retries). A page is written under the ``_id`` its check used: a document that check left ``pending`` is
overwritten (conditionally on its ``_seq_no``), so other crawlers stop waiting for it; one the check did settle
(``kept``/``duplicate``, its answer lost) stays as it is. ``close_stats`` then holds ``unchecked_indexed`` and
``unchecked_unindexed`` (plus ``unchecked_overflow``), and a warning gives the count that could not be written.

``unchecked`` documents are never candidates of a check (only ``kept`` and ``pending`` are): a later drop always
names a page that was checked and kept, never one whose own status is unknown (it may itself duplicate a kept
page). The price: a near-duplicate of an unchecked page, checked later, is kept when its group has no kept page,
so the crawl's output can hold both; nothing is lost, and group discovery puts them in one group, whose
representative under the default rule (``seq``; unchecked documents have none) is a checked page.

Cost per page: a duplicate answered in (a) costs one search (plus a multi-get when a candidate looks
pending); a kept page costs a search, a create, a stats call, a refresh, a search and an index request.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from scrapy_neardup.core.backend import Backend, BackendError
from scrapy_neardup.core.index import Match, best_first
from scrapy_neardup.core.params import check_min_shared
from scrapy_neardup.core.sketch import IncompatibleSketches, Sketch
from scrapy_neardup.core.stored import StoredSignature, band_layout, decode_many, shared_counts

from .candidates import band_query, candidate_query
from .client import ConnectionSettings, EsError, connect_async, describe_error
from .mapping import (
    DUPLICATE,
    F_FINGERPRINT,
    F_KEY,
    F_POSITIONS,
    F_SEQ,
    F_SIG,
    F_STATUS,
    F_TAG,
    KEPT,
    PENDING,
    ROOT,
    UNCHECKED,
    ensure_index_async,
    fingerprint_hex,
    stored_fields,
)
from .names import validate_index_name
from .retry import ShardsUnavailable, is_retryable, retrying
from .settings import ElasticsearchSettings

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from elasticsearch import AsyncElasticsearch
    from tenacity import RetryCallState

    from scrapy_neardup.core.config import SettingsLike
    from scrapy_neardup.core.params import SketchParams

__all__ = ["ElasticsearchBackend"]

logger = logging.getLogger(__name__)

_CANDIDATES = 1000
_POLL_FIRST, _POLL_MAX = 0.002, 0.1
#: Unchecked pages per bulk request (and per attempt after a successful check).
_UNCHECKED_BATCH = 500
#: Seconds without attempts to write unchecked pages after one failed during the crawl.
_UNCHECKED_PAUSE = 5.0


@dataclass(frozen=True, slots=True)
class _Candidate:
    id: str
    key: str
    shared: int
    exact: bool
    order: int


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


class _Refused(Exception):
    """Pages a bulk request refused (a conflict, or HTTP 429 inside the response): another round reads them."""


class ElasticsearchBackend(Backend):
    """A :class:`~scrapy_neardup.core.backend.Backend` storing kept sketches in an Elasticsearch index.

    Args:
        url: ``http(s)://host:port``.
        index: index of kept sketches (created with one primary shard when missing).
        num_perm: ``k``, signature positions.
        min_shared: ``t``: a page shares ``>= t`` of ``k`` positions with a kept page to be its near-duplicate;
            pages of resemblance ``r`` are flagged with probability ``P[Binomial(k, r) >= t]``.
        tag: sketch parameter tag; only sketches with this tag are compared (and accepted).
        api_key, username, password, ca_certs: credentials and CA (see :mod:`es_integration.client`).
        request_timeout: seconds per request.
    """

    #: attempts after the first for a retryable failure
    retries = 3
    #: first backoff in seconds (doubled per retry)
    backoff = 0.1
    #: seconds to wait for a page another process left ``pending`` before ignoring it
    pending_timeout = 30.0
    #: pages whose check failed remembered for writing as ``unchecked``; beyond, only counted (~0.6 KB each)
    max_unchecked = 100_000
    #: candidates from the band query (set on open; see :meth:`_bands_usable`)
    _bands = False

    def __init__(
        self,
        *,
        url: str,
        index: str,
        num_perm: int,
        min_shared: int,
        tag: str,
        api_key: str | None = None,
        username: str | None = None,
        password: str | None = None,
        ca_certs: str | None = None,
        request_timeout: float = 10.0,
    ) -> None:
        check_min_shared(min_shared, num_perm)
        self.index = validate_index_name(index)
        self.num_perm = num_perm
        self.min_shared = min_shared
        self.tag = tag
        self.settings = ConnectionSettings.create(
            url, api_key=api_key, username=username, password=password, ca_certs=ca_certs,
            request_timeout=request_timeout,
        )
        self.errors = 0
        self.retried = 0
        self._client: AsyncElasticsearch | None = None
        self._lock: asyncio.Lock | None = None
        self._abandoned: set[str] = set()
        self._checkpoints = True
        self._unchecked: dict[str, _Unchecked] = {}
        self._unchecked_retry_at = 0.0
        self._unchecked_error = ""
        #: unchecked pages written to the index, and those beyond ``max_unchecked`` (never written)
        self.unchecked_indexed = 0
        self.unchecked_overflow = 0
        #: what became of the unchecked pages, filled by :meth:`close` (the pipeline adds it to its stats)
        self.close_stats: dict[str, int] = {}
        #: appended to the message of a failed :meth:`open`: what to check (set by :meth:`from_settings`)
        self.open_hint = ""

    @classmethod
    def from_settings(cls, settings: SettingsLike, params: SketchParams) -> ElasticsearchBackend:
        """The backend the ``NEARDUP_ES_*`` settings describe (see :mod:`es_integration.settings`).

        Raises:
            NearDupSettingsError: a ``NEARDUP_ES_*`` setting is missing or wrong (the message names it).
        """
        es = ElasticsearchSettings.from_settings(settings)
        backend = cls(
            url=es.url, index=es.index, num_perm=params.num_perm, min_shared=params.min_shared, tag=params.tag,
            api_key=es.api_key, username=es.username, password=es.password, ca_certs=es.ca_certs,
            request_timeout=es.request_timeout,
        )
        backend.open_hint = " (check NEARDUP_ES_URL and that the node is up)"
        return backend

    def stats(self) -> Mapping[str, int]:
        """``backend_retries``, and what :meth:`close` did with the pages passed through unchecked."""
        counts = {"backend_retries": self.retried, **self.close_stats}
        return {name: count for name, count in counts.items() if count}

    def __repr__(self) -> str:
        return f"ElasticsearchBackend(url={self.settings.url!r}, index={self.index!r}, tag={self.tag!r})"

    # -- lifecycle -------------------------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, and create the index (one primary shard) or check the existing one.

        Raises:
            EsError: unreachable, wrong credentials, TLS failure, or an index with several primary shards.
        """
        self._lock = asyncio.Lock()
        try:
            self._client = await self._call(
                "opening the index",
                functools.partial(connect_async, self.settings, max_retries=0, retry_on_timeout=False),
            )
            await self._call("opening the index", self._ensure_index)
        except EsError as exc:
            await self.close()
            # Name what to fix (the message already names the URL, without credentials).
            raise EsError(f"{exc}{self.open_hint}") from None
        except BaseException:
            await self.close()
            raise
        logger.debug("%r open", self)

    async def close(self) -> None:
        """Write the remembered unchecked pages (see the module doc), report them, release the connection pool."""
        try:
            if self._unchecked and self._client is not None and self._lock is not None:
                async with self._lock:
                    await self._write_unchecked_quietly(limit=None, retries=None)
        finally:
            self._report_unchecked()
            client, self._client = self._client, None
            if client is not None:
                await client.close()

    async def _ensure_index(self) -> None:
        es = self._es
        await ensure_index_async(es, self.index, shards=1, request_timeout=self.settings.request_timeout)
        settings = await es.indices.get_settings(index=self.index, name="index.number_of_shards")
        for name, body in settings.items():
            shards = int(body["settings"]["index"]["number_of_shards"])
            if shards != 1:
                raise EsError(
                    f"index {name} has {shards} primary shards; the crawler backend needs an index with one "
                    "(it orders concurrent writes by _seq_no): use another NEARDUP_ES_INDEX"
                )
        self._bands = await self._bands_usable()

    async def _count_settling(self, query: dict[str, Any]) -> int | None:
        """Count ``query``'s documents; an index another process has just created may have no active shard
        yet (HTTP 503): wait for it a little (such waits are not request failures). ``None``: still none."""
        from elasticsearch import ApiError

        delay = _POLL_FIRST
        deadline = time.monotonic() + 5.0
        while True:
            try:
                return int((await self._es.count(index=self.index, query=query))["count"])
            except ApiError as exc:
                if exc.meta.status != 503:
                    raise
                if time.monotonic() >= deadline:
                    return None
            await asyncio.sleep(delay)
            delay = min(delay * 2, _POLL_MAX)

    async def _bands_usable(self) -> bool:
        """Whether candidates can come from the band query: ``t >= t0`` (the stored band layout's), and no kept
        or pending document lacks the band fields (written by an older version: then positions are used for
        the whole run, so that such documents stay candidates; ``neardup es backfill`` adds the fields)."""
        if self.min_shared < band_layout(self.num_perm):
            return False
        query = {"bool": {
            "filter": [{"term": {F_TAG: self.tag}}, {"terms": {F_STATUS: [KEPT, PENDING]}},
                       {"exists": {"field": F_POSITIONS}}],
            "must_not": [{"exists": {"field": F_SIG}}],
        }}
        old = await self._count_settling(query)
        if old is None:
            logger.warning("cannot count the pages of %s without band fields yet; using the position query", self.index)
            return False
        if old:
            logger.warning(
                "%d kept pages of %s have no band fields (indexed by an older version): candidates come from the "
                "slower position query; `neardup es backfill` adds the fields", old, self.index,
            )
        return old == 0

    # -- check and add ---------------------------------------------------------------------------------------

    async def check_and_add(self, key: str, sketch: Sketch) -> Match | None:
        """Return the best kept match of ``sketch``, or keep it under ``key`` and return None (see module doc).

        Raises:
            IncompatibleSketches: the sketch's tag is not this backend's.
            ValueError: an empty sketch, or a signature of the wrong length.
            EsError: Elasticsearch failed after bounded retries.
        """
        if sketch.tag != self.tag:
            raise IncompatibleSketches(f"backend holds {self.tag!r} sketches, got one made with {sketch.tag!r}")
        if sketch.empty:
            raise ValueError("an empty sketch (text without shingles) cannot be indexed")
        if sketch.num_perm != self.num_perm:
            raise ValueError(f"expected a signature of {self.num_perm} positions, got {sketch.num_perm}")
        if self._lock is None or self._client is None:
            raise RuntimeError("ElasticsearchBackend.check_and_add called before open()")
        doc_id = uuid.uuid4().hex
        async with self._lock:
            try:
                match = await self._check_and_add(key, sketch, doc_id)
            except Exception as exc:
                # The pipeline passes the page through unchecked: remember it for writing later. Its document
                # may now stay pending (written, never settled): this process knows it will never settle, so
                # it does not wait pending_timeout for it (other processes do, until it is written unchecked).
                self._abandoned.add(doc_id)
                self._remember(key, sketch, doc_id)
                if isinstance(exc, BackendError):
                    raise
                # An answer of an unexpected shape: no decision either, which the pipeline must be told of.
                raise EsError(f"checking {key!r} in {self.index}: {type(exc).__name__}: {exc}") from exc
            if self._unchecked and time.monotonic() >= self._unchecked_retry_at:
                # The node answers again: write a batch of the pages it could not check before.
                await self._write_unchecked_quietly(limit=_UNCHECKED_BATCH, retries=0)
            return match

    async def _check_and_add(self, key: str, sketch: Sketch, doc_id: str) -> Match | None:
        stored = StoredSignature.from_sketch(sketch)
        fingerprint = fingerprint_hex(sketch.fingerprint)
        best = await self._best_kept(stored, fingerprint, before=None, exclude=None)  # (a)
        if best is not None:
            return self._match(best)
        fields = {
            "key": key, "tag": self.tag, **stored_fields(stored), "fingerprint": fingerprint, "empty": False,
            "status": PENDING, "group": doc_id,
        }
        seq = await self._call("writing a pending page", self._create, doc_id, fields)  # (b)
        await self._call("waiting for earlier writes", self._settle_writes, seq)  # (c)
        best = await self._best_kept(stored, fingerprint, before=seq, exclude=doc_id)
        fields["seq"] = seq
        if best is None:
            fields["status"] = KEPT
        else:
            fields.update(status=DUPLICATE, group=best.id, duplicate_of=best.key, shared=best.shared)
        await self._call("writing the decision", self._write, doc_id, fields)  # (d)
        return None if best is None else self._match(best)

    def _match(self, candidate: _Candidate) -> Match:
        return Match(
            key=candidate.key, shared=candidate.shared, resemblance=candidate.shared / self.num_perm,
            exact=candidate.exact,
        )

    async def _best_kept(
        self, stored: StoredSignature, fingerprint: str, *, before: int | None, exclude: str | None
    ) -> _Candidate | None:
        """The best candidate whose status is ``kept``, after settling the ``pending`` ones; only candidates
        written before ``before`` (a ``_seq_no``) when given."""
        hits = await self._call("searching candidates", self._search, stored, exclude)
        kept: list[_Candidate] = []
        pending: dict[str, int] = {}  # id -> shared
        for hit, shared in hits:
            source = hit["_source"][ROOT]
            order = int(source.get("seq", hit["_seq_no"]))
            if before is not None and order >= before:
                continue
            if source.get("status") == KEPT:
                kept.append(self._candidate(hit["_id"], source, shared, fingerprint, order))
            elif hit["_id"] not in self._abandoned:
                pending[hit["_id"]] = shared
        if pending:
            kept.extend(await self._settle(pending, fingerprint, before))
        if not kept:
            return None
        return kept[int(best_first([c.exact for c in kept], [c.shared for c in kept], [c.order for c in kept])[0])]

    @staticmethod
    def _candidate(doc_id: str, source: dict[str, Any], shared: int, fingerprint: str, order: int) -> _Candidate:
        return _Candidate(
            id=doc_id, key=str(source.get("key", doc_id)), shared=shared,
            exact=source.get("fingerprint") == fingerprint, order=order,
        )

    async def _settle(self, pending: dict[str, int], fingerprint: str, before: int | None) -> list[_Candidate]:
        """Poll pending candidates (real-time multi-get) until each is kept or duplicate; return the kept."""
        kept: list[_Candidate] = []
        deadline = time.monotonic() + self.pending_timeout
        delay = _POLL_FIRST
        while pending:
            docs = await self._call("reading pending pages", self._mget, list(pending))
            for doc in docs:
                doc_id = doc["_id"]
                if "error" in doc:  # its shard copy failed (e.g. a failover): still pending for us
                    continue
                if not doc.get("found"):
                    pending.pop(doc_id)
                    continue
                source = doc["_source"][ROOT]
                status = source.get("status")
                if status == PENDING:
                    continue
                shared = pending.pop(doc_id)
                order = int(source.get("seq", doc["_seq_no"]))
                if status == KEPT and (before is None or order < before):
                    kept.append(self._candidate(doc_id, source, shared, fingerprint, order))
            if not pending:
                break
            if time.monotonic() >= deadline:
                logger.warning(
                    "ignoring %d page(s) left pending for over %.0fs in %s (a crawler stopped mid-check?)",
                    len(pending), self.pending_timeout, self.index,
                )
                self._abandoned.update(pending)
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, _POLL_MAX)
        return kept

    # -- unchecked pages (see the module doc) ------------------------------------------------------------------

    def _remember(self, key: str, sketch: Sketch, doc_id: str) -> None:
        """Hold a page whose check failed for :meth:`_write_unchecked`; count it when over ``max_unchecked``."""
        if len(self._unchecked) >= self.max_unchecked:
            self.unchecked_overflow += 1
            if self.unchecked_overflow == 1:
                logger.warning(
                    "over %d pages could not be checked against %s; later ones are passed through without "
                    "being remembered for the index (counted in neardup/unchecked_overflow)",
                    self.max_unchecked, self.index,
                )
            return
        self._unchecked[doc_id] = _Unchecked(key, StoredSignature.from_sketch(sketch), sketch.fingerprint, doc_id)

    async def _write_unchecked_quietly(self, *, limit: int | None, retries: int | None) -> None:
        """:meth:`_write_unchecked`, keeping what cannot be written for later (and pausing further attempts)
        instead of failing: a successful check must not fail because an older page still cannot be written."""
        try:
            await self._write_unchecked(limit=limit, retries=retries)
        except EsError as exc:
            self._unchecked_error = str(exc)
            self._unchecked_retry_at = time.monotonic() + _UNCHECKED_PAUSE
            logger.debug("could not write %d unchecked page(s) yet: %s", len(self._unchecked), exc)

    async def _write_unchecked(self, *, limit: int | None, retries: int | None) -> None:
        """Write remembered pages (``limit`` at most; ``None``: all) as ``unchecked``, in bulk batches.

        ``retries`` bounds the retries of each request and the rounds for pages a bulk refused (``None``: the
        usual ``retries``). Pages not written stay remembered.

        Raises:
            EsError: a request failed after its retries.
        """
        entries = list(itertools.islice(self._unchecked.values(), limit))
        for start in range(0, len(entries), _UNCHECKED_BATCH):
            await self._write_unchecked_batch(entries[start : start + _UNCHECKED_BATCH], retries)

    async def _write_unchecked_batch(self, batch: list[_Unchecked], retries: int | None) -> None:
        """Read what each page's ``_id`` holds now, then create or conditionally overwrite it (module doc).

        A conflict (the failed check's own request landing late) or a refusal inside the bulk response (HTTP 429)
        sends the page to the next round, which reads it again.
        """
        todo = {entry.doc_id: entry for entry in batch}
        try:
            async for attempt in retrying(self.retries if retries is None else retries, self.backoff, when=_Refused):
                with attempt:
                    await self._write_unchecked_round(todo, retries)
        except _Refused:
            self._unchecked_error = f"{len(todo)} refused by the bulk request"

    async def _write_unchecked_round(self, todo: dict[str, _Unchecked], retries: int | None) -> None:
        """One round of :meth:`_write_unchecked_batch`: written pages leave ``todo``; ``_Refused`` when some
        remain."""
        docs = await self._call("reading unchecked pages", self._mget, list(todo), retries=retries)
        operations: list[dict[str, Any]] = []
        for doc in docs:
            entry = todo[doc["_id"]]
            if doc.get("found") and doc["_source"][ROOT].get("status") != PENDING:
                # kept/duplicate: the check's lost answer had settled it (final); unchecked: written before.
                self._indexed(todo.pop(entry.doc_id))
                continue
            if doc.get("found"):
                action = {"index": {"_index": self.index, "_id": entry.doc_id, "if_seq_no": doc["_seq_no"],
                                    "if_primary_term": doc["_primary_term"]}}
            else:
                action = {"create": {"_index": self.index, "_id": entry.doc_id}}
            operations += [action, {ROOT: self._unchecked_fields(entry)}]
        if not operations:
            return
        response = await self._call("writing unchecked pages", self._bulk, operations, retries=retries)
        for item in response["items"]:
            (result,) = item.values()
            if 200 <= int(result.get("status", 500)) < 300:
                self._indexed(todo.pop(result["_id"]))
        if todo:
            raise _Refused

    def _unchecked_fields(self, entry: _Unchecked) -> dict[str, Any]:
        """The ``neardup`` object of an unchecked page: no ``seq``, as it took no part in the write order."""
        return {
            "key": entry.key, "tag": self.tag, **stored_fields(entry.stored),
            "fingerprint": fingerprint_hex(entry.fingerprint), "empty": False, "status": UNCHECKED,
            "group": entry.doc_id,
        }

    def _indexed(self, entry: _Unchecked) -> None:
        self._unchecked.pop(entry.doc_id, None)
        self.unchecked_indexed += 1

    def _report_unchecked(self) -> None:
        """Fill ``close_stats``; warn when pages passed through unchecked are not in the index."""
        unindexed = len(self._unchecked) + self.unchecked_overflow
        if not (unindexed or self.unchecked_indexed):
            return
        self.close_stats = {"unchecked_indexed": self.unchecked_indexed, "unchecked_unindexed": unindexed}
        if self.unchecked_overflow:
            self.close_stats["unchecked_overflow"] = self.unchecked_overflow
        if unindexed:
            why = self._unchecked_error or "never attempted"
            if self.unchecked_overflow:
                why += f"; {self.unchecked_overflow} over the limit of {self.max_unchecked} remembered"
            logger.warning(
                "%d page(s) passed through unchecked could not be written to %s (%s): group discovery (neardup es "
                "groups) will not see them; their items are marked unchecked", unindexed, self.index, why,
            )
        else:
            logger.debug("wrote the %d page(s) passed through unchecked to %s (status 'unchecked')",
                         self.unchecked_indexed, self.index)

    # -- requests --------------------------------------------------------------------------------------------

    @property
    def _es(self) -> AsyncElasticsearch:
        if self._client is None:
            raise RuntimeError("ElasticsearchBackend used before open() or after close()")
        return self._client

    async def _search(self, stored: StoredSignature, exclude: str | None) -> list[tuple[dict[str, Any], int]]:
        """Candidates (kept or pending, sharing ``>= t`` positions) with their shared positions.

        The band query (verified on the hits' compact signatures) when :attr:`_bands` allows it; the position
        query otherwise, or when the band query has :data:`_CANDIDATES` raw hits or more (the position query
        ranks server-side, so the ``_CANDIDATES`` compared are the ones sharing most positions)."""
        statuses, exclude_ids = (KEPT, PENDING), [exclude] if exclude else []
        source = {"includes": [F_KEY, F_STATUS, F_SEQ, F_FINGERPRINT]}
        if self._bands:
            response = await self._es.search(
                index=self.index, query=band_query(stored, statuses=statuses, exclude_ids=exclude_ids),
                size=_CANDIDATES, seq_no_primary_term=True, source=source, docvalue_fields=[{"field": F_SIG}],
                track_total_hits=False,
            )
            raw = response["hits"]["hits"]
            if len(raw) < _CANDIDATES:
                sigs, valid = decode_many([(h.get("fields", {}).get(F_SIG) or [None])[0] for h in raw], self.num_perm)
                shared = shared_counts(sigs, stored.values)
                keep = np.flatnonzero(valid & (shared >= self.min_shared)).tolist()
                return [(raw[i], int(shared[i])) for i in keep]
        query = candidate_query(stored.tokens(), self.min_shared, self.tag, statuses=statuses, exclude_ids=exclude_ids)
        response = await self._es.search(
            index=self.index, query=query, size=_CANDIDATES, seq_no_primary_term=True, source=source,
            track_total_hits=False,
        )
        shards = response["_shards"]
        if shards["successful"] < shards["total"]:
            raise ShardsUnavailable(f"the search reached {shards['successful']} of {shards['total']} shard(s)")
        hits: list[dict[str, Any]] = response["hits"]["hits"]
        if len(hits) >= _CANDIDATES:
            logger.warning("a page has %d or more kept candidates in %s; only those were compared", len(hits),
                           self.index)
        return [(hit, round(hit["_score"])) for hit in hits]

    async def _bulk(self, operations: list[dict[str, Any]]) -> dict[str, Any]:
        response = await self._es.bulk(operations=operations)
        body: dict[str, Any] = response.body
        return body

    async def _mget(self, ids: list[str]) -> list[dict[str, Any]]:
        response = await self._es.mget(
            index=self.index, ids=ids, realtime=True, source=[F_KEY, F_STATUS, F_SEQ, F_FINGERPRINT]
        )
        docs: list[dict[str, Any]] = response["docs"]
        return docs

    async def _create(self, doc_id: str, fields: dict[str, Any]) -> int:
        """Write the pending document; its ``_seq_no`` (also after a retry whose first attempt succeeded)."""
        from elasticsearch import ConflictError

        try:
            response = await self._es.create(index=self.index, id=doc_id, document={ROOT: fields})
            return int(response["_seq_no"])
        except ConflictError:
            # An earlier attempt of this very write succeeded (the id is a fresh UUID).
            doc = await self._es.get(index=self.index, id=doc_id, source=False)
            return int(doc["_seq_no"])

    async def _settle_writes(self, seq: int) -> None:
        """Wait until every write up to ``seq`` is applied on every started copy, then refresh (module doc)."""
        from elasticsearch import AuthorizationException

        delay = _POLL_FIRST
        deadline = time.monotonic() + self.pending_timeout
        while self._checkpoints and time.monotonic() < deadline:
            try:
                stats = await self._es.indices.stats(index=self.index, metric="docs", level="shards")
            except AuthorizationException:
                logger.warning(
                    "no 'monitor' privilege on %s: cannot wait for the write checkpoint; concurrent crawlers "
                    "are then ordered slightly less strictly", self.index,
                )
                self._checkpoints = False
                break
            if _local_checkpoint(stats.body) >= seq:
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, _POLL_MAX)
        response = await self._es.indices.refresh(index=self.index)
        if response["_shards"].get("failed", 0):
            raise ShardsUnavailable(f"the refresh failed on {response['_shards']['failed']} shard copy(ies)")

    async def _write(self, doc_id: str, fields: dict[str, Any]) -> None:
        await self._es.index(index=self.index, id=doc_id, document={ROOT: fields})

    async def _call(
        self, what: str, func: Callable[..., Awaitable[Any]], *args: Any, retries: int | None = None
    ) -> Any:
        """``await func(*args)`` under the retry policy of :mod:`es_integration.retry` (``retries``, default
        the class's, with ``backoff``); failures become :class:`EsError`."""
        from elastic_transport import TransportError
        from elasticsearch import ApiError

        attempts = 0
        try:
            async for attempt in retrying(self.retries if retries is None else retries, self.backoff,
                                          on_retry=self._retrying(what)):
                with attempt:
                    attempts += 1
                    try:
                        return await func(*args)
                    except (ApiError, TransportError, ShardsUnavailable):
                        self.errors += 1
                        raise
        except (ApiError, TransportError, ShardsUnavailable) as exc:
            message = str(exc) if isinstance(exc, ShardsUnavailable) else describe_error(exc, self.settings.url)
            if not is_retryable(exc):
                raise EsError(f"{what} in {self.index}: {message}") from None
            raise EsError(f"{what} in {self.index}: {message} (after {attempts} attempts)") from None
        raise AssertionError("unreachable")

    def _retrying(self, what: str) -> Callable[[RetryCallState], None]:
        """Count a retry (``retried``, ``neardup/backend_retries``) and say why, before the backoff sleep."""

        def count(state: RetryCallState) -> None:
            self.retried += 1
            error = state.outcome.exception() if state.outcome is not None else None
            delay = state.next_action.sleep if state.next_action is not None else 0.0
            logger.debug("%s failed (%s); retrying in %.2fs", what, describe_error(error, self.settings.url)
                         if error is not None else "?", delay)

        return count


def _local_checkpoint(stats: dict[str, Any]) -> int:
    """The lowest local checkpoint among the started copies of the (single) shard, from index stats at shard
    level; -1 while no primary is started (e.g. during a failover). A search may run on any started copy."""
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
