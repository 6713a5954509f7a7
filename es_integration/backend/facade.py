"""The crawler backend as the pipeline sees it: :class:`ElasticsearchBackend`, a
:class:`~scrapy_neardup.store.backend.Backend` assembled from the bases of this package (see its doc).

Here: its settings and lifecycle (``open`` creates the index, ``NEARDUP_ES_SHARDS`` primary shards, and its
sequencer, or checks the existing ones,
and decides whether candidates may come from the band query), host templates, and
:meth:`~ElasticsearchBackend.check_and_add_many`, which runs the rounds of :mod:`.protocol` one call at a time
and, when a call fails, remembers its pages in the queue of :mod:`.unchecked`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from elasticsearch import ApiError

from scrapy_neardup.core.match import Match
from scrapy_neardup.core.params import SketchParams, require_params
from scrapy_neardup.core.sketch import Sketch
from scrapy_neardup.core.stored_signature import band_layout
from scrapy_neardup.errors import BackendError, EsError, IncompatibleSketches, TagMismatch
from scrapy_neardup.store.backend import Backend, Decision
from scrapy_neardup.store.config import crawl_identity, read_setting
from scrapy_neardup.store.settings_registry import default_of

from ..client import ConnectionSettings, connect_async, transport_logs_at_debug
from ..es_settings import ElasticsearchSettings
from ..host_template_index import (
    ensure_templates_index_async,
    load_template_async,
    save_template_async,
    templates_index,
)
from ..hosts import ElasticsearchHostStore, hosts_index
from ..mapping import F_POSITIONS, F_SIG, F_STATUS, F_TAG, KEPT, PENDING, ensure_index_async, require_tag_async
from ..names import validate_index_name
from .pages import doc_id_of
from .protocol import _MAX_BATCH, _batches, _Rounds
from .requests import _POLL_FIRST, _POLL_MAX
from .sequencer import Sequencer
from .unchecked import _UNCHECKED_BATCH, _Unchecked, _UncheckedPages

if TYPE_CHECKING:
    from elasticsearch import AsyncElasticsearch

    from scrapy_neardup.core.host_template import HostTemplate
    from scrapy_neardup.core.mirror_table import HostStore
    from scrapy_neardup.store.config import SettingsLike


#: One logger for the package, under the name it had as one module: log filters and tests select it.
logger = logging.getLogger("es_integration.backend")

T = TypeVar("T")


class _NoShardYet(EsError):
    """A just-created index still has no active shard after a few seconds."""


class ElasticsearchBackend(_Rounds, _UncheckedPages, Backend):
    """A :class:`~scrapy_neardup.store.backend.Backend` storing kept sketches in an Elasticsearch index.

    Args:
        url: ``http(s)://host:port``.
        index: index of kept sketches (created when missing; see ``shards``).
        params: the sketch parameters (``Sketcher.params``): ``k = params.num_perm`` signature positions, and
            ``t = params.min_shared``: a page shares ``>= t`` of ``k`` positions with a kept page to be its
            near-duplicate; pages of resemblance ``r`` are flagged with probability ``P[Binomial(k, r) >= t]``.
            Only sketches with ``params.tag`` are compared (and accepted).
        api_key: encoded API key (see :mod:`es_integration.connection`).
        username: basic-auth user.
        password: basic-auth password.
        ca_certs: CA certificate of the cluster's TLS.
        request_timeout: seconds per request.
        crawl_id: the identity of this crawl (repeats: see :mod:`.protocol`); ``None``: a new random one.
        shards: primary shards of the index when it is created (an existing index, of any shard count, is used
            as it is): the order of the fleet's writes comes from the sequencer (:mod:`.sequencer`), so the
            count is a matter of capacity (about 1.1 KB per page), not of correctness.
    """

    #: attempts after the first for a retryable failure: with ``backoff`` 0.1 s, 3.1 s of waits in all, longer
    #: than a primary's failover (0.6-1.6 s measured on a 3-node cluster), which a check then rides out
    retries = 5
    #: first backoff in seconds (doubled per retry)
    backoff = 0.1
    #: seconds to wait for a page another process left ``pending`` before ignoring it
    pending_timeout = 30.0
    #: pages whose check failed remembered for writing as ``unchecked``; beyond, only counted (~0.6 KB each)
    max_unchecked = 100_000
    #: write remembered unchecked pages after the next successful check (else only at close: for a crawl that
    #: retries its failed checks, ``NEARDUP_ON_BACKEND_DOWN='pause'``)
    write_unchecked_early = True
    #: candidates from the band query (set on open; see :meth:`_bands_usable`)
    _bands = False
    #: the template index exists (checked before the first template is saved)
    _templates_ready = False

    def __init__(
        self,
        *,
        url: str,
        index: str,
        params: SketchParams,
        api_key: str | None = None,
        username: str | None = None,
        password: str | None = None,
        ca_certs: str | None = None,
        request_timeout: float = default_of("NEARDUP_ES_TIMEOUT"),
        crawl_id: str | None = None,
        shards: int = default_of("NEARDUP_ES_SHARDS"),
    ) -> None:
        params = require_params(params, "ElasticsearchBackend")
        self.crawl_id = crawl_id or uuid.uuid4().hex
        self.index = validate_index_name(index)
        self.params = params
        self.num_perm = params.num_perm
        self.min_shared = params.min_shared
        self.tag = params.tag
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
        #: primary shards of the index when this backend creates it (an existing index keeps its own)
        self.shards = shards
        self._batch_orders: dict[str, int] = {}
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
        """The backend the ``NEARDUP_ES_*`` settings describe (see :mod:`es_integration.es_settings`), in the crawl
        :func:`~scrapy_neardup.store.config.crawl_identity` names (``NEARDUP_CRAWL_ID``, else saved in ``JOBDIR``).

        Raises:
            NearDupSettingsError: a ``NEARDUP_ES_*`` setting (or ``NEARDUP_CRAWL_ID``) is missing or wrong (the
                message names it).
            StateError: the crawl's identity file in ``JOBDIR`` cannot be read or written.
        """
        es = ElasticsearchSettings.from_settings(settings)
        backend = cls(
            url=es.url, index=es.index, params=params,
            api_key=es.api_key, username=es.username, password=es.password, ca_certs=es.ca_certs,
            request_timeout=es.request_timeout, crawl_id=crawl_identity(settings), shards=es.shards,
        )
        backend.open_hint = " (check NEARDUP_ES_URL and that the node is up)"
        # 'pause': the crawl retries each page whose check failed until it is decided, so writing those pages as
        # unchecked the moment the node answers again would only write them twice (and count them unchecked).
        backend.write_unchecked_early = read_setting(settings, "NEARDUP_ON_BACKEND_DOWN") != "pause"
        backend.max_batch = es.batch_size
        return backend

    def stats(self) -> Mapping[str, int]:
        """``backend_retries``, and what :meth:`close` did with the pages passed through unchecked."""
        counts = {"backend_retries": self.retried, **self.close_stats}
        return {name: count for name, count in counts.items() if count}

    def host_store(self) -> HostStore:
        """The mirror-host counts of every crawler on this index, in its sibling index ``<index>-hosts``
        (:mod:`es_integration.hosts`); with its own connection, so it works before :meth:`open`."""
        return ElasticsearchHostStore(self.settings, hosts_index(self.index))

    def __repr__(self) -> str:
        return f"ElasticsearchBackend(url={self.settings.url!r}, index={self.index!r}, tag={self.tag!r})"

    async def load_template(self, host: str) -> HostTemplate | None:
        """``host``'s template from the sibling index ``<index>-templates``
        (:mod:`es_integration.host_template_index`)."""
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
        """Connect, and create the index and its sequencer (:mod:`.sequencer`) or check the existing ones.

        Raises:
            EsError: unreachable, wrong credentials, TLS failure.
        """
        self._lock = asyncio.Lock()
        try:
            # Each failed attempt is retried by _call and a final failure is one EsError: the transport's
            # per-attempt warnings would only bury that line (they are still there at DEBUG).
            with transport_logs_at_debug():
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
        """Write the remembered unchecked pages (see :mod:`.unchecked`), report them, release the connection pool."""
        try:
            if self._unchecked and self._client is not None and self._lock is not None:
                async with self._lock:
                    await self._write_unchecked_quietly(limit=None, retries=None)
            if self._client is not None:
                # The crawl's last decisions are searchable when it returns (e.g. for `neardup es groups`).
                with contextlib.suppress(Exception):
                    await self._es.indices.refresh(index=self.index)
        finally:
            self._report_unchecked()
            client, self._client = self._client, None
            if client is not None:
                await client.close()

    async def _ensure_index(self) -> None:
        es = self._es
        # best_compression: the stored fields are a page's largest part (~15% smaller pages, measured)
        await ensure_index_async(es, self.index, shards=self.shards, settings={"codec": "best_compression"},
                                 request_timeout=self.settings.request_timeout)
        # A store of other sketches: one clear line, no silent mix.
        await self._settling(lambda: require_tag_async(es, self.index, self.tag))
        self._bands = await self._bands_usable()
        self._sequencer = Sequencer(es, self.index, pending_timeout=self.pending_timeout)
        await self._sequencer.open()

    async def _count_settling(self, query: dict[str, Any]) -> int | None:
        """Count ``query``'s documents once the index answers (:meth:`_settling`); ``None``: it still does not."""
        async def count() -> int:
            return int((await self._es.count(index=self.index, query=query))["count"])

        try:
            return await self._settling(count)
        except _NoShardYet:
            return None

    async def _settling(self, request: Callable[[], Awaitable[T]]) -> T:
        """``request()``, waiting a little while it fails with HTTP 503: an index another process (or this one,
        a moment ago) has just created may have no active shard yet, and such waits are not request failures.

        Raises:
            _NoShardYet: still 503 after 5 s.
        """
        delay = _POLL_FIRST
        deadline = time.monotonic() + 5.0
        while True:
            try:
                return await request()
            except ApiError as exc:
                if exc.meta.status != 503:
                    raise
                if time.monotonic() >= deadline:
                    raise _NoShardYet(f"index {self.index} has no active shard yet") from None
            await asyncio.sleep(delay)
            delay = min(delay * 2, _POLL_MAX)

    async def _bands_usable(self) -> bool:
        """Whether candidates can come from the band query: ``t >= t0`` (the stored band layout's), and no kept
        or pending document lacks the band fields (written by an older version: then positions are used for
        the whole run, so that such documents stay candidates; ``neardup es backfill`` adds the fields)."""
        if self.min_shared < band_layout(self.num_perm):
            await self._require_positions()
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

    async def _require_positions(self) -> None:
        """A threshold below the band layout's needs the position query, hence position tokens on every kept
        page; pages written by crawlers with a higher threshold carry none (they need only bands).

        Raises:
            EsError: the index holds kept or pending pages without position tokens (the message says what to do).
        """
        query = {"bool": {
            "filter": [{"term": {F_TAG: self.tag}}, {"terms": {F_STATUS: [KEPT, PENDING]}},
                       {"exists": {"field": F_SIG}}],
            "must_not": [{"exists": {"field": F_POSITIONS}}],
        }}
        lacking = await self._count_settling(query)
        if lacking:
            t0 = band_layout(self.num_perm)
            raise EsError(
                f"index {self.index} holds {lacking} pages stored without position tokens (written with a threshold "
                f"of at least {t0}/{self.num_perm} shared positions), which this crawl's threshold of "
                f"{self.min_shared}/{self.num_perm} needs: use another NEARDUP_ES_INDEX, or a NEARDUP_THRESHOLD "
                f"of at least {t0 / self.num_perm:.3f}"
            )

    # -- check and add ---------------------------------------------------------------------------------------

    async def check_and_add(self, key: str, sketch: Sketch) -> Match | None:
        """Return the best kept match of ``sketch``, or keep it under ``key`` and return None (see :mod:`.protocol`).

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
        """Decide ``pages`` in order, in a constant number of requests per batch (:mod:`.protocol`).

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
            if self._unchecked and self.write_unchecked_early and time.monotonic() >= self._unchecked_retry_at:
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
