"""The near-duplicate fields of an Elasticsearch document, their mapping, and the index template.

Every field lives in one object, ``neardup``, next to the page's own fields::

    neardup.positions     keyword[k]  Broder's (position, value) pairs "i_v": position i (decimal) and the
                                      low 16 bits of the signature's value there (lowercase hex), e.g.
                                      "17_3f2a". Indexed, no doc values: only term queries touch it. Two
                                      pages share token "i_v" exactly when their signatures agree at position
                                      i in those bits, so the number of tokens they share is the t-of-k count
                                      ~ Binomial(k, p) with p = r + (1 - r) / 65536 (b-bit minwise hashing,
                                      Li & König 2010): the very values and rule of the embedded index
                                      (:mod:`scrapy_neardup.core.index`), so both give the same answers.
    neardup.fingerprint   keyword     the 64-bit fingerprint of the normalized text, 16 hex digits:
                                      equal for exact duplicates.
    neardup.tag           keyword     the sketch parameter tag (k, shingling, seed, scheme); only sketches
                                      with equal tags are ever compared.
    neardup.empty         boolean     the text had no shingles (no positions are stored).
    neardup.seq           long        indexing order (smaller = indexed earlier): the "first indexed" rule.
    neardup.group         keyword     near-duplicate group id (the group's representative's _id; a page in no
                                      group is its own group). Single-valued with doc values: usable by
                                      ``collapse`` and aggregations.
    neardup.status        keyword     "kept" (group representative or alone), "duplicate", "pending"
                                      (written by the crawler backend, decision not made yet), or
                                      "unchecked" (the crawler backend could not check the page, which its
                                      crawl passed through; written later so that group discovery sees it,
                                      never a candidate of the crawler's checks).
    neardup.duplicate_of  keyword     _id (search index) or key (backend) of the kept page it duplicates.
    neardup.shared        integer     positions shared with ``duplicate_of``.
    neardup.key           keyword     the backend's page key (URL); the _id of a search document is its key.

``neardup`` is mapped ``dynamic: strict``: a misspelt field is refused instead of silently mapped.

Why 16 bits: besides matching the embedded index, a token is shared by about ``N / 65536`` documents of an
index of ``N``, so at scale most tokens already exist in the term dictionary, which makes indexing them
cheaper (measured: the cost of the sketch fields per document falls by half when tokens repeat, at 8 bits);
the spurious agreement of unrelated positions, ``(1 - r) / 65536``, is far below the estimate's own noise
``sqrt(r (1 - r) / k)``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from scrapy_neardup.core.sketch import Sketch

from .client import EsError
from .names import validate_index_name

if TYPE_CHECKING:
    from collections.abc import Sequence

    from elasticsearch import Elasticsearch

__all__ = [
    "COMPONENT_TEMPLATE",
    "INDEX_TEMPLATE",
    "ROOT",
    "VALUE_BITS",
    "F_DUPLICATE_OF",
    "F_EMPTY",
    "F_FINGERPRINT",
    "F_GROUP",
    "F_KEY",
    "F_POSITIONS",
    "F_SEQ",
    "F_SHARED",
    "F_STATUS",
    "F_TAG",
    "ensure_index",
    "fingerprint_hex",
    "index_mappings",
    "position_tokens",
    "put_template",
    "signature_from_tokens",
    "signatures_from_token_lists",
    "sketch_fields",
    "sketch_properties",
    "stored_values",
]

logger = logging.getLogger(__name__)

ROOT = "neardup"
F_POSITIONS = f"{ROOT}.positions"
F_FINGERPRINT = f"{ROOT}.fingerprint"
F_TAG = f"{ROOT}.tag"
F_EMPTY = f"{ROOT}.empty"
F_SEQ = f"{ROOT}.seq"
F_GROUP = f"{ROOT}.group"
F_STATUS = f"{ROOT}.status"
F_DUPLICATE_OF = f"{ROOT}.duplicate_of"
F_SHARED = f"{ROOT}.shared"
F_KEY = f"{ROOT}.key"

KEPT, DUPLICATE, PENDING, UNCHECKED = "kept", "duplicate", "pending", "unchecked"

COMPONENT_TEMPLATE = "neardup-sketch-fields"
INDEX_TEMPLATE = "neardup"
#: Keys longer than this (bytes) are stored but not indexed (a keyword term must stay below 32766 bytes).
_KEY_IGNORE_ABOVE = 4096
_MAX_POSITIONS = 65536
#: Bits of each signature value kept in a token (see the module doc).
VALUE_BITS = 16
_VALUE_MASK = (1 << VALUE_BITS) - 1
_PREFIXES = [f"{i}_" for i in range(1024)]


def sketch_properties() -> dict[str, Any]:
    """The mapping of the ``neardup`` object (see the module doc)."""
    return {
        "type": "object",
        "dynamic": "strict",
        "properties": {
            "positions": {"type": "keyword", "doc_values": False},
            "fingerprint": {"type": "keyword"},
            "tag": {"type": "keyword"},
            "empty": {"type": "boolean"},
            "seq": {"type": "long"},
            "group": {"type": "keyword"},
            "status": {"type": "keyword"},
            "duplicate_of": {"type": "keyword", "ignore_above": _KEY_IGNORE_ABOVE},
            "shared": {"type": "integer"},
            "key": {"type": "keyword", "ignore_above": _KEY_IGNORE_ABOVE},
        },
    }


def index_mappings() -> dict[str, Any]:
    """``mappings`` for a new index: the ``neardup`` object (the page's own fields stay dynamic)."""
    return {"properties": {ROOT: sketch_properties()}}


def put_template(
    client: Elasticsearch, patterns: Sequence[str], *, name: str = INDEX_TEMPLATE, priority: int = 100
) -> None:
    """Install the component template ``neardup-sketch-fields`` and an index template ``name`` using it.

    New indices whose names match ``patterns`` (e.g. ``["pages-*"]``) then get the ``neardup`` fields
    without further setup. Existing indices are not changed (see :func:`ensure_index`).
    """
    if not patterns:
        raise ValueError("put_template needs at least one index pattern")
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
    client: Elasticsearch, index: str, *, shards: int | None = None, settings: dict[str, Any] | None = None
) -> bool:
    """Create ``index`` with the ``neardup`` mapping, or add the mapping to an existing index.

    Args:
        shards: primary shards of a new index (default: the cluster's, normally 1).
        settings: further index settings for a new index.

    Returns:
        True when the index was created by this call.

    Raises:
        EsError: the existing index maps a ``neardup`` field differently (the message names the conflict).
    """
    from elasticsearch import ApiError, BadRequestError

    validate_index_name(index)
    body_settings = {**REPLICA_SETTINGS, **(settings or {})}
    if "number_of_replicas" in body_settings:  # the caller's fixed count wins over the auto range
        body_settings.pop("auto_expand_replicas")
    if shards is not None:
        body_settings["number_of_shards"] = shards
    if not client.indices.exists(index=index):
        try:
            client.indices.create(index=index, mappings=index_mappings(), settings=body_settings or None)
            logger.debug("created index %s", index)
            return True
        except BadRequestError as exc:
            if _error_type(exc) != "resource_already_exists_exception":
                raise
    try:
        client.indices.put_mapping(index=index, properties={ROOT: sketch_properties()})
    except ApiError as exc:
        raise EsError(f"index {index} cannot take the near-duplicate fields: {_error_reason(exc)}") from None
    return False


