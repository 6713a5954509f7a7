"""What a groups run keeps of each swept document, compactly: the keep rule that ranks pages, the rows' current
group fields (:class:`RowStates`), and the rows themselves (:class:`SweptDocs`: ids in one byte string, ``seq``,
the keep rule's value, signatures spilled to a temporary file)."""

from __future__ import annotations

import math
import tempfile
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from scrapy_neardup.core.stored_signature import decode_many

from ..indexing import get_field
from ..mapping import F_DUPLICATE_OF, F_GROUP, F_SEQ, F_SIG, F_STATUS, KEPT
from ..names import validate_field_name

#: The seq of documents without one (unchecked pages): they sort last.
NO_SEQ = np.iinfo(np.int64).max


@dataclass(frozen=True)
class KeepRule:
    """Which page of a group to keep (its representative).

    Attributes:
        kind: ``"first"`` (smallest ``neardup.seq``: indexed first), ``"shortest-url"`` (shortest value of
            ``field``; ``field=None`` uses the ``_id``), or ``"highest"`` (largest numeric value of ``field``).
            Pages missing the value rank last; ties go to the earlier indexed page, then the smaller ``_id``.
        field: the document field the rule reads (dotted path).
    """

    kind: Literal["first", "shortest-url", "highest"] = "first"
    field: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("first", "shortest-url", "highest"):
            raise ValueError(f"keep rule must be first, shortest-url or highest, got {self.kind!r}")
        if self.kind == "highest" and not self.field:
            raise ValueError("the 'highest' keep rule needs a numeric field")
        if self.field is not None:
            validate_field_name(self.field)

    def value_of(self, doc_id: str, source: dict[str, Any]) -> float:
        """The number this rule minimizes for one document (``inf`` when the value is missing)."""
        if self.kind == "first":
            return 0.0
        value = doc_id if self.field is None else get_field(source, self.field)
        if self.kind == "shortest-url":
            return float(len(value)) if isinstance(value, str) and value else math.inf
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            return math.inf
        return -float(value)


State = tuple[str | None, str | None, str | None]


class RowStates:
    """``(group, status, duplicate_of)`` of some rows, added in increasing row order, compactly: after an
    ``--assign`` run every duplicate (a sixth of a typical index) has one, and as a dict of tuples of strings
    each cost ~300 B, a third of the client's memory at 1M documents. Here: the row (8 B), a status code (2 B),
    the two strings' ends (16 B) and their UTF-8 bytes in one buffer; ~45 B a row."""

    def __init__(self) -> None:
        self._rows = array("q")
        self._status = array("h")
        self._ends = array("q")  # two per row: end of its group string, end of its duplicate_of string
        self._none = array("b")  # bit 1: group is None, bit 2: duplicate_of is None
        self._text = bytearray()
        self._codes: dict[str | None, int] = {}
        self._names: list[str | None] = []

    def add(self, row: int, state: State) -> None:
        if self._rows and row <= self._rows[-1]:
            raise ValueError("rows must be added in increasing order")
        group, status, duplicate_of = state
        code = self._codes.get(status)
        if code is None:
            code = self._codes[status] = len(self._names)
            self._names.append(status)
        self._rows.append(row)
        self._status.append(code)
        self._none.append((group is None) | (duplicate_of is None) << 1)
        for text in (group, duplicate_of):
            self._text += (text or "").encode("utf-8", "surrogatepass")
            self._ends.append(len(self._text))

    def get(self, row: int, default: State) -> State:
        i = bisect_left(self._rows, row)
        if i == len(self._rows) or self._rows[i] != row:
            return default
        start = self._ends[2 * i - 1] if i else 0
        middle, end = self._ends[2 * i], self._ends[2 * i + 1]
        none = self._none[i]
        group = None if none & 1 else self._text[start:middle].decode("utf-8", "surrogatepass")
        duplicate_of = None if none & 2 else self._text[middle:end].decode("utf-8", "surrogatepass")
        return group, self._names[self._status[i]], duplicate_of

    def rows(self) -> Iterator[int]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def memory_bytes(self) -> int:
        return sum(a.itemsize * len(a) for a in (self._rows, self._status, self._ends, self._none)) + len(self._text)


