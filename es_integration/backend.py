"""The Elasticsearch backend of the Scrapy pipeline: check-and-insert against an index shared by many crawlers.

Semantics
---------
Those of the embedded :class:`~scrapy_neardup.core.index.SketchIndex`: a page is a near-duplicate when it shares
``>= t`` of ``k`` signature positions with a *kept* page; the answer is the best kept match (exact duplicates
first, then most shared positions, then the earliest kept), else the page is kept under its key. Both compare
the low 16 bits of each position (see :mod:`es_integration.mapping`), so the counts are the same too.

Documents
---------
One document per key (``_id``: :func:`doc_id_of`, a 128-bit hash of the key), holding only the ``neardup``
object: ``key`` (the page key, returned as ``Match.key``), ``positions``, ``sig``, ``bands``, ``fingerprint``,
``tag``, ``status`` (``pending`` -> ``kept`` | ``duplicate``; or ``unchecked``, below), ``seq`` (the write
order), ``group`` and ``duplicate_of``/``shared`` for duplicates, ``writer`` (which process, and which of its
batches, wrote a pending page). The index has **one primary shard** (created so when missing; refused
otherwise), so ``_seq_no`` totally orders the writes.

Protocol (a batch of pages, distinct keys)
------------------------------------------
Within a process, calls are serialized by an ``asyncio.Lock`` (the pipeline sends the pages ready at the same
time as one call: :mod:`scrapy_neardup.crawl.batcher`). Across processes, for a batch:

a. One search for the candidates of every page (one band query on the union of their band tokens, each hit
   verified against each page; ``_search`` for one page) among documents with
   status ``kept`` or ``pending``, and one real-time multi-get of the pages' own documents (by key). Pending
   ones written by other crawlers are re-read (multi-get) until they settle. Then, in batch order: a page
   whose key is stored ``kept`` with the same fingerprint is an **unchanged revisit** (nothing written); a
   page with no stored version and a ``kept`` candidate is a **duplicate** of the best one (nothing written),
   unless it near-duplicates an earlier page of the batch that is being written; every other page (new, or a
   stored key whose content changed) is written.
b. One bulk request writes those pages as ``pending`` (``create``, or ``index`` conditional on the
   ``_seq_no`` read in (a)); the bulk's items keep their order on the one shard, so ``_seq_no`` follows the
   batch order. A page whose key another crawler wrote meanwhile (a conflict) is decided again in a next round.
c. Wait until the local checkpoint of every started copy of the shard reaches the batch's last ``_seq_no``
   (every earlier write is applied wherever the search may run), refresh once, and search again, considering
   for each page only candidates written *before* it (``seq < its own``; pending ones of other crawlers
   settled as in (a)), plus, resolved locally, the earlier pages of the batch that ended kept and the stored
   versions of later ones (as each page checked alone in turn would see them). A page whose key was stored is a
   **changed revisit** when its stored version is its best match (ties go to it) or nothing matches (its new
   content replaces the stored one), else a duplicate of the better kept page (its document becomes
   ``duplicate``: no longer a candidate, so its former copies are judged afresh). A new page is a duplicate
   of the best candidate, else kept.
d. One bulk request writes the final statuses (``kept``/``duplicate``) and ``seq``.

Why waiting ends: a pending page's outcome depends only on pages written before it, and before a process waits
for another crawler's page in (c) it writes the decisions it has already taken (those of its batch's earlier
pages). So a wait is never on a decision that is itself held back by a wait: the earliest pending page of all
waits for nobody, and is written; then the next one. (Without that write, two crawlers whose batches interleave
in the write order, ``a1 < b1 < a2 < b2``, would wait for each other: ``a2`` for ``b1``, written with ``b2``,
which waits for ``a1``, written with ``a2``; both gave up after ``pending_timeout`` and kept two near-duplicates.)
Uncontended batches pay nothing for this; a batch that waits pays one more bulk request per wait.

A batch costs about seven requests whatever its size: search, multi-get, bulk, index
stats (polled until the checkpoint is reached), refresh, search, bulk; a batch answered in (a) alone costs two.

Guarantees
----------
* **One process** (any number of concurrent coroutines, any batch sizes): identical answers to ``SketchIndex``
  on the same stream (for recrawls: the same revisit rule as the embedded store).
* **Several processes**, while every process finishes its checks:

  - every duplicate names a page whose status is ``kept`` (until a recrawl finds that page turned into a copy
    of another, and removes it);
  - no two kept pages share ``>= t`` positions (of two near-duplicates written in steps b, the later one sees
    the earlier one, settled, in step c), except a revisited page whose new content is closer to its own stored
    version than to another kept page (the revisit rule, the same in the embedded store);
  - the kept pages and the answers are those of the embedded index run over the pages in write order
    (``_seq_no``), except that a page answered in step (a) names the best kept match visible at that moment
    (a better one may still be pending): it is a duplicate either way; and a page written while another
    crawler replaces a kept page's content is compared with the content being written, not the old one. In
    particular, of concurrent near-duplicates of one page exactly one is kept, the earliest writer, and every
    other names it; of two crawlers recrawling one key at once, one writes (a changed revisit) and the other
    waits for it, then finds it unchanged.
* **Not guaranteed** when a process dies (or stalls longer than ``pending_timeout``) between steps b and d:
  its pages stay ``pending``; others wait up to ``pending_timeout`` (default 30 s) for them, then ignore them
  (a warning is logged), and a later check of the same key replaces the abandoned document. If that process
  was only slow and later keeps its page, two near-duplicates may both be kept. Also weaker without the
  ``monitor`` privilege on the index (no checkpoint wait; a warning is logged once): a write that is still in
  flight when a later page refreshes may be missed, in a window of microseconds.

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
:class:`~es_integration.client.EsError` (a :class:`~scrapy_neardup.store.backend.BackendError`) is raised with
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
retries). A page is written under its key's ``_id``: a document this process left ``pending`` (its ``writer`` token) or
abandoned is overwritten (conditionally on its ``_seq_no``), so other crawlers stop waiting for it; one that
is settled (``kept``/``duplicate``: the check's lost answer, or an earlier crawl) stays as it is, and one
another crawler is deciding right now is left to it. A batch whose requests fail passes every page through
unchecked, including when a bulk request was applied in part (its landed pending writes are ours, overwritten
later; its landed decisions are final): nothing is lost. ``close_stats`` then holds ``unchecked_indexed`` and
``unchecked_unindexed`` (plus ``unchecked_overflow``), and a warning gives the count that could not be written.
A remembered page that a later call decides (the pipeline tries it again under
``NEARDUP_ON_BACKEND_DOWN = "pause"``) is forgotten: it is no longer unchecked.

``unchecked`` documents are never candidates of a check (only ``kept`` and ``pending`` are): a later drop always
names a page that was checked and kept, never one whose own status is unknown (it may itself duplicate a kept
page). The price: a near-duplicate of an unchecked page, checked later, is kept when its group has no kept page,
so the crawl's output can hold both; nothing is lost, and group discovery puts them in one group, whose
representative under the default rule (``seq``; unchecked documents have none) is a checked page.

Cost: see "Protocol": about seven requests per batch, two for a batch answered in (a) alone (duplicates and
unchanged revisits), whatever its size; one refresh per batch that writes.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import itertools
import logging
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from scrapy_neardup.core.match import Match, best_first
from scrapy_neardup.core.params import check_min_shared
from scrapy_neardup.core.sketch import IncompatibleSketches, Sketch
from scrapy_neardup.core.stored import (
    StoredSignature,
    band_layout,
    decode_many,
    distinct_band_tokens,
    shared_counts,
)
from scrapy_neardup.errors import NearDupError
from scrapy_neardup.store.backend import Backend, BackendError, Decision

from .candidates import band_query, candidate_query
from .client import ConnectionSettings, EsError, connect_async, describe_error
from .mapping import (
    DUPLICATE,
    F_BANDS,
    F_FINGERPRINT,
    F_KEY,
    F_POSITIONS,
    F_SEQ,
    F_SIG,
    F_STATUS,
    F_TAG,
    F_WRITER,
    KEPT,
    PENDING,
    ROOT,
    UNCHECKED,
    TagMismatch,
    ensure_index_async,
    fingerprint_hex,
    require_tag_async,
    stored_fields,
)
from .names import validate_index_name
from .retry import ShardsUnavailable, is_retryable, retrying
from .settings import ElasticsearchSettings
from .templates import ensure_templates_index_async, load_template_async, save_template_async, templates_index

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from elasticsearch import AsyncElasticsearch
    from tenacity import RetryCallState

    from scrapy_neardup.core.mirrors import HostStore
    from scrapy_neardup.core.params import SketchParams
    from scrapy_neardup.core.template import HostTemplate
    from scrapy_neardup.store.config import SettingsLike

__all__ = ["ElasticsearchBackend"]

logger = logging.getLogger(__name__)

_CANDIDATES = 1000
#: Raw hits of a batch's one band query at most (beyond, one query per page).
_UNION_HITS = 10_000
#: Pages decided together at most (a longer call is decided in runs of this many).
_MAX_BATCH = 256
#: Rounds of a batch whose keys other crawlers keep writing at the same time.
_MAX_ROUNDS = 5
#: What a real-time read of a page's own document (or of a pending candidate) returns.
_OWN_SOURCE = [F_KEY, F_STATUS, F_SEQ, F_FINGERPRINT, F_SIG, F_WRITER]
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
class _Version:
    """A key's stored kept version, read before its page is decided (a recrawl)."""

    values: np.ndarray  # uint16[k]
    fingerprint: str
    order: int


