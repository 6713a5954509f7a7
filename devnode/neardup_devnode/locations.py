"""Where the launcher keeps things: the download cache, the per-user base dir, and the file lock guarding both."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def cache_dir() -> Path:
    """Root of the download cache: ``${NEARDUP_CACHE:-~/.cache/scrapy-neardup}``."""
    env = os.environ.get("NEARDUP_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "scrapy-neardup"


def base_dir() -> Path:
    """Runtime base dir, one per user: ``${NEARDUP_ES_BASE:-<tmp>/scrapy-neardup-es-<uid>}``."""
    env = os.environ.get("NEARDUP_ES_BASE")
    if env:
        return Path(env).expanduser().resolve()
    return Path(tempfile.gettempdir()) / f"scrapy-neardup-es-{os.geteuid()}"


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on *path* (created if needed); serialises installs and state updates."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
