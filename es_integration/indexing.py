"""Bulk indexing of documents with their sketches, and backfilling sketches into an existing index.

Both write through :func:`es_integration.bulk.write_bulk` (``elasticsearch.helpers.streaming_bulk`` chunks that
ride out HTTP 429 rejections with backoff and smaller requests; with ``threads > 1`` sketching in this thread
overlaps bulk requests in worker threads). Sketches are computed in batches with
:meth:`Sketcher.sketch_many` (the vectorized path). Every document gets ``neardup.group = _id`` and
``neardup.status = "kept"``: until groups are assigned, each page is its own group, so serve-time collapse
works from the first query.

Backfill sweeps the index with a point in time (only documents without a sketch of the current tag, unless
``force``) and writes the sketch fields with partial updates (``_op_type: update``); this distribution has no
update-by-query and no scripting, and none is needed.
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from scrapy_neardup.core.host_template import HostTemplate, learn_hosts
from scrapy_neardup.core.mirror_table import host_of
from scrapy_neardup.core.params import SketchParams
from scrapy_neardup.core.sketch import Sketcher
from scrapy_neardup.core.stored_signature import StoredSignature, values_from_token_lists
from scrapy_neardup.errors import InputError

from .bulk import write_bulk
from .host_template_index import resolve_templates
from .mapping import F_POSITIONS, F_SIG, F_TAG, KEPT, ROOT, ensure_index, sketch_fields, stored_fields
from .names import validate_field_name, validate_index_name
from .sweep import point_in_time, sweep

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch

__all__ = ["IndexStats", "SeqClock", "backfill", "get_field", "index_records", "record_actions"]

logger = logging.getLogger(__name__)

_SKETCH_BATCH = 256
Progress = Callable[[int], Any]


@dataclass
class IndexStats:
    """Outcome of an indexing or backfill run.

    Attributes:
        indexed: documents written (created, replaced or updated).
        without_text: documents whose text field was missing, not a string, or had no shingles (they get
            ``neardup.empty = true`` and no positions: they are nobody's near-duplicate).
        missing_text: of those, the documents without the text field at all (a wrong ``--text-field``, say).
        errors: documents Elasticsearch refused; ``error_kinds`` groups them by kind.
        error_kinds: per Elasticsearch error type (``mapper_parsing_exception``, ...): how many documents, the
            first one's id and its reason cut to :data:`MAX_REASON_CHARS` (a reason may quote a whole page).
        upgraded: documents given ``neardup.sig`` and ``neardup.bands`` from their positions (backfill of an
            index written before those fields existed; see :func:`upgrade_signatures`).
        seconds: wall time.
    """

    indexed: int = 0
    without_text: int = 0
    missing_text: int = 0
    errors: int = 0
    upgraded: int = 0
    error_kinds: dict[str, BulkErrorKind] = field(default_factory=dict)
    seconds: float = 0.0

    def summary(self) -> str:
        """One line, then one line per kind of error."""
        rate = self.indexed / self.seconds if self.seconds > 0 else 0.0
        missing = f", {self.missing_text} missing the text field" if self.missing_text else ""
        text = f"{self.indexed} documents written ({self.without_text} without text{missing}), {self.errors} errors, "
        text += f"{self.seconds:.1f}s ({rate:.0f} docs/s)"
        if self.upgraded:
            text += f"; {self.upgraded} given the compact signature fields from their positions"
        return "\n  ".join([text, *(kind.describe(name) for name, kind in self.error_kinds.items())])

    def _record(self, ok: bool, info: dict[str, Any]) -> None:
        if ok:
            self.indexed += 1
            return
        self.errors += 1
        add_bulk_error(self.error_kinds, info)


@dataclass
class BulkErrorKind:
    """Documents refused for one kind of error: how many, and the first one's id and (shortened) reason."""

    count: int
    first_id: str
    reason: str

    def describe(self, name: str) -> str:
        return f"{name}: {self.count} document(s), first {self.first_id}: {self.reason}"


#: A refused document's reason is cut to this length: Elasticsearch quotes the offending value, a whole page.
MAX_REASON_CHARS = 200


def add_bulk_error(kinds: dict[str, BulkErrorKind], info: Any) -> None:
    """Count one bulk item error (``{"index": {"_id", "error": {"type", "reason"}}}``) into ``kinds``."""
    (op,) = info.values() if isinstance(info, dict) and len(info) == 1 else (info,)
    error = op.get("error", op) if isinstance(op, dict) else op
    kind = str(error.get("type", "error")) if isinstance(error, dict) else "error"
    reason = str(error.get("reason", error)) if isinstance(error, dict) else str(error)
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 3] + "..."
    if kind in kinds:
        kinds[kind].count += 1
    else:
        kinds[kind] = BulkErrorKind(1, str(op.get("_id", "?")) if isinstance(op, dict) else "?", reason)