@dataclass(eq=False, slots=True)
class _Page:
    """One page of a batch while it is decided (see :meth:`ElasticsearchBackend._round`)."""

    pos: int
    key: str
    stored: StoredSignature
    fingerprint: str
    doc_id: str
    #: ``(_seq_no, _primary_term)`` of the document under ``doc_id`` when (a) read one: writes are conditional
    prior: tuple[int, int] | None = None
    own: _Version | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    seq: int = -1
    conflict: bool = False
    decided: bool = False
    new_content: bool = False  # kept or revisited: later pages of the batch compare with its content
    decision: Decision | None = None

    def reset(self) -> None:
        self.prior, self.own, self.fields, self.seq = None, None, {}, -1
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
            self.own = _Version(values[0], str(source.get("fingerprint", "")), order)

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


def _order(doc: Mapping[str, Any]) -> int:
    """A document's place in the write order: its final ``seq``, or the ``_seq_no`` of its pending write."""
    source = doc.get("_source", {}).get(ROOT, {})
    return int(source.get("seq", doc.get("_seq_no", -1)))


def _search_kwargs(body: dict[str, Any]) -> dict[str, Any]:
    """A search body as elasticsearch-py keyword arguments (``_source`` is ``source``)."""
    return {("source" if name == "_source" else name): value for name, value in body.items()}


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