class TagMismatch(EsError):
    """The index holds sketches made with other parameters (another tag) than the ones asked for."""


def index_tags(client: Elasticsearch, index: str, *, limit: int = 10) -> list[str]:
    """The sketch parameter tags present in ``index`` (most frequent first; empty when it does not exist)."""
    validate_index_name(index)
    if not client.indices.exists(index=index):
        return []
    response = client.search(index=index, size=0, aggs={"tags": {"terms": {"field": F_TAG, "size": limit}}})
    return [bucket["key"] for bucket in response["aggregations"]["tags"]["buckets"]]


def require_tag(client: Elasticsearch, index: str, tag: str) -> None:
    """Refuse to mix sketch parameters in one index: sketches with different tags are never comparable, so
    writing them would silently overwrite documents that group discovery then ignores.

    Raises:
        TagMismatch: ``index`` holds documents sketched with another tag; the message names both.
    """
    others = [other for other in index_tags(client, index) if other != tag]
    if others:
        raise TagMismatch(
            f"index {index} holds sketches made with {', '.join(others)}, this run sketches with {tag}: "
            "they cannot be compared. Use the parameters the index was built with (--num-perm, --shingle, "
            "--shingle-size, --seed), another index, or `neardup es backfill` with these parameters to re-sketch it"
        )


