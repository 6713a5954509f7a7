"""The near-duplicate fields of an Elasticsearch document, their mapping, and the index template.

Design notes: docs/architecture.md#es_integrationmapping
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from scrapy_neardup.core.match import Sketched
from scrapy_neardup.core.params import content_change, parse_tag, still_made
from scrapy_neardup.core.sketch import Sketch
from scrapy_neardup.core.stored_signature import StoredSignature, stored_values, values_from_token_lists
from scrapy_neardup.errors import EsError, TagMismatch

from .names import validate_index_name
from .steps import Call, Steps, run, run_async

if TYPE_CHECKING:
    from collections.abc import Sequence

    from elasticsearch import AsyncElasticsearch, Elasticsearch


logger = logging.getLogger(__name__)

ROOT = "neardup"
F_POSITIONS = f"{ROOT}.positions"
F_SIG = f"{ROOT}.sig"
F_BANDS = f"{ROOT}.bands"
F_FINGERPRINT = f"{ROOT}.fingerprint"
F_TAG = f"{ROOT}.tag"
F_EMPTY = f"{ROOT}.empty"
F_SEQ = f"{ROOT}.seq"
F_GROUP = f"{ROOT}.group"
F_STATUS = f"{ROOT}.status"
F_DUPLICATE_OF = f"{ROOT}.duplicate_of"
F_SHARED = f"{ROOT}.shared"
F_KEY = f"{ROOT}.key"
F_WRITER = f"{ROOT}.writer"
F_CRAWL = f"{ROOT}.crawl"
#: What of the page was sketched (Sketch.sketched, words, page_words): the kept side of a duplicate's evidence.
F_SKETCHED = f"{ROOT}.sketched"
F_WORDS = f"{ROOT}.words"
F_PAGE_WORDS = f"{ROOT}.page_words"
TEXT_FIELDS = (F_SKETCHED, F_WORDS, F_PAGE_WORDS)

KEPT, DUPLICATE, PENDING, UNCHECKED = "kept", "duplicate", "pending", "unchecked"

COMPONENT_TEMPLATE = "neardup-sketch-fields"
INDEX_TEMPLATE = "neardup"
#: Keys longer than this (bytes) are stored but not indexed (a keyword term must stay below 32766 bytes).
_KEY_IGNORE_ABOVE = 4096
#: ``error.type`` of creating an index that exists (a race between two creators).
ALREADY_EXISTS = "resource_already_exists_exception"
INDEX_NOT_FOUND = "index_not_found_exception"


def sketch_properties() -> dict[str, Any]:
    """The mapping of the ``neardup`` object (see the module doc)."""
    return {
        "type": "object",
        "dynamic": "strict",
        "properties": {
            "positions": {"type": "keyword", "doc_values": False},
            "sig": {"type": "binary", "doc_values": True},
            "bands": {"type": "keyword", "doc_values": False},
            "fingerprint": {"type": "keyword"},
            "tag": {"type": "keyword"},
            "empty": {"type": "boolean"},
            "seq": {"type": "long"},
            "group": {"type": "keyword"},
            "status": {"type": "keyword"},
            "duplicate_of": {"type": "keyword", "ignore_above": _KEY_IGNORE_ABOVE},
            "shared": {"type": "integer"},
            "key": {"type": "keyword", "ignore_above": _KEY_IGNORE_ABOVE},
            "writer": {"type": "keyword", "index": False, "doc_values": False},
            "crawl": {"type": "keyword", "index": False, "doc_values": False},
            # Read as doc values by the evidence of groups and collapse; never searched.
            "sketched": {"type": "keyword", "index": False},
            "words": {"type": "integer", "index": False},
            "page_words": {"type": "integer", "index": False},
        },
    }


def index_mappings() -> dict[str, Any]:
    """``mappings`` for a new index: the ``neardup`` object (the page's own fields stay dynamic)."""
    return {"properties": {ROOT: sketch_properties()}}


def put_index_template(
    client: Elasticsearch, patterns: Sequence[str], *, name: str = INDEX_TEMPLATE, priority: int = 100
) -> None:
    """Install the component template ``neardup-sketch-fields`` and an index template ``name`` using it.

    New indices whose names match ``patterns`` (e.g. ``["pages-*"]``) then get the ``neardup`` fields
    without further setup. Existing indices are not changed (see :func:`ensure_index`).
    """
    if not patterns:
        raise ValueError("put_index_template needs at least one index pattern")
    client.cluster.put_component_template(
        name=COMPONENT_TEMPLATE,
        template={"mappings": index_mappings()},
        meta={"description": "near-duplicate sketch fields (scrapy-neardup)"},
    )
    client.indices.put_index_template(
        name=name, index_patterns=list(patterns), composed_of=[COMPONENT_TEMPLATE], priority=priority
    )
    logger.debug("installed index template %s for %s", name, list(patterns))


#: Replicas of every index the project creates: one copy on each of two nodes when the cluster has two or more,
#: none on a single node (which therefore stays green instead of yellow with an unassignable replica).
REPLICA_SETTINGS: dict[str, str] = {"auto_expand_replicas": "0-1"}


def ensure_index(
    client: Elasticsearch, index: str, *, shards: int | None = None, settings: dict[str, Any] | None = None,
    request_timeout: float | None = None, cluster_settings: bool = False,
) -> bool:
    """Create ``index`` with the ``neardup`` mapping, or add the mapping to an existing index.

    The one place indices are created (:func:`ensure_index_async` runs the same steps). Two processes creating it
    at once are fine: the loser's ``resource_already_exists_exception`` (recognised by its ``error.type``) is taken
    as "exists".

    Args:
        shards: primary shards of a new index (default: the cluster's, normally 1).
        settings: further index settings for a new index.
        request_timeout: the client's request timeout; the requests then wait at least
            :data:`INDEX_SETUP_TIMEOUT` seconds.
        cluster_settings: a new index gets no settings of ours (shards and replicas then come from the cluster's
            index templates and defaults, as for a user's own search index), only the ``neardup`` mapping.

    Returns:
        True when the index was created by this call.

    Raises:
        EsError: the existing index maps a ``neardup`` field differently (the message names the conflict).
    """
    return run(_setup_client(client, request_timeout),
               _ensure_index_steps(index, _create_arguments(shards, settings, cluster_settings)))


#: Seconds at least for the requests of :func:`ensure_index` given a ``request_timeout``: they change the cluster
#: state (creating an index waits for its primary shard to start, a mapping update for the master to publish it),
#: which takes far longer than a document request (0.3-0.5 s for each on OpenSearch 2.19 on a busy 2-core machine),
#: so a short per-request timeout meant for checks (``NEARDUP_ES_TIMEOUT=0.5``) must not make them fail.
INDEX_SETUP_TIMEOUT = 30.0


async def ensure_index_async(
    client: AsyncElasticsearch, index: str, *, shards: int | None = None, settings: dict[str, Any] | None = None,
    request_timeout: float | None = None, cluster_settings: bool = False,
) -> bool:
    """:func:`ensure_index` with an asynchronous client (the same steps)."""
    return await run_async(_setup_client(client, request_timeout),
                           _ensure_index_steps(index, _create_arguments(shards, settings, cluster_settings)))


def _setup_client(client: Any, request_timeout: float | None) -> Any:
    return client if request_timeout is None else client.options(
        request_timeout=max(request_timeout, INDEX_SETUP_TIMEOUT))


def create_missing_steps(index: str, arguments: dict[str, Any]) -> Steps[bool]:
    """Create ``index`` (``indices.create`` ``arguments``) when missing; a race with another creator is fine.
    True when these steps created it."""
    # lazy: elasticsearch-py takes ~0.6 s to import, which every `neardup` command would pay at start-up
    from elasticsearch import BadRequestError

    validate_index_name(index)
    if (yield Call("indices.exists", {"index": index})):
        return False
    try:
        yield Call("indices.create", {"index": index, **arguments})
    except BadRequestError as exc:
        if error_type(exc) != ALREADY_EXISTS:
            raise
        return False
    logger.debug("created index %s", index)
    return True


def _ensure_index_steps(index: str, arguments: dict[str, Any]) -> Steps[bool]:
    # lazy: elasticsearch-py takes ~0.6 s to import, which every `neardup` command would pay at start-up
    from elasticsearch import ApiError

    if (yield from create_missing_steps(index, arguments)):
        return True
    try:
        yield Call("indices.put_mapping", {"index": index, "properties": {ROOT: sketch_properties()}})
    except ApiError as exc:
        if exc.meta.status in (400, 409):  # a mapping conflict; other failures are the caller's to retry
            raise _mapping_conflict(index, exc) from None
        raise
    return False


def _create_arguments(shards: int | None, settings: dict[str, Any] | None, cluster_settings: bool) -> dict[str, Any]:
    if cluster_settings:
        return {"mappings": index_mappings()}
    body_settings = {**REPLICA_SETTINGS, **(settings or {})}
    if "number_of_replicas" in body_settings:  # the caller's fixed count wins over the auto range
        body_settings.pop("auto_expand_replicas")
    if shards is not None:
        body_settings["number_of_shards"] = shards
    return {"mappings": index_mappings(), "settings": body_settings or None}


def _mapping_conflict(index: str, exc: Any) -> EsError:
    return EsError(f"index {index} cannot take the near-duplicate fields: {_error_reason(exc)}")


def index_tags(client: Elasticsearch, index: str, *, limit: int = 10) -> list[str]:
    """The sketch parameter tags present in ``index`` (most frequent first; empty when it does not exist)."""
    return run(client, _tags_steps(index, limit, missing_ok=True))


def _tags_steps(index: str, limit: int, *, missing_ok: bool) -> Steps[list[str]]:
    validate_index_name(index)
    if missing_ok and not (yield Call("indices.exists", {"index": index})):
        return []
    response = yield Call("search", {"index": index, "size": 0,
                                     "aggs": {"tags": {"terms": {"field": F_TAG, "size": limit}}}})
    return [bucket["key"] for bucket in response["aggregations"]["tags"]["buckets"]]


def _require_tag_steps(index: str, tag: str, *, missing_ok: bool, settings: bool) -> Steps[None]:
    others = [other for other in (yield from _tags_steps(index, 10, missing_ok=missing_ok)) if other != tag]
    if others:
        raise TagMismatch(tag_mismatch(index, others, tag, settings=settings))


def require_tag(client: Elasticsearch, index: str, tag: str) -> None:
    """Refuse to mix sketch parameters in one index: sketches with different tags are never comparable, so
    writing them would silently overwrite documents that group discovery then ignores. A missing index is fine.

    Raises:
        TagMismatch: ``index`` holds documents sketched with another tag; the message names both.
    """
    run(client, _require_tag_steps(index, tag, missing_ok=True, settings=False))


async def require_tag_async(client: AsyncElasticsearch, index: str, tag: str) -> None:
    """:func:`require_tag` for the crawler backend and the search index, which have created the index: a missing
    one is the node's ``index_not_found_exception`` (the backend waits for an index just created elsewhere), and
    the message names the ``NEARDUP_*`` settings."""
    await run_async(client, _require_tag_steps(index, tag, missing_ok=False, settings=True))


def tag_mismatch(index: str, others: Sequence[str], tag: str, *, settings: bool = False) -> str:
    """The one line refusing an index that holds sketches of other parameters, naming what to do (the command's
    options, or the crawl's ``NEARDUP_*`` settings)."""
    change = content_change(others[0], tag) if len(others) == 1 else None
    if change is not None:
        mode = parse_tag(others[0]).content
        keep = f"NEARDUP_CONTENT={mode!r}" if settings else f"--content {mode}"
        keep = f", or keep it with {keep}" if still_made(others[0]) else ""
        return (f"index {index}: {change}; re-sketch it with `neardup es backfill --force` (documents with the "
                f"text), or use another index{keep}")
    options = ("NEARDUP_NUM_PERM, NEARDUP_SHINGLE, NEARDUP_SHINGLE_SIZE, NEARDUP_SEED, NEARDUP_CONTENT" if settings
               else "--num-perm, --shingle, --shingle-size, --seed, --content")
    return (f"index {index} holds sketches made with {', '.join(others)}, this run sketches with {tag}: they cannot "
            f"be compared. Use the parameters the index was built with ({options}), another index, or "
            "`neardup es backfill` with these parameters to re-sketch it")


def position_tokens(signature: np.ndarray) -> list[str]:
    """Broder's ``"i_v"`` tokens of a signature's stored values (:meth:`StoredSignature.tokens`)."""
    return StoredSignature(stored_values(signature), "").tokens()


def signature_from_tokens(tokens: Sequence[str], num_perm: int) -> np.ndarray:
    """The stored values (``uint16[k]``) back from position tokens (:meth:`StoredSignature.from_tokens`).

    Raises:
        ValueError: malformed tokens (see there).
    """
    return StoredSignature.from_tokens(tokens, num_perm, "").values


def signatures_from_token_lists(token_lists: Sequence[Sequence[str]], num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    """Many stored signatures back from their tokens
    (:func:`scrapy_neardup.core.stored_signature.values_from_token_lists`)."""
    return values_from_token_lists(token_lists, num_perm)


def fingerprint_hex(fingerprint: int) -> str:
    """The 64-bit fingerprint as 16 lowercase hex digits (the stored form)."""
    return f"{fingerprint:016x}"


def sketch_fields(sketch: Sketch, *, seq: int | None = None, **extra: Any) -> dict[str, Any]:
    """The ``neardup`` object of a document: positions (unless empty), fingerprint, tag, empty, seq, and what of the
    page was sketched (:func:`text_fields`).

    ``extra`` adds further ``neardup`` fields by their short names (``group=``, ``status=``, ``key=``, ...).
    """
    fields: dict[str, Any] = {
        "fingerprint": fingerprint_hex(sketch.fingerprint),
        "tag": sketch.tag,
        "empty": sketch.empty,
    }
    if not sketch.empty:
        fields.update(stored_fields(StoredSignature.from_sketch(sketch)))
    fields.update(text_fields(sketch))
    if seq is not None:
        fields["seq"] = seq
    fields.update(extra)
    return fields


def text_fields(sketch: Sketch) -> dict[str, Any]:
    """``sketched``, ``words`` and ``page_words`` of a document (what of the page was sketched, when known; the
    counts only when counted)."""
    if not sketch.sketched:
        return {}
    fields: dict[str, Any] = {"sketched": sketch.sketched}
    if sketch.words:
        fields["words"] = sketch.words
    if sketch.page_words:
        fields["page_words"] = sketch.page_words
    return fields


def stored_sketched(values: Any) -> Sketched | None:
    """What of a page was sketched, from its document's ``neardup`` object or its doc values (by short name, a
    value or a one-element list); ``None`` for a document written before these fields existed."""
    def one(name: str) -> Any:
        value = values.get(name) if isinstance(values, dict) else None
        return value[0] if isinstance(value, list) and value else value

    kind = one("sketched")
    if not isinstance(kind, str) or not kind:
        return None
    words, page_words = one("words"), one("page_words")
    return Sketched(kind, words if isinstance(words, int) else 0, page_words if isinstance(page_words, int) else 0)


def stored_fields(stored: StoredSignature, *, positions: bool = True) -> dict[str, Any]:
    """The fields holding a stored signature: ``positions`` (unless ``positions=False``: an index whose
    candidates come from the band query needs none; they are 55% of a page's size), ``sig`` and ``bands``."""
    fields: dict[str, Any] = {"sig": stored.encode(), "bands": stored.band_tokens()}
    if positions:
        fields["positions"] = stored.tokens()
    return fields


def error_type(exc: Any) -> str:
    """The ``error.type`` of an Elasticsearch error response (``""`` when it has none)."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("type", ""))
    return ""


def _error_reason(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("reason", ""))
    return str(exc)
