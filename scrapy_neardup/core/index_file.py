"""The file of a saved embedded index: :func:`write` and :func:`read` (for
:meth:`~scrapy_neardup.core.index.SketchIndex.save` and :meth:`~scrapy_neardup.core.index.SketchIndex.load`).

Design notes: docs/architecture.md#scrapy_neardupcoreindex_file
"""

from __future__ import annotations

import hashlib
import json
import logging
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import StateError
from .atomic_files import atomic_writer
from .params import content_change, parse_tag, still_made

logger = logging.getLogger(__name__)

FORMAT_VERSION = 3
# Format 1 has no runs (they are rebuilt from the values); format 3 adds the store's metadata to the header
# (see SketchIndex.save: the embedded store's snapshot identity); the arrays of 2 and 3 are the same.
_READABLE_FORMATS = (1, 2, 3)
_MAGIC = "scrapy-neardup-index"
_ARRAYS = ("values", "fingerprints", "key_ends", "key_blob")
_RUN_ARRAYS = ("band_low", "band_pages", "directory")
# Saved since format 3 by later versions (a missing one is left out of what read() gives: see the module doc):
# "seen" (repeats), "sketched" (per page: what was sketched, the kept side of the evidence).
_OPTIONAL_ARRAYS = ("seen", "sketched")


def parameters_differ(path: Any, saved: tuple[Any, Any, Any], used: tuple[str, int, int]) -> str:
    """The one line refusing a saved store (index or journal) made with other parameters, naming what to do."""
    change = content_change(str(saved[0]), used[0]) if saved[1:] == used[1:] else None
    if change is not None:
        mode = parse_tag(str(saved[0])).content
        keep = f", or keep it with NEARDUP_CONTENT={mode!r}" if still_made(str(saved[0])) else ""
        return (f"{path}: {change}; reset the store with NEARDUP_RESET=True (each page is sketched anew "
                f"when the crawl meets it){keep}")
    return (f"{path} was made with tag={saved[0]} num_perm={saved[1]} min_shared={saved[2]}, but this run uses "
            f"tag={used[0]} num_perm={used[1]} min_shared={used[2]}; use another state directory or reset it")


@dataclass(frozen=True)
class SavedIndex:
    """What :func:`read` found in a file, checked: ``size`` pages, their arrays (by member name; the run
    arrays only when ``runs`` is not ``None``; an optional array, :data:`_OPTIONAL_ARRAYS`, only when the file
    has it), the header's ``runs`` as saved (not yet checked against the pages) and the store's ``meta``."""

    size: int
    arrays: dict[str, np.ndarray]
    runs: Any
    meta: dict[str, Any]


def write(
    path: Path,
    params: tuple[str, int, int],
    size: int,
    arrays: dict[str, np.ndarray],
    runs: dict[str, int],
    meta: dict[str, Any],
) -> None:
    """Write the ``arrays`` (:data:`_ARRAYS`, :data:`_RUN_ARRAYS`, :data:`_OPTIONAL_ARRAYS`) of ``size`` pages
    made with ``params`` (tag, k, t) to ``path`` atomically, with ``runs`` and ``meta`` in the header."""
    tag, num_perm, min_shared = params
    header = {
        "magic": _MAGIC,
        "format": FORMAT_VERSION,
        "tag": tag,
        "num_perm": num_perm,
        "min_shared": min_shared,
        "size": size,
        "runs": runs,
        "sha256": {name: _digest(a) for name, a in arrays.items()},
        "meta": meta,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(path) as out, zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("header.json", json.dumps(header))
        for name, array in arrays.items():
            with zf.open(name + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.ascontiguousarray(array), allow_pickle=False)
    logger.debug("saved %d sketches to %s", size, path)


def read(path: Path, num_perm: int, min_shared: int, tag: str) -> SavedIndex:
    """The content of a file :func:`write` wrote, checked: the header, the parameters, every array's checksum
    and the per-page arrays' shapes.

    Raises:
        StateError: the file is damaged or truncated, or its tag, ``k`` or ``t`` differ from the ones asked
            for (the message names both).
    """
    try:
        with zipfile.ZipFile(path) as zf:
            header = json.loads(zf.read("header.json"))
            names = _ARRAYS + (_RUN_ARRAYS if isinstance(header, dict) and "runs" in header else ())
            names += tuple(name for name in _OPTIONAL_ARRAYS if name + ".npy" in zf.namelist())
            arrays: dict[str, np.ndarray] = {}
            for name in names:
                with zf.open(name + ".npy") as member:
                    arrays[name] = np.lib.format.read_array(member, allow_pickle=False)
    except (OSError, zipfile.BadZipFile, KeyError, ValueError, EOFError) as exc:
        raise StateError(f"near-duplicate state file {path} is damaged or unreadable: {exc}") from exc
    if (
        not isinstance(header, dict)
        or header.get("magic") != _MAGIC
        or header.get("format") not in _READABLE_FORMATS
    ):
        raise StateError(f"{path} is not a scrapy-neardup index of format {FORMAT_VERSION}")
    saved = (header.get("tag"), header.get("num_perm"), header.get("min_shared"))
    if saved != (tag, num_perm, min_shared):
        raise StateError(parameters_differ(path, saved, (tag, num_perm, min_shared)))
    digests = header.get("sha256")
    for name, array in arrays.items():
        if not isinstance(digests, dict) or digests.get(name) != _digest(array):
            raise StateError(f"near-duplicate state file {path} is damaged: checksum mismatch in {name!r}")
    size = header.get("size")
    values, key_ends = arrays["values"], arrays["key_ends"]
    if (
        not isinstance(size, int)
        or values.shape != (size, num_perm)
        or values.dtype != np.uint16
        or key_ends.shape != (size,)
        or key_ends.dtype.kind not in "iu"
        or arrays["fingerprints"].shape != (size,)
        or (size and int(key_ends[-1]) != arrays["key_blob"].size)
        or ("seen" in arrays and (arrays["seen"].shape != (size,) or arrays["seen"].dtype != np.bool_))
        or ("sketched" in arrays and (arrays["sketched"].shape != (size, 3) or arrays["sketched"].dtype != np.uint32))
    ):
        raise StateError(f"near-duplicate state file {path} is damaged: array shapes disagree with header")
    meta = header.get("meta")
    runs = header.get("runs")  # None: no runs saved (format 1), or none usable; rebuilt either way
    return SavedIndex(size, arrays, runs, dict(meta) if isinstance(meta, dict) else {})


def _digest(array: np.ndarray) -> str:
    # The array's bytes without copying them (the same digest as ``array.tobytes()``).
    return hashlib.sha256(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data).hexdigest()