def position_tokens(signature: np.ndarray) -> list[str]:
    """Broder's ``"i_v"`` tokens of a signature: position ``i`` in decimal, the low 16 bits of its value ``v`` in
    lowercase hex."""
    values = (np.asarray(signature, dtype=np.uint32) & _VALUE_MASK).tolist()
    if len(values) <= len(_PREFIXES):
        return [p + format(v, "x") for p, v in zip(_PREFIXES, values, strict=False)]
    return [f"{i}_{v:x}" for i, v in enumerate(values)]


def signature_from_tokens(tokens: Sequence[str], num_perm: int) -> np.ndarray:
    """The stored signature (``uint32[k]`` holding each value's low 16 bits) back from its tokens (the inverse
    of :func:`position_tokens` up to those bits; compare it with :func:`stored_values` of a sketch).

    Raises:
        ValueError: a malformed token, a position outside ``[0, k)``, a position missing or repeated, or a
            value of more than 16 bits.
    """
    if not 0 < num_perm <= _MAX_POSITIONS:
        raise ValueError(f"num_perm must lie in [1, {_MAX_POSITIONS}], got {num_perm}")
    signature = np.zeros(num_perm, dtype=np.uint32)
    seen = np.zeros(num_perm, dtype=bool)
    for token in tokens:
        position, sep, value = token.partition("_")
        if not sep:
            raise ValueError(f"malformed position token {token!r}")
        i = int(position)
        if not 0 <= i < num_perm or seen[i]:
            raise ValueError(f"position {i} out of range or repeated in a signature of {num_perm} positions")
        stored = int(value, 16)
        if stored > _VALUE_MASK:
            raise ValueError(f"value of position token {token!r} has more than {VALUE_BITS} bits")
        signature[i] = stored
        seen[i] = True
    if not seen.all():
        raise ValueError(f"signature has {int(seen.sum())} of {num_perm} positions")
    return signature