class SweptDocs:
    """What a sweep keeps of each document, compactly (see the module doc): row ``i`` is the ``i``-th document
    read. Signatures go to a temporary file (:meth:`values` maps it back); the ``_id`` values to one byte string.
    """

    def __init__(self, num_perm: int, keep: KeepRule, spill_dir: str | None = None) -> None:
        self.num_perm = num_perm
        self.keep = keep
        self._spill = tempfile.TemporaryFile(dir=spill_dir)  # noqa: SIM115 - lives as long as this object
        self._ids = bytearray()
        self._ends: list[np.ndarray] = []
        self._seq: list[np.ndarray] = []
        self._rank: list[np.ndarray] = []
        self._plain: list[np.ndarray] = []
        #: current (group, status, duplicate_of) of the rows whose fields are not "kept, own group"
        self.state = RowStates()
        self.size = 0
        #: rows with a signature in the spill file (the first ones; rows added without come after them)
        self.with_values = 0
        self.malformed = 0
        self.max_seq: int | None = None
        self._frozen: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    def close(self) -> None:
        self._spill.close()

    def add_page(self, hits: list[dict[str, Any]], with_values: bool = True) -> None:
        """Record one sweep page (hits with ``fields`` holding the doc values, and ``_source`` for keep fields);
        documents whose ``neardup.sig`` cannot be read are counted in ``malformed`` and left out."""
        fields = [hit.get("fields") or {} for hit in hits]
        if with_values:
            values, valid = decode_many([(f.get(F_SIG) or [None])[0] for f in fields], self.num_perm)
            if not valid.all():
                self.malformed += int(np.count_nonzero(~valid))
                keep = np.flatnonzero(valid)
                rows = keep.tolist()
                hits, fields, values = [hits[i] for i in rows], [fields[i] for i in rows], values[keep]
            if self.with_values != self.size:
                raise ValueError("rows with signatures must come before rows without")
            self._spill.write(values.tobytes())
            self.with_values += len(hits)
        ids = [hit["_id"].encode("utf-8", "surrogatepass") for hit in hits]
        lengths = np.fromiter((len(i) for i in ids), dtype=np.int64, count=len(ids))
        self._ends.append(len(self._ids) + np.cumsum(lengths))
        self._ids += b"".join(ids)
        # int64: seq values are nanosecond clocks (~1.8e18), beyond float64's exact integers.
        seq = np.fromiter((int((f.get(F_SEQ) or [NO_SEQ])[0]) for f in fields), dtype=np.int64, count=len(hits))
        self._seq.append(seq)
        known = seq[seq != NO_SEQ]
        if known.size:
            top = int(known.max())
            self.max_seq = top if self.max_seq is None else max(self.max_seq, top)
        if self.keep.kind != "first":
            self._rank.append(np.array(
                [self.keep.value_of(hit["_id"], hit.get("_source") or {}) for hit in hits], dtype=np.float64))
        plain = np.ones(len(hits), dtype=bool)
        for i, (hit, f) in enumerate(zip(hits, fields, strict=True)):
            state = ((f.get(F_GROUP) or [None])[0], (f.get(F_STATUS) or [None])[0],
                     (f.get(F_DUPLICATE_OF) or [None])[0])
            if state != (hit["_id"], KEPT, None):
                plain[i] = False
                self.state.add(self.size + i, state)
        self._plain.append(plain)
        self.size += len(hits)
        self._frozen = None

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        if self._frozen is None:
            def join(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
                return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

            self._ends, self._seq = [join(self._ends, np.int64)], [join(self._seq, np.int64)]
            self._rank, self._plain = [join(self._rank, np.float64)], [join(self._plain, bool)]
            self._frozen = (self._ends[0], self._seq[0], self._rank[0], self._plain[0])
        return self._frozen

    def id(self, row: int) -> str:
        ends = self._arrays()[0]
        start = int(ends[row - 1]) if row else 0
        return self._ids[start : int(ends[row])].decode("utf-8", "surrogatepass")

    def ids(self, rows: Iterable[int]) -> list[str]:
        return [self.id(r) for r in rows]

    @property
    def seq(self) -> np.ndarray:
        return self._arrays()[1]

    def seq_of(self, rows: np.ndarray) -> np.ndarray:
        """``seq[rows]`` (``rows`` ascending) without joining the per-page arrays first: the representative
        linkage ranks its rows while the pair finding's arrays are still held, and a join then (17 bytes a
        document, the per-page arrays freed in between) raised the client's peak by as much at 1M documents."""
        if self._frozen is not None:
            return self._frozen[1][rows]
        sizes = np.fromiter((part.size for part in self._seq), dtype=np.int64, count=len(self._seq))
        starts = np.concatenate(([0], np.cumsum(sizes)))
        out = np.empty(rows.size, dtype=np.int64)
        cuts = np.searchsorted(rows, starts)
        for page, part in enumerate(self._seq):
            lo, hi = cuts[page], cuts[page + 1]
            if hi > lo:
                out[lo:hi] = part[rows[lo:hi] - starts[page]]
        return out

    @property
    def rank(self) -> np.ndarray:
        rank = self._arrays()[2]
        return rank if rank.size == self.size else np.zeros(self.size)

    @property
    def plain(self) -> np.ndarray:
        """Rows whose current fields are ``group = _id``, ``status = kept`` and no ``duplicate_of``."""
        return self._arrays()[3]

    def values(self) -> np.ndarray:
        """The swept signatures (of the first :attr:`with_values` rows), ``uint16[n, k]``, mapped from the spill
        file."""
        self._spill.flush()
        if self.with_values == 0:
            return np.zeros((0, self.num_perm), dtype=np.uint16)
        return np.memmap(self._spill, dtype=np.uint16, mode="r", shape=(self.with_values, self.num_perm))

    def memory_bytes(self) -> int:
        """Client memory held per the structures above (ids, offsets, seq, rank, state flags and dict)."""
        ends, seq, rank, plain = self._arrays()
        return len(self._ids) + ends.nbytes + seq.nbytes + rank.nbytes + plain.nbytes + self.state.memory_bytes()



def rank_keys(docs: SweptDocs, rows: np.ndarray) -> np.ndarray:
    """The keep rule's order of ``rows`` (ascending) as distinct int64 keys: its value, then the earlier indexed
    (``seq``), then the smaller ``_id`` (read only for the rows tied on both, rarely any)."""
    # The default rule ranks by seq alone: no value array over the whole index for it (docs.rank would be one).
    value = np.zeros(rows.size) if docs.keep.kind == "first" else docs.rank[rows]
    seq = docs.seq_of(rows)
    order = np.lexsort((seq, value))
    tie = (value[order][1:] == value[order][:-1]) & (seq[order][1:] == seq[order][:-1])
    if tie.any():
        tied = np.unique(np.concatenate((order[1:][tie], order[:-1][tie])))
        ids = np.array(docs.ids(rows[tied].tolist()), dtype=object)
        id_rank = np.zeros(rows.size, dtype=np.int64)
        id_rank[tied[np.argsort(ids, kind="stable")]] = np.arange(tied.size)
        order = np.lexsort((id_rank, seq, value))
    keys = np.empty(rows.size, dtype=np.int64)
    keys[order] = np.arange(rows.size)
    return keys

