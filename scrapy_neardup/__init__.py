"""scrapy-neardup: near-duplicate detection with MinHash sketches for Scrapy and Elasticsearch.

Core objects (no Scrapy or Elasticsearch import happens here)::

    from scrapy_neardup import Sketcher
    sketcher = Sketcher(num_perm=128)
    a, b = sketcher.sketch_many([page_a, page_b])
    a.resemblance(b)          # share of agreeing positions, an unbiased estimate of Jaccard

The Scrapy item pipeline, ``scrapy_neardup.NearDuplicatePipeline``, the add-on that enables it,
``scrapy_neardup.NearDuplicateAddon``, the writer of a crawl's items to a search index,
``scrapy_neardup.SearchIndexPipeline``, and the CSV feed exporter of mark mode, ``scrapy_neardup.CsvItemExporter``,
are imported on first access (they import Scrapy). ``dir(scrapy_neardup)`` lists the public names only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .core.clustering import UnionFind, broder_clusters, leader_clusters
from .core.dedupe import Deduper, DedupeStats, Verdict
from .core.index import SketchIndex
from .core.match import Decision, Match
from .core.params import SketchParams
from .core.sketch import Sketch, Sketcher, jaccard
from .core.theory import choose_parameters, curve, flag_probability, min_shared_for

if TYPE_CHECKING:
    from .crawl.addon import NearDuplicateAddon
    from .crawl.exporters import CsvItemExporter
    from .crawl.pipeline import NearDuplicatePipeline
    from .crawl.search_writer import SearchIndexPipeline

__all__ = [
    "CsvItemExporter",
    "Decision",
    "Deduper",
    "DedupeStats",
    "Match",
    "NearDuplicateAddon",
    "NearDuplicatePipeline",
    "SearchIndexPipeline",
    "Sketch",
    "SketchIndex",
    "SketchParams",
    "Sketcher",
    "UnionFind",
    "Verdict",
    "broder_clusters",
    "choose_parameters",
    "curve",
    "flag_probability",
    "jaccard",
    "leader_clusters",
    "min_shared_for",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # The pipeline imports Scrapy; keep `import scrapy_neardup` light for the CLI and Elasticsearch users.
    if name == "NearDuplicatePipeline":
        # lazy: these three import Scrapy, which `import scrapy_neardup` does not (tests/core/test_layers.py)
        from .crawl.pipeline import NearDuplicatePipeline

        return NearDuplicatePipeline
    if name == "NearDuplicateAddon":
        # lazy: Scrapy (see above)
        from .crawl.addon import NearDuplicateAddon

        return NearDuplicateAddon
    if name == "SearchIndexPipeline":
        from .crawl.search_writer import SearchIndexPipeline

        return SearchIndexPipeline
    if name == "CsvItemExporter":
        # lazy: Scrapy (see above)
        from .crawl.exporters import CsvItemExporter

        return CsvItemExporter
    raise AttributeError(f"module 'scrapy_neardup' has no attribute {name!r}")


def __dir__() -> list[str]:
    # The public names (the lazy ones included), not what the module imports for itself (typing, __future__).
    return sorted([*__all__, "__version__"])