class SeqClock:
    """Strictly increasing indexing order numbers: nanoseconds since the epoch, bumped on ties.

    Orders documents indexed by one process exactly, and by several processes up to clock skew.
    """

    def __init__(self) -> None:
        self._last = 0

    def __call__(self) -> int:
        self._last = max(self._last + 1, time.time_ns())
        return self._last


def get_field(source: dict[str, Any], path: str) -> Any:
    """The value at a dotted ``path`` of a document (nested objects, or a literal dotted key); None if absent."""
    if path in source:
        return source[path]
    node: Any = source
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _text_of(value: Any) -> str:
    return value if isinstance(value, str) else ""


def record_actions(
    records: Iterable[dict[str, Any]],
    sketcher: Sketcher | None,
    index: str,
    *,
    id_field: str = "id",
    text_field: str = "text",
    clock: SeqClock | None = None,
    stats: IndexStats | None = None,
    templates: Mapping[str, HostTemplate] | None = None,
    url_field: str = "url",
    move_root_to: str | None = None,
) -> Iterator[dict[str, Any]]:
    """Bulk ``index`` actions for JSON records, sketched in batches (``sketcher=None``: no sketch fields).

    A record's ``_id`` is ``str(record[id_field])`` when present, else a random UUID; the record is stored
    unchanged, plus the ``neardup`` object. ``templates``: ``"auto"`` sketches, the template of each page's host
    (the host of its ``url_field``; see :func:`es_integration.host_template_index.resolve_templates`).

    A record's own field is never overwritten: a record holding a ``neardup`` field (a mark-mode crawl's mark
    has that name by default) is refused (:class:`~scrapy_neardup.errors.InputError`) unless ``move_root_to``
    names the field its value is stored under instead, a field the record must not have either.
    """
    clock = clock or SeqClock()
    iterator = _moved_roots(records, move_root_to)
    while batch := list(itertools.islice(iterator, _SKETCH_BATCH)):
        ids = [_doc_id(get_field(record, id_field)) for record in batch]
        if sketcher is None:
            for doc_id, record in zip(ids, batch, strict=True):
                yield {"_op_type": "index", "_index": index, "_id": doc_id, "_source": record}
            continue
        chosen = None
        if templates:
            hosts = [_host(get_field(record, url_field)) for record in batch]
            chosen = [_hashes(templates.get(host)) if host is not None else None for host in hosts]
        values = [get_field(record, text_field) for record in batch]
        sketches = sketcher.sketch_many([_text_of(value) for value in values], templates=chosen)
        for doc_id, record, sketch, value in zip(ids, batch, sketches, values, strict=True):
            if stats is not None and sketch.empty:
                stats.without_text += 1
                stats.missing_text += value is None
            source = {**record, ROOT: sketch_fields(sketch, seq=clock(), group=doc_id, status=KEPT)}
            yield {"_op_type": "index", "_index": index, "_id": doc_id, "_source": source}


def _moved_roots(records: Iterable[dict[str, Any]], move_to: str | None) -> Iterator[dict[str, Any]]:
    """The records, each one's own ``neardup`` field moved to ``move_to``; refused where that would overwrite."""
    for number, record in enumerate(records, start=1):
        if ROOT not in record:
            yield record
            continue
        if move_to is None:
            raise InputError(
                f"record {number} has a field {ROOT!r}, which this command would overwrite with the near-duplicate "
                f"fields: give --move-neardup-to FIELD to keep its value under another name (e.g. the mark of a "
                "mark-mode crawl: --move-neardup-to mark)"
            )
        if move_to in record or get_field(record, move_to) is not None:
            raise InputError(f"record {number} has a field {move_to!r} already (--move-neardup-to {move_to}): "
                             "name a field the records do not have")
        moved = {name: value for name, value in record.items() if name != ROOT}
        moved[move_to] = record[ROOT]
        yield moved


