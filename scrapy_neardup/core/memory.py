"""The embedded index's memory: arrays that grow without becoming resident, and freed heap handed back.

Resident memory is what a crawl of millions of pages is limited by (``SketchIndex.memory_bytes`` counts the
written parts of the arrays only): room reserved for growth must stay untouched until used, and temporaries
freed after a merge must leave the process.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np


def resized(array: np.ndarray, capacity: int) -> np.ndarray:
    """``array`` copied into a new array of ``capacity`` rows; the rows after its own are not written (so not
    resident until used)."""
    grown = np.empty((capacity, *array.shape[1:]), dtype=array.dtype)
    grown[: array.shape[0]] = array
    return grown


def release_free_memory() -> None:
    """Give freed heap memory back to the OS (glibc only; elsewhere a no-op).

    Merges allocate and free temporaries of many megabytes; glibc keeps such freed memory in the heap (its
    trim threshold rises with the sizes it has seen, up to 64 MB), which shows up as resident memory that
    the index no longer uses. ``malloc_trim`` returns it; it takes a few milliseconds, once per flush.
    """
    global _malloc_trim
    if _malloc_trim is None:
        try:
            _malloc_trim = ctypes.CDLL(None).malloc_trim
        except (AttributeError, OSError):
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim: Any = None
