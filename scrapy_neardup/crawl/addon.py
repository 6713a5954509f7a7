"""The Scrapy add-on: one line in ``ADDONS`` switches near-duplicate detection on.

::

    ADDONS = {"scrapy_neardup.NearDuplicateAddon": 0}

It adds :class:`~scrapy_neardup.crawl.pipeline.NearDuplicatePipeline` to ``ITEM_PIPELINES`` at priority
:data:`PIPELINE_PRIORITY` (300), unless the project lists the pipeline already (by class or by any import path
of it), whose own priority then stands. The ``NEARDUP_*`` settings work as with ``ITEM_PIPELINES``, which keeps
working on its own. Further components (middlewares) are enabled here as they are added, so a project's
one line stays the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

#: Where the pipeline runs among the project's item pipelines: after ones that fill the text field (lower
#: numbers), before ones that store items (export, databases; usually higher).
PIPELINE_PRIORITY = 300


class NearDuplicateAddon:
    """Enables the near-duplicate pipeline (see the module doc)."""

    def update_settings(self, settings: BaseSettings) -> None:
        """Add the pipeline to ``ITEM_PIPELINES`` when the project does not list it already."""
        from .pipeline import NearDuplicatePipeline

        settings.setdefault_in_component_priority_dict("ITEM_PIPELINES", NearDuplicatePipeline, PIPELINE_PRIORITY)


__all__ = ["PIPELINE_PRIORITY", "NearDuplicateAddon"]
