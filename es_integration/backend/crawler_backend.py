"""The crawler backend as the pipeline sees it: :class:`ElasticsearchBackend`, a
:class:`~scrapy_neardup.store.backend.Backend` that composes the parts of this package (see its doc) and
delegates to them: its settings and lifecycle, host templates, and
:meth:`~ElasticsearchBackend.check_and_add_many`, which runs the rounds of :mod:`.rounds` one call at a time
and, when a call fails, remembers its pages in the queue of :mod:`.unchecked`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

from scrapy_neardup.core.match import Match
from scrapy_neardup.core.params import SketchParams, require_params
from scrapy_neardup.core.sketch import Sketch
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
from ..names import validate_index_name
from .opening import open_index
from .pages import doc_id_of
from .rounds import _MAX_BATCH, Rounds, _batches
from .searches import Searches
from .transport import Transport
from .unchecked import _UNCHECKED_BATCH, UncheckedQueue
from .writes import Writes

if TYPE_CHECKING:
    from scrapy_neardup.core.host_template import HostTemplate
    from scrapy_neardup.core.mirror_table import HostStore
    from scrapy_neardup.store.config import SettingsLike


#: One logger for the package, under the name it had as one module: log filters and tests select it.
logger = logging.getLogger("es_integration.backend")

T = TypeVar("T")


class _Delegated(Generic[T]):
    """An attribute of :class:`ElasticsearchBackend` that lives on one of its parts: read and set there, so a
    change after construction (``backend.retries = 2``) reaches the part using it. Read on the class: the
    default the parts are built with."""

    def __init__(self, part: str, default: T, name: str | None = None) -> None:
        self.part, self.default, self.name = part, default, name

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = self.name or name

    def __get__(self, obj: object | None, owner: type | None = None) -> T:
        if obj is None:
            return self.default
        value: T = getattr(getattr(obj, self.part), str(self.name))
        return value

    def __set__(self, obj: object, value: T) -> None:
        setattr(getattr(obj, self.part), str(self.name), value)


class ElasticsearchBackend(Backend):
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
        crawl_id: the identity of this crawl (repeats: see :mod:`.rounds`); ``None``: a new random one.
        shards: primary shards of the index when it is created (an existing index, of any shard count, is used
            as it is): the order of the fleet's writes comes from the sequencer (:mod:`.sequencer`), so the
            count is a matter of capacity (about 1.1 KB per page), not of correctness.
    """

    #: attempts after the first for a retryable failure: with ``backoff`` 0.1 s, 3.1 s of waits in all, longer
    #: than a primary's failover on an idle 3-node cluster (0.6-1.6 s measured); a longer one: ``failover_wait``
    retries = _Delegated("_transport", 5)
    #: first backoff in seconds (doubled per retry)
    backoff = _Delegated("_transport", 0.1)
    #: seconds from a request's first attempt during which a failure a failover answers (HTTP 503, a node gone
    #: away, a shard copy that did not answer) is retried past ``retries``: a loaded cluster may take seconds to
    #: remove a dead node and promote its replicas (30 s, as long as a page another crawler left pending is
    #: waited for)
    failover_wait = _Delegated("_transport", 30.0, "failover")
    #: failed requests, and retries (``neardup/backend_retries``)
    errors = _Delegated("_transport", 0)
    retried = _Delegated("_transport", 0)
    #: seconds to wait for a page another process left ``pending`` before ignoring it
    pending_timeout = _Delegated("_searches", 30.0)
    #: pages whose check failed remembered for writing as ``unchecked``; beyond, only counted (~0.6 KB each)
    max_unchecked = _Delegated("_unchecked", 100_000)
    #: unchecked pages written to the index, and those beyond ``max_unchecked`` (never written)
    unchecked_indexed = _Delegated("_unchecked", 0)
    unchecked_overflow = _Delegated("_unchecked", 0)
    #: what became of the unchecked pages, filled by :meth:`close` (the pipeline adds it to its stats)
    close_stats = _Delegated[dict[str, int]]("_unchecked", {})
    #: candidates from the band query (set on open: :func:`.opening.bands_usable`)
    _bands = _Delegated("_searches", False, "bands")
    #: pending documents of other crawlers no longer waited for (``_id``, ``_seq_no``)
    _abandoned = _Delegated[set[tuple[str, "int | None"]]]("_searches", set(), "abandoned")
    #: write remembered unchecked pages after the next successful check (else only at close: for a crawl that
    #: retries its failed checks, ``NEARDUP_ON_BACKEND_DOWN='pause'``)
    write_unchecked_early = True
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
        self._lock: asyncio.Lock | None = None
        #: primary shards of the index when this backend creates it (an existing index keeps its own)
        self.shards = shards
        # The parts, each given what it uses (module doc of the package), with the class's defaults. The writer
        # token marks this process's pending writes (with the round: ``writer``), never waited for by itself.
        cls = type(self)
        self._transport = Transport(self.settings, self.index, retries=cls.retries, backoff=cls.backoff,
                                    failover=cls.failover_wait)
        self._searches = Searches(self._transport, params, writer=uuid.uuid4().hex,
                                  pending_timeout=cls.pending_timeout)
        self._rounds = Rounds(self._transport, self._searches, Writes(self._transport, crawl_id=self.crawl_id),
                              params, crawl_id=self.crawl_id)
        self._unchecked = UncheckedQueue(self._transport, self._searches, max_unchecked=cls.max_unchecked)
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
        transport = self._transport
        return await transport.call("reading a host template", load_template_async, transport.es,
                                templates_index(self.index), self.tag, host)

    async def save_template(self, host: str, template: HostTemplate) -> HostTemplate:
        """Save ``host``'s template there unless a process saved one first; the saved one."""
        index, transport = templates_index(self.index), self._transport
        if not self._templates_ready:
            await transport.call("creating the template index", ensure_templates_index_async, transport.es, index)
            self._templates_ready = True
        return await transport.call("saving a host template", save_template_async, transport.es, index, self.tag,
                                    host, template)

    # -- lifecycle -------------------------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, and create the index and its sequencer (:mod:`.sequencer`) or check the existing ones.

        Raises:
            EsError: unreachable, wrong credentials, TLS failure.
        """
        self._lock = asyncio.Lock()
        try:
            # Each failed attempt is retried by Transport.call and a final failure is one EsError: the transport's
            # per-attempt warnings would only bury that line (they are still there at DEBUG).
            with transport_logs_at_debug():
                self._transport.client = await self._transport.call(
                    "opening the index",
                    functools.partial(connect_async, self.settings, max_retries=0, retry_on_timeout=False),
                )
                await self._transport.call("opening the index", self._open_index)
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
            if self._unchecked and self._transport.client is not None and self._lock is not None:
                async with self._lock:
                    await self._unchecked.write_quietly(limit=None, retries=None)
            if self._transport.client is not None:
                # The crawl's last decisions are searchable when it returns (e.g. for `neardup es groups`).
                with contextlib.suppress(Exception):
                    await self._transport.es.indices.refresh(index=self.index)
        finally:
            self._unchecked.report()
            client, self._transport.client = self._transport.client, None
            if client is not None:
                await client.close()

    async def _open_index(self) -> None:
        self._searches.bands, self._rounds.sequencer = await open_index(
            self._transport, self.params, shards=self.shards, pending_timeout=self.pending_timeout)

    # -- check and add ---------------------------------------------------------------------------------------

    async def check_and_add(self, key: str, sketch: Sketch) -> Match | None:
        """Return the best kept match of ``sketch``, or keep it under ``key`` and return None (see :mod:`.rounds`).

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
        """Decide ``pages`` in order, in a constant number of requests per batch (:mod:`.rounds`).

        Raises:
            IncompatibleSketches, ValueError: as :meth:`check_and_add` (nothing is decided then).
            EsError: Elasticsearch failed after bounded retries: no page of the call has a decision; each is
                remembered and written to the index later with status ``unchecked``.
        """
        for _, sketch in pages:
            self._validate(sketch)
        if self._lock is None or self._transport.client is None:
            raise RuntimeError("ElasticsearchBackend.check_and_add_many called before open()")
        decisions: list[Decision] = []
        async with self._lock:
            try:
                for run in _batches(pages, _MAX_BATCH):
                    decisions += await self._rounds.decide(run)
            except Exception as exc:
                # The pipeline passes every page of the call through unchecked: remember them for writing later.
                # Their documents may stay pending (written, never settled); this process's own pending documents
                # carry its writer token, so it never waits for them (others do, until they are written).
                for key, sketch in pages:
                    self._unchecked.remember(key, sketch, doc_id_of(key))
                if isinstance(exc, BackendError):
                    raise
                # An answer of an unexpected shape: no decision either, which the pipeline must be told of.
                raise EsError(f"checking {len(pages)} page(s) in {self.index}: {type(exc).__name__}: {exc}") from exc
            if self._unchecked:
                # A page remembered after a failed check and now decided (the pipeline tries it again while
                # NEARDUP_ON_BACKEND_DOWN='pause') is no longer unchecked: its decision is in the index.
                for key, _ in pages:
                    self._unchecked.forget(doc_id_of(key))
            if self._unchecked and self.write_unchecked_early and time.monotonic() >= self._unchecked.retry_at:
                # The node answers again: write a batch of the pages it could not check before.
                await self._unchecked.write_quietly(limit=_UNCHECKED_BATCH, retries=0)
        return decisions

    def _validate(self, sketch: Sketch) -> None:
        if sketch.tag != self.tag:
            raise IncompatibleSketches(f"backend holds {self.tag!r} sketches, got one made with {sketch.tag!r}")
        if sketch.empty:
            raise ValueError("an empty sketch (text without shingles) cannot be indexed")
        if sketch.num_perm != self.num_perm:
            raise ValueError(f"expected a signature of {self.num_perm} positions, got {sketch.num_perm}")