def _host(url: Any) -> str | None:
    return host_of(url) if isinstance(url, str) else None


def _hashes(template: HostTemplate | None) -> np.ndarray | None:
    return None if template is None else template.hashes


def _doc_id(value: Any) -> str:
    if value is None or value == "":
        return uuid.uuid4().hex
    return value if isinstance(value, str) else str(value)


def index_records(
    client: Elasticsearch,
    index: str,
    records: Iterable[dict[str, Any]],
    sketcher: Sketcher | None,
    *,
    id_field: str = "id",
    text_field: str = "text",
    chunk_size: int = 500,
    threads: int = 1,
    refresh: bool = True,
    progress: Progress | None = None,
    create_index: bool = True,
    templates: Mapping[str, HostTemplate] | None = None,
    url_field: str = "url",
    move_root_to: str | None = None,
) -> IndexStats:
    """Index JSON records with their sketches (``sketcher=None``: without, e.g. to measure the overhead).

    Args:
        move_root_to: where a record's own ``neardup`` field goes (see :func:`record_actions`: refused without).
        templates: ``"auto"`` sketches: the template of each host (see :func:`record_actions`).
        url_field: the field whose URL names a record's host, for ``templates``.
        chunk_size: documents per bulk request to start with: rejected requests (HTTP 429) are retried with
            backoff in smaller ones (:func:`es_integration.bulk.write_bulk`).
        threads: bulk requests in flight at once; more than 1 overlaps sketching in this thread with them.
        refresh: refresh the index at the end, so the documents are searchable when this returns.
        progress: called with the number of documents done since the last call.
        create_index: create the index with the ``neardup`` mapping (or add it to an existing index) first.
    """
    validate_index_name(index)
    validate_field_name(id_field)
    validate_field_name(text_field)
    if move_root_to is not None:
        validate_field_name(move_root_to)
    if create_index:
        ensure_index(client, index)
    stats = IndexStats()
    started = time.perf_counter()
    actions = record_actions(records, sketcher, index, id_field=id_field, text_field=text_field, stats=stats,
                             templates=templates, url_field=url_field, move_root_to=move_root_to)
    _drain(write_bulk(client, actions, chunk_size=chunk_size, threads=threads), stats, progress)
    if refresh:
        client.indices.refresh(index=index)
    stats.seconds = time.perf_counter() - started
    logger.info("indexed into %s: %s", index, stats.summary())
    return stats


def _drain(results: Iterable[tuple[bool, Any]], stats: IndexStats, progress: Progress | None) -> None:
    """Consume a bulk helper's ``(ok, info)`` results into ``stats``, reporting each to ``progress``."""
    for ok, info in results:
        stats._record(ok, info)
        if progress is not None:
            progress(1)


def backfill(
    client: Elasticsearch,
    index: str,
    sketcher: Sketcher,
    *,
    text_field: str = "text",
    url_field: str = "url",
    force: bool = False,
    page_size: int = 500,
    refresh: bool = True,
    progress: Progress | None = None,
    total: Callable[[int], Any] | None = None,
) -> IndexStats:
    """Add sketch fields to the documents of ``index`` that have none for ``sketcher.tag`` (all with ``force``).

    Adds the ``neardup`` mapping, sweeps the matching documents with a point in time, sketches their
    ``text_field`` in batches and writes ``neardup`` with bulk partial updates. Each updated document becomes
    its own group, ``status = "kept"`` (run groups again afterwards). ``"auto"`` sketches: a first sweep learns the
    template of each host (of ``url_field``) over its documents, unless the index keeps one already
    (:func:`es_integration.host_template_index.resolve_templates`).

    Args:
        total: called once with the number of documents to do (for a progress bar) before the sweep.
    """
    validate_index_name(index)
    validate_field_name(text_field)
    ensure_index(client, index)
    client.indices.refresh(index=index)
    upgraded = 0 if force else upgrade_signatures(client, index, sketcher.params, page_size=page_size)
    query: dict[str, Any] = {"match_all": {}} if force else {"bool": {"must_not": [{"term": {F_TAG: sketcher.tag}}]}}
    if total is not None:
        total(int(client.count(index=index, query=query)["count"]))
    stats = IndexStats(upgraded=upgraded)
    started = time.perf_counter()
    with point_in_time(client, index) as pit:
        templates = None
        if sketcher.content == "auto":
            learner = learn_hosts(_swept_pages(client, pit, query, text_field, url_field, page_size),
                                  sketcher.block_hashes)
            templates = resolve_templates(client, index, sketcher.tag, learner)
        pages = sweep(client, pit, query=query, source=[text_field, url_field], page_size=page_size)
        actions = _backfill_actions(pages, sketcher, text_field, stats, templates, url_field)
        _drain(write_bulk(client, actions, chunk_size=page_size), stats, progress)
    if refresh:
        client.indices.refresh(index=index)
    stats.seconds = time.perf_counter() - started
    logger.info("backfilled %s: %s", index, stats.summary())
    return stats