def signatures_from_token_lists(token_lists: Sequence[Sequence[str]], num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    """Many stored signatures back from their tokens at once (what :func:`signature_from_tokens` does for one).

    A sweep of a million documents reads 128 million tokens; parsing them one by one in Python would take a
    minute, so the tokens of all documents are joined into one byte string and their decimal positions and
    hex values are read with array arithmetic (digit times its power of 10 or 16, summed per token).

    Returns:
        ``(signatures, valid)``: ``uint32[n, k]`` (rows of invalid lists are zero) and ``bool[n]``; a list is
        invalid when it does not hold exactly one well-formed token ``"i_v"`` for each position ``i < k``
        with ``v < 2**16``.
    """
    n = len(token_lists)
    signatures = np.zeros((n, num_perm), dtype=np.uint32)
    valid = np.fromiter((len(tokens) == num_perm for tokens in token_lists), dtype=bool, count=n)
    rows = np.flatnonzero(valid)
    if rows.size == 0:
        return signatures, valid
    try:
        blob = "_".join(token for i in rows.tolist() for token in token_lists[i]).encode("ascii")
    except (UnicodeEncodeError, TypeError):
        return _parse_one_by_one(token_lists, num_perm, signatures, valid)
    parsed = _parse_fields(np.frombuffer(blob, dtype=np.uint8), 2 * rows.size * num_perm)
    if parsed is None:
        return _parse_one_by_one(token_lists, num_perm, signatures, valid)
    positions = parsed[0::2].reshape(rows.size, num_perm)
    values = parsed[1::2].reshape(rows.size, num_perm)
    good = (positions < num_perm).all(axis=1) & (values <= _VALUE_MASK).all(axis=1)
    # Each position exactly once: the positions of a row, sorted, are 0 .. k-1.
    good &= (np.sort(np.where(positions < num_perm, positions, 0), axis=1) == np.arange(num_perm)).all(axis=1)
    take = rows[good]
    signatures[take[:, None], positions[good]] = values[good]
    valid[rows[~good]] = False
    return signatures, valid


# Value of each ASCII digit in hex ("0"-"9", "a"-"f"); 255 for any other byte.
_DIGIT = np.full(256, 255, dtype=np.int64)
_DIGIT[np.frombuffer(b"0123456789abcdef", dtype=np.uint8)] = np.arange(16)
_UNDERSCORE = ord("_")
_MAX_FIELD_DIGITS = 5
# Weight of a digit by field parity (0: decimal position, 1: hex value) and digits after it.
_WEIGHTS = np.array([[10**e for e in range(_MAX_FIELD_DIGITS)], [16**e for e in range(_MAX_FIELD_DIGITS)]])


def _parse_fields(data: np.ndarray, fields: int) -> np.ndarray | None:
    """The ``fields`` numbers of ``"p_v_p_v..."`` (``p`` decimal, ``v`` hex), or ``None`` if malformed."""
    seps = np.flatnonzero(data == _UNDERSCORE)
    if seps.size != fields - 1:
        return None
    starts = np.concatenate(([0], seps + 1))
    ends = np.concatenate((seps, [data.size]))
    lengths = ends - starts
    if lengths.min() < 1 or lengths.max() > _MAX_FIELD_DIGITS:
        return None
    field_of = np.repeat(np.arange(fields), lengths)
    chars = np.delete(data, seps)
    digits = _DIGIT[chars]
    parity = field_of & 1  # even fields are positions
    if (digits == 255).any() or (digits[parity == 0] > 9).any():
        return None
    power = np.repeat(ends, lengths) - (np.arange(chars.size) + field_of) - 1  # digits after this one
    weight = _WEIGHTS[parity, power]
    return np.bincount(field_of, weights=digits * weight, minlength=fields).astype(np.int64)


def _parse_one_by_one(
    token_lists: Sequence[Sequence[str]], num_perm: int, signatures: np.ndarray, valid: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The slow path, for a page of hits holding a malformed token: each list on its own."""
    for i in np.flatnonzero(valid).tolist():
        try:
            signatures[i] = signature_from_tokens(token_lists[i], num_perm)
        except (ValueError, TypeError, AttributeError):
            valid[i] = False
    return signatures, valid


def stored_values(signature: np.ndarray) -> np.ndarray:
    """The part of a signature that Elasticsearch stores and compares: each value's low 16 bits (uint32)."""
    return (np.asarray(signature) & _VALUE_MASK).astype(np.uint32)


def fingerprint_hex(fingerprint: int) -> str:
    """The 64-bit fingerprint as 16 lowercase hex digits (the stored form)."""
    return f"{fingerprint:016x}"


def sketch_fields(sketch: Sketch, *, seq: int | None = None, **extra: Any) -> dict[str, Any]:
    """The ``neardup`` object of a document: positions (unless empty), fingerprint, tag, empty, seq.

    ``extra`` adds further ``neardup`` fields by their short names (``group=``, ``status=``, ``key=``, ...).
    """
    fields: dict[str, Any] = {
        "fingerprint": fingerprint_hex(sketch.fingerprint),
        "tag": sketch.tag,
        "empty": sketch.empty,
    }
    if not sketch.empty:
        fields["positions"] = position_tokens(sketch.signature)
    if seq is not None:
        fields["seq"] = seq
    fields.update(extra)
    return fields


def _error_type(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("type", ""))
    return ""


def _error_reason(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("reason", ""))
    return str(exc)