class ElasticsearchBackend(Backend):
    """A :class:`~scrapy_neardup.store.backend.Backend` storing kept sketches in an Elasticsearch index.

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
    #: the template index exists (checked before the first template is saved)
    _templates_ready = False

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
        #: (``_id``, ``_seq_no``) of pending documents of other crawlers no longer waited for
        self._abandoned: set[tuple[str, int | None]] = set()
        #: marks this process's pending writes (``writer``: this token and the round), see :meth:`_is_pending`
        self._writer = uuid.uuid4().hex
        self._round_no = 0
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
        backend.max_batch = es.batch_size
        return backend

    def stats(self) -> Mapping[str, int]:
        """``backend_retries``, and what :meth:`close` did with the pages passed through unchecked."""
        counts = {"backend_retries": self.retried, **self.close_stats}
        return {name: count for name, count in counts.items() if count}

    def host_store(self) -> HostStore:
        """The mirror-host counts of every crawler on this index, in its sibling index ``<index>-hosts``
        (:mod:`es_integration.hosts`); with its own connection, so it works before :meth:`open`."""
        from .hosts import ElasticsearchHostStore, hosts_index

        return ElasticsearchHostStore(self.settings, hosts_index(self.index))

    def __repr__(self) -> str:
        return f"ElasticsearchBackend(url={self.settings.url!r}, index={self.index!r}, tag={self.tag!r})"

    async def load_template(self, host: str) -> HostTemplate | None:
        """``host``'s template from the sibling index ``<index>-templates`` (:mod:`es_integration.templates`)."""
        return await self._call("reading a host template", load_template_async, self._es,
                                templates_index(self.index), self.tag, host)

    async def save_template(self, host: str, template: HostTemplate) -> HostTemplate:
        """Save ``host``'s template there unless a process saved one first; the saved one."""
        index = templates_index(self.index)
        if not self._templates_ready:
            await self._call("creating the template index", ensure_templates_index_async, self._es, index)
            self._templates_ready = True
        return await self._call("saving a host template", save_template_async, self._es, index, self.tag, host,
                                template)

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
        except TagMismatch:
            await self.close()
            raise
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
        await require_tag_async(es, self.index, self.tag)  # a store of other sketches: one clear line, no silent mix
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

        A revisit of a kept key (its own stored version is its best match) also returns None: it is no
        duplicate; :meth:`check_and_add_many` tells revisits apart.

        Raises:
            IncompatibleSketches: the sketch's tag is not this backend's.
            ValueError: an empty sketch, or a signature of the wrong length.
            EsError: Elasticsearch failed after bounded retries.
        """
        (decision,) = await self.check_and_add_many([(key, sketch)])
        return decision.match

    async def check_and_add_many(self, pages: Sequence[tuple[str, Sketch]]) -> list[Decision]:
        """Decide ``pages`` in order, in a constant number of requests per batch (module doc, "Batches").

        Raises:
            IncompatibleSketches, ValueError: as :meth:`check_and_add` (nothing is decided then).
            EsError: Elasticsearch failed after bounded retries: no page of the call has a decision; each is
                remembered and written to the index later with status ``unchecked``.
        """
        for _, sketch in pages:
            self._validate(sketch)
        if self._lock is None or self._client is None:
            raise RuntimeError("ElasticsearchBackend.check_and_add_many called before open()")
        decisions: list[Decision] = []
        async with self._lock:
            try:
                for run in _batches(pages, _MAX_BATCH):
                    decisions += await self._decide(run)
            except Exception as exc:
                # The pipeline passes every page of the call through unchecked: remember them for writing later.
                # Their documents may stay pending (written, never settled); this process's own pending documents
                # carry its writer token, so it never waits for them (others do, until they are written).
                for key, sketch in pages:
                    self._remember(key, sketch, doc_id_of(key))
                if isinstance(exc, BackendError):
                    raise
                # An answer of an unexpected shape: no decision either, which the pipeline must be told of.
                raise EsError(f"checking {len(pages)} page(s) in {self.index}: {type(exc).__name__}: {exc}") from exc
            if self._unchecked:
                # A page remembered after a failed check and now decided (the pipeline tries it again while
                # NEARDUP_ON_BACKEND_DOWN='pause') is no longer unchecked: its decision is in the index.
                for key, _ in pages:
                    self._unchecked.pop(doc_id_of(key), None)
            if self._unchecked and time.monotonic() >= self._unchecked_retry_at:
                # The node answers again: write a batch of the pages it could not check before.
                await self._write_unchecked_quietly(limit=_UNCHECKED_BATCH, retries=0)
        return decisions

    def _validate(self, sketch: Sketch) -> None:
        if sketch.tag != self.tag:
            raise IncompatibleSketches(f"backend holds {self.tag!r} sketches, got one made with {sketch.tag!r}")
        if sketch.empty:
            raise ValueError("an empty sketch (text without shingles) cannot be indexed")
        if sketch.num_perm != self.num_perm:
            raise ValueError(f"expected a signature of {self.num_perm} positions, got {sketch.num_perm}")

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
        for page, page_hits in zip(pages, hits, strict=True):
            if page.own is not None and page.own.fingerprint == page.fingerprint:
                page.decision = Decision.revisit(False)  # unchanged: the stored version is this content
                continue
            if page.own is None:
                rewritten = {w.doc_id for w in written}
                kept = [c for c in self._kept(page_hits, settled, page, before=None) if c.id not in rewritten]
                if kept and not self._local_matches(page, written, later=[]):
                    page.decision = Decision.duplicate(self._match(_best(kept)))
                    continue
            page.fields = self._pending_fields(page, token)
            written.append(page)
        if not written:
            return []
        # (b) pending writes; pages whose key another crawler wrote meanwhile go to the next round.
        again = await self._call("writing pending pages", self._write_pending, written, token)
        written = [page for page in written if page not in again]
        if not written:
            return again
        # (c) every earlier write applied on every copy, refreshed; candidates written before each page.
        await self._call("waiting for earlier writes", self._settle_writes, max(p.seq for p in written))
        ours = {page.doc_id for page in written}
        hits = await self._call("searching candidates", self._search_many, [p.stored for p in written],
                                [p.doc_id for p in written])
        # Only pages written before each one are waited for, and the decisions taken are written before any
        # wait, so waits never form a cycle (module doc, "Why waiting ends").
        foreign = [{hit["_id"]: hit for hit, _ in page_hits if hit["_id"] not in ours and _order(hit) < page.seq}
                   for page, page_hits in zip(written, hits, strict=True)]
        waiting = {i for before in foreign for i, hit in before.items() if self._waits_for(hit)}
        # One read first: most pending candidates have settled meanwhile, and those need no wait.
        settled = await self._read_settled(waiting, wait=False) if waiting else {}
        for i, (page, page_hits) in enumerate(zip(written, hits, strict=True)):
            unsettled = {j for j, hit in foreign[i].items() if self._waits_for(settled.get(j, hit))}
            if unsettled:
                await self._call("writing the decisions", self._write_decisions, written[:i])
                settled.update(await self._read_settled(unsettled))
            kept = [c for c in self._kept(page_hits, settled, page, before=page.seq) if c.id not in ours]
            kept += self._local_matches(page, written[:i], later=written[i + 1 :])
            self._conclude(page, kept)
        # (d) the decisions not written yet.
        await self._call("writing the decisions", self._write_decisions, written)
        return again

    def _conclude(self, page: _Page, kept: list[_Candidate]) -> None:
        """A written page's decision from its kept candidates and its own stored version (ties go to it)."""
        best = _best(kept) if kept else None
        own = page.own
        page.fields["seq"] = page.seq
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
            (other, other.stored.values, other.fingerprint, other.seq)
            for other in earlier
            if other.decision is None or other.new_content  # in (a) its outcome is not known yet
        ]
        versions += [(o, o.own.values, o.own.fingerprint, o.own.order) for o in later if o.own is not None]
        if not versions:
            return []
        shared = shared_counts(np.vstack([v[1] for v in versions]), page.stored.values)
        return [
            _Candidate(other.doc_id, other.key, int(s), fingerprint == page.fingerprint, order)
            for (other, _, fingerprint, order), s in zip(versions, shared.tolist(), strict=True)
            if s >= self.min_shared
        ]

    def _pending_fields(self, page: _Page, token: str) -> dict[str, Any]:
        return {
            "key": page.key, "tag": self.tag, **stored_fields(page.stored), "fingerprint": page.fingerprint,
            "empty": False, "status": PENDING, "group": page.doc_id, "writer": token,
        }

    def _match(self, candidate: _Candidate) -> Match:
        return Match(
            key=candidate.key, shared=candidate.shared, resemblance=candidate.shared / self.num_perm,
            exact=candidate.exact,
        )

    def _is_pending(self, doc: Mapping[str, Any]) -> bool:
        """Whether ``doc`` (a hit or a real-time read) is a page still being decided by a live crawler."""
        source = doc.get("_source", {}).get(ROOT, {})
        if source.get("status") != PENDING:
            return False
        if str(source.get("writer", "")).startswith(self._writer):
            return False  # ours, from a failed check: it never settles
        return (doc["_id"], doc.get("_seq_no")) not in self._abandoned

    def _waits_for(self, doc: Mapping[str, Any]) -> bool:
        return bool(doc.get("found", True)) and self._is_pending(doc)

    def _kept(
        self, hits: list[tuple[dict[str, Any], int]], settled: dict[str, dict[str, Any]], page: _Page,
        *, before: int | None,
    ) -> list[_Candidate]:
        """The kept candidates among a page's hits (pending ones replaced by their settled read; only those
        written before ``before`` when given); shared positions recounted on what was read."""
        out: list[_Candidate] = []
        for hit, shared in hits:
            doc = settled.get(hit["_id"], hit)
            if not doc.get("found", True) or "_source" not in doc:
                continue
            source = doc["_source"][ROOT]
            if source.get("status") != KEPT:
                continue
            if before is not None and _order(hit) >= before:
                continue  # written after the page: the page is a candidate of its check, not the reverse
            order = _order(doc)
            if before is not None and order >= before:
                continue
            if doc is not hit:  # settled since the search: its content may have been replaced (a recrawl)
                values, valid = decode_many([source.get("sig")], self.num_perm)
                if valid[0]:
                    shared = int(shared_counts(values[0], page.stored.values))
                if shared < self.min_shared:
                    continue
            out.append(_Candidate(hit["_id"], str(source.get("key", hit["_id"])), shared,
                                  source.get("fingerprint") == page.fingerprint, order))
        return out

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
            if "error" in doc:
                continue  # its shard copy failed: the next round reads it again
            status = doc["_source"][ROOT].get("status") if doc.get("found") else None
            if status is not None and (status != PENDING or self._is_pending(doc)):
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

    def _search_body(self, stored: StoredSignature, exclude: str | None, *, positions: bool) -> dict[str, Any]:
        """The candidate search of one page (kept or pending documents; not ``exclude``, its own)."""
        statuses, exclude_ids = (KEPT, PENDING), [exclude] if exclude else []
        source = {"includes": [F_KEY, F_STATUS, F_SEQ, F_FINGERPRINT, F_WRITER]}
        if positions:
            query = candidate_query(stored.tokens(), self.min_shared, self.tag, statuses=statuses,
                                    exclude_ids=exclude_ids)
            return {"query": query, "size": _CANDIDATES, "seq_no_primary_term": True, "_source": source,
                    "track_total_hits": False}
        return {"query": band_query(stored, statuses=statuses, exclude_ids=exclude_ids), "size": _CANDIDATES,
                "seq_no_primary_term": True, "_source": source, "docvalue_fields": [{"field": F_SIG}],
                "track_total_hits": False}

    def _parse_hits(
        self, response: Mapping[str, Any], stored: StoredSignature, *, positions: bool
    ) -> list[tuple[dict[str, Any], int]] | None:
        """Candidates sharing ``>= t`` positions, with the count; ``None`` when the band query has
        :data:`_CANDIDATES` raw hits or more (then the position query, which ranks server-side, is used)."""
        if "error" in response:
            raise ShardsUnavailable(f"a candidate search failed: {str(response['error'])[:200]}")
        shards = response["_shards"]
        if shards["successful"] < shards["total"]:
            raise ShardsUnavailable(f"the search reached {shards['successful']} of {shards['total']} shard(s)")
        raw: list[dict[str, Any]] = response["hits"]["hits"]
        if positions:
            if len(raw) >= _CANDIDATES:
                logger.warning("a page has %d or more kept candidates in %s; only those were compared", len(raw),
                               self.index)
            return [(hit, round(hit["_score"])) for hit in raw]
        if len(raw) >= _CANDIDATES:
            return None
        sigs, valid = decode_many([(h.get("fields", {}).get(F_SIG) or [None])[0] for h in raw], self.num_perm)
        shared = shared_counts(sigs, stored.values)
        keep = np.flatnonzero(valid & (shared >= self.min_shared)).tolist()
        return [(raw[i], int(shared[i])) for i in keep]

    async def _search(self, stored: StoredSignature, exclude: str | None) -> list[tuple[dict[str, Any], int]]:
        """One page's candidates (kept or pending, sharing ``>= t`` positions) with their shared positions: the
        band query (verified on the hits' compact signatures) when :attr:`_bands` allows it, else positions."""
        positions = not self._bands
        while True:
            body = self._search_body(stored, exclude, positions=positions)
            response = await self._es.search(index=self.index, **_search_kwargs(body))
            hits = self._parse_hits(response.body, stored, positions=positions)
            if hits is not None:
                return hits
            positions = True

    async def _search_many(
        self, stored: list[StoredSignature], exclude: list[str]
    ) -> list[list[tuple[dict[str, Any], int]]]:
        """:meth:`_search` for each page of a batch: one ``_search`` for one page, else one ``_msearch``."""
        if len(stored) == 1:
            return [await self._search(stored[0], exclude[0])]
        if self._bands:
            union = await self._search_union(stored, exclude)
            if union is not None:
                return union
        positions = not self._bands
        searches: list[dict[str, Any]] = []
        for one, own in zip(stored, exclude, strict=True):
            searches += [{"index": self.index}, self._search_body(one, own, positions=positions)]
        response = await self._es.msearch(searches=searches)
        out: list[list[tuple[dict[str, Any], int]]] = []
        for one, own, answer in zip(stored, exclude, response["responses"], strict=True):
            hits = self._parse_hits(answer, one, positions=positions)
            out.append(hits if hits is not None else await self._search(one, own))
        return out

    async def _search_union(
        self, stored: list[StoredSignature], exclude: list[str]
    ) -> list[list[tuple[dict[str, Any], int]]] | None:
        """The candidates of every page of a batch from **one** band query (the union of their band tokens),
        each hit verified against each page on its compact signature: one search instead of one per page (the
        server's cost per search, not per term, dominates). ``None`` when the union has too many raw hits
        (then one search per page)."""
        size = min(_UNION_HITS, _CANDIDATES * len(stored))
        tokens = distinct_band_tokens(np.vstack([one.values for one in stored]))
        query = {"bool": {"filter": [{"term": {F_TAG: self.tag}}, {"terms": {F_BANDS: tokens}},
                                     {"terms": {F_STATUS: [KEPT, PENDING]}}]}}
        response = await self._es.search(
            index=self.index, query=query, size=size, seq_no_primary_term=True,
            source={"includes": [F_KEY, F_STATUS, F_SEQ, F_FINGERPRINT, F_WRITER]},
            docvalue_fields=[{"field": F_SIG}], track_total_hits=False,
        )
        shards = response["_shards"]
        if shards["successful"] < shards["total"]:
            raise ShardsUnavailable(f"the search reached {shards['successful']} of {shards['total']} shard(s)")
        raw: list[dict[str, Any]] = response["hits"]["hits"]
        if len(raw) >= size:
            return None
        if not raw:
            return [[] for _ in stored]
        sigs, valid = decode_many([(h.get("fields", {}).get(F_SIG) or [None])[0] for h in raw], self.num_perm)
        ids = [hit["_id"] for hit in raw]
        out: list[list[tuple[dict[str, Any], int]]] = []
        for one, own in zip(stored, exclude, strict=True):
            shared = shared_counts(sigs, one.values)
            keep = np.flatnonzero(valid & (shared >= self.min_shared)).tolist()
            out.append([(raw[i], int(shared[i])) for i in keep if ids[i] != own])
        return out

    async def _bulk(self, operations: list[dict[str, Any]]) -> dict[str, Any]:
        response = await self._es.bulk(operations=operations)
        body: dict[str, Any] = response.body
        return body

    async def _mget(self, ids: list[str], source: list[str] | None = None) -> list[dict[str, Any]]:
        response = await self._es.mget(
            index=self.index, ids=ids, realtime=True, source=source or [F_KEY, F_STATUS, F_SEQ, F_FINGERPRINT, F_WRITER]
        )
        docs: list[dict[str, Any]] = response["docs"]
        return docs

    async def _write_pending(self, pages: list[_Page], token: str) -> list[_Page]:
        """Write the pages as ``pending`` (created, or replacing the document read in (a) if unchanged since:
        ``if_seq_no``); each page's ``_seq_no`` is its place in the write order. One page: a create (or an
        index) request; several: one bulk request, whose items keep their order on the one shard.

        Idempotent under retries: a write that landed in an earlier attempt answers "conflict" and is read
        back (ours when it holds ``token``). Returns the pages whose key another crawler wrote meanwhile.

        Raises:
            ShardsUnavailable: some bulk items were refused (e.g. HTTP 429 inside the response): retried.
        """
        from elasticsearch import ConflictError

        todo = [page for page in pages if page.seq < 0 and not page.conflict]
        if len(pages) == 1 and todo:
            (page,) = todo
            try:
                if page.prior is None:
                    answer = await self._es.create(index=self.index, id=page.doc_id, document={ROOT: page.fields})
                else:
                    answer = await self._es.index(index=self.index, id=page.doc_id, document={ROOT: page.fields},
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
            response = await self._bulk(operations)
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
                raise ShardsUnavailable(f"the bulk request refused {refused} pending write(s)")
        return [page for page in pages if page.conflict]

    async def _claim(self, pages: list[_Page], token: str) -> None:
        """After a conflict: a page whose document holds ``token`` was written by an earlier attempt of this
        very request (its ``_seq_no`` is read back); otherwise another crawler wrote its key meanwhile."""
        docs = await self._mget([page.doc_id for page in pages], [F_WRITER])
        for page, doc in zip(pages, docs, strict=True):
            if "error" in doc:
                raise ShardsUnavailable(f"reading back {page.doc_id} failed")
            if doc.get("found") and doc["_source"].get(ROOT, {}).get("writer") == token:
                page.landed(doc)
            else:
                page.conflict = True

    async def _write_decisions(self, pages: list[_Page]) -> None:
        """Write each page's final status and ``seq`` (one index request for one page, else one bulk)."""
        todo = [page for page in pages if not page.decided]
        if len(pages) == 1 and todo:
            await self._es.index(index=self.index, id=todo[0].doc_id, document={ROOT: todo[0].fields})
            todo[0].decided = True
            return
        if not todo:
            return
        operations: list[dict[str, Any]] = []
        for page in todo:
            operations += [{"index": {"_index": self.index, "_id": page.doc_id}}, {ROOT: page.fields}]
        response = await self._bulk(operations)
        for page, item in zip(todo, response["items"], strict=True):
            (result,) = item.values()
            page.decided = 200 <= int(result.get("status", 500)) < 300
        refused = sum(1 for page in todo if not page.decided)
        if refused:
            raise ShardsUnavailable(f"the bulk request refused {refused} decision(s)")

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