def upgrade_signatures(client: Elasticsearch, index: str, params: SketchParams, *, page_size: int = 1000) -> int:
    """Write ``neardup.sig`` and ``neardup.bands`` onto documents sketched with ``params`` that have position tokens
    only (indexed before those fields existed), computed from their positions: no text is read or sketched,
    and their group fields and ``seq`` stay. Returns the number of documents updated.

    Raises:
        elasticsearch.helpers.BulkIndexError: an update was refused.
    """
    tag, num_perm = params.tag, params.num_perm
    query = {"bool": {"filter": [{"term": {F_TAG: tag}}, {"exists": {"field": F_POSITIONS}}],
                      "must_not": [{"exists": {"field": F_SIG}}]}}
    client.indices.refresh(index=index)
    if not client.count(index=index, query=query)["count"]:
        return 0

    def actions() -> Iterator[dict[str, Any]]:
        with point_in_time(client, index) as pit:
            for hits in sweep(client, pit, query=query, source=[F_POSITIONS], page_size=page_size):
                lists = [get_field(hit.get("_source") or {}, F_POSITIONS) or [] for hit in hits]
                values, valid = values_from_token_lists(lists, num_perm)
                for i in np.flatnonzero(valid).tolist():
                    fields = stored_fields(StoredSignature(values[i], tag))
                    yield {"_op_type": "update", "_index": hits[i]["_index"], "_id": hits[i]["_id"],
                           "doc": {ROOT: {"sig": fields["sig"], "bands": fields["bands"]}}, "retry_on_conflict": 3}

    upgraded = 0
    for ok, info in write_bulk(client, actions(), chunk_size=page_size):
        if not ok:
            from elasticsearch.helpers import BulkIndexError  # lazy: elasticsearch-py is slow to import

            raise BulkIndexError("a signature upgrade was refused", [info])
        upgraded += ok
    client.indices.refresh(index=index)
    logger.info("wrote the compact signature and band fields of %d documents of %s", upgraded, index)
    return upgraded


def _swept_pages(
    client: Elasticsearch, pit: Any, query: dict[str, Any], text_field: str, url_field: str, page_size: int,
) -> Iterator[tuple[str, str, Any]]:
    """``(host, key, text)`` of the documents a backfill sweeps: what their hosts' templates are learned from."""
    for hits in sweep(client, pit, query=query, source=[text_field, url_field], page_size=page_size):
        for hit in hits:
            source = hit.get("_source") or {}
            host, text = _host(get_field(source, url_field)), get_field(source, text_field)
            if host is not None and isinstance(text, str):
                yield host, hit["_id"], text


def _backfill_actions(
    pages: Iterable[list[dict[str, Any]]], sketcher: Sketcher, text_field: str, stats: IndexStats,
    templates: Mapping[str, HostTemplate] | None = None, url_field: str = "url",
) -> Iterator[dict[str, Any]]:
    clock = SeqClock()
    for hits in pages:
        sources = [hit.get("_source") or {} for hit in hits]
        texts = [_text_of(get_field(source, text_field)) for source in sources]
        chosen = None
        if templates:
            hosts = [_host(get_field(source, url_field)) for source in sources]
            chosen = [_hashes(templates.get(host)) if host is not None else None for host in hosts]
        for hit, sketch in zip(hits, sketcher.sketch_many(texts, templates=chosen), strict=True):
            if sketch.empty:
                stats.without_text += 1
            fields = sketch_fields(
                sketch, seq=clock(), group=hit["_id"], status=KEPT, duplicate_of=None, shared=None
            )
            if sketch.empty:
                fields.update(positions=None, sig=None, bands=None)
            yield {
                "_op_type": "update",
                "_index": hit["_index"],
                "_id": hit["_id"],
                "doc": {ROOT: fields},
                "retry_on_conflict": 3,
            }
