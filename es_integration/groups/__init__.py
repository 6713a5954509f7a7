"""Near-duplicate groups across an index, from the sketches stored in it.

Design notes: docs/architecture.md#es_integrationgroups
"""

from __future__ import annotations

from .assign import assign_groups
from .full import find_groups
from .incremental import find_new_groups
from .model import KeepRule, SweptDocs
from .model import RowStates as RowStates
from .results import Group, GroupReport, Linkage
from .watermark import groups_watermark
from .watermark import index_uuid as index_uuid

__all__ = [
    "Group", "GroupReport", "KeepRule", "Linkage", "SweptDocs", "assign_groups", "find_groups", "find_new_groups",
    "groups_watermark",
]
