"""A host's template: the blocks it repeats on many of its pages, learned from a sample of them.

Design notes: docs/architecture.md#scrapy_neardupcorehost_template
"""

from __future__ import annotations

import heapq
import itertools
import math
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import mmh3
import numpy as np

from ..errors import TemplateFormatError

#: A block found on at least this share of a host's sampled pages is template.
TEMPLATE_SHARE = 0.3
#: ... and on at least this many of them.
MIN_BLOCK_PAGES = 3
#: Samples of fewer pages give an empty template.
MIN_SAMPLE = 4
#: Pages of a host a crawl samples before it learns the host's template: the first pages of a site (its top
#: pages, in a breadth-first crawl) are not all alike, and a sample of the first 32 took the text a family of index
#: pages shares for the template (measured on the accuracy corpora; 100 pages did not).
SAMPLE_PAGES = 100
#: Pages of a host a batch job learns its template from at most (a uniform sample of its pages beyond).
BATCH_SAMPLE = 2000

_HEADER = struct.Struct("<4sII")
_MAGIC = b"NDT1"


@dataclass(frozen=True, eq=False)
class HostTemplate:
    """The block hashes a host repeats on many of its pages.

    Attributes:
        hashes: sorted distinct ``uint64`` block hashes (see :func:`scrapy_neardup.core.blocks.split_blocks`).
        pages: how many pages it was learned from (0: an empty template made for a host without enough pages).
    """

    hashes: np.ndarray
    pages: int

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HostTemplate):
            return NotImplemented
        return self.pages == other.pages and np.array_equal(self.hashes, other.hashes)

    def __hash__(self) -> int:
        return hash((self.pages, self.hashes.tobytes()))

    @property
    def empty(self) -> bool:
        """No block is template."""
        return self.hashes.size == 0

    def to_bytes(self) -> bytes:
        """A compact encoding (12-byte header, 8 bytes a block) read back by :meth:`from_bytes`."""
        return _HEADER.pack(_MAGIC, self.pages, self.hashes.size) + self.hashes.astype("<u8").tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> HostTemplate:
        """Read an encoding of :meth:`to_bytes`.

        Raises:
            TemplateFormatError: the bytes are not such an encoding.
        """
        if len(data) < _HEADER.size:
            raise TemplateFormatError(f"a host template needs at least {_HEADER.size} bytes, got {len(data)}")
        magic, pages, count = _HEADER.unpack_from(data)
        if magic != _MAGIC or len(data) != _HEADER.size + 8 * count:
            raise TemplateFormatError("not a host template (wrong header or length)")
        hashes = np.frombuffer(data, dtype="<u8", offset=_HEADER.size).astype(np.uint64)
        if hashes.size > 1 and not (hashes[1:] > hashes[:-1]).all():
            raise TemplateFormatError("host template hashes are not sorted and distinct")
        return cls(hashes, pages)


EMPTY = HostTemplate(np.empty(0, dtype=np.uint64), 0)


def learn_template(
    pages: Sequence[np.ndarray], share: float = TEMPLATE_SHARE, min_block_pages: int = MIN_BLOCK_PAGES,
    min_sample: int = MIN_SAMPLE,
) -> HostTemplate:
    """The template of a host from the block hashes of a sample of its pages.

    Args:
        pages: per page, its distinct block hashes (:attr:`scrapy_neardup.core.blocks.Blocks.distinct_hashes`).
        share: a block on at least ``ceil(share * n)`` of the ``n`` pages is template ...
        min_block_pages: ... when that is at least this many pages.
        min_sample: fewer pages than this give an empty template.
    """
    if len(pages) < min_sample:
        return HostTemplate(EMPTY.hashes, len(pages))
    hashes, counts = np.unique(np.concatenate(pages), return_counts=True)
    needed = max(min_block_pages, math.ceil(share * len(pages)))
    return HostTemplate(hashes[counts >= needed], len(pages))


class TemplateLearner:
    """Learns the templates of the hosts of a batch (a file of pages, an index) from all their pages.

    A host with more than ``sample`` pages is learned from a uniform sample of them: the ``sample`` pages whose
    keys hash lowest, the same whatever order the pages come in, so a batch job's templates do not depend on the
    order of its input. Memory: the block hashes of the sampled pages (8 bytes a block).

    Args:
        sample: pages a host is learned from at most.
    """

    def __init__(self, sample: int = BATCH_SAMPLE) -> None:
        self.sample = sample
        # Per host, a max-heap (by negated key hash) of the pages with the lowest hashes so far.
        self._pages: dict[str, list[tuple[int, str, np.ndarray]]] = {}

    def add(self, host: str, key: str, blocks: np.ndarray) -> None:
        """Page ``key`` of ``host`` has the distinct block hashes ``blocks``."""
        heap = self._pages.setdefault(host, [])
        rank = -mmh3.hash64(key.encode("utf-8", "surrogatepass"), signed=False)[0]
        if len(heap) < self.sample:
            heapq.heappush(heap, (rank, key, blocks))
        elif rank > heap[0][0]:
            heapq.heapreplace(heap, (rank, key, blocks))

    @property
    def hosts(self) -> list[str]:
        """The hosts seen, in first-seen order."""
        return list(self._pages)

    def learn(self, host: str) -> HostTemplate:
        """``host``'s template from its sampled pages (:func:`learn_template`)."""
        return learn_template([blocks for _, _, blocks in self._pages.get(host, [])])


def learn_hosts(
    pages: Iterable[tuple[str, str, Any]], block_hashes: Callable[[list[Any]], list[np.ndarray | None]],
    sample: int = BATCH_SAMPLE, batch: int = 256,
) -> TemplateLearner:
    """A :class:`TemplateLearner` fed with ``pages``: ``(host, key, content)`` triples (see
    :meth:`scrapy_neardup.core.sketch.Sketcher.block_hashes`, passed as ``block_hashes``, for how a page's blocks
    are read; pages are read in batches of ``batch``). Pages that mark their main content (no block hashes) are
    not learned from: they are sketched without a template."""
    learner = TemplateLearner(sample)
    iterator = iter(pages)
    while chunk := list(itertools.islice(iterator, batch)):
        for (host, key, _), blocks in zip(chunk, block_hashes([content for _, _, content in chunk]), strict=True):
            if blocks is not None:
                learner.add(host, key, blocks)
    return learner
