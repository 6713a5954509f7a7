"""The progress bar of the ``neardup`` commands: tqdm on stderr, shown when stderr is a terminal unless
``--progress`` / ``--no-progress`` says otherwise."""

from __future__ import annotations

import sys
from typing import Any

from tqdm import tqdm


def progress_bar(desc: str, enabled: bool | None, *, total: int | None = None, unit: str = "docs") -> Any:
    """A tqdm bar (``unit="B"`` counts bytes, scaled); ``enabled=None``: only on a terminal."""
    disable = not sys.stderr.isatty() if enabled is None else not enabled
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit == "B", file=sys.stderr, disable=disable,
                dynamic_ncols=True)
