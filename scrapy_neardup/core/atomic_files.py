"""Files that must survive a crash: atomic replacement, and one writer per directory.

* :func:`atomic_writer` / :func:`write_atomically`: temporary file in the same directory, fsync, rename over
  the target, fsync of the directory. A crash at any instant leaves the old bytes or the new ones, never a mix;
  a leftover ``<name>.*.tmp`` is harmless (never renamed into place).
* :func:`lock_directory`: an exclusive, non-blocking ``flock`` on a directory, released when its descriptor is
  closed or the process dies (``kill -9`` included), so a crashed writer never leaves a stale lock behind.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from ..errors import DirectoryLocked

try:  # POSIX only; elsewhere directories are not locked.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """A binary file that replaces ``path`` atomically when the ``with`` block ends without an exception.

    On an exception the temporary file is removed and ``path`` keeps its old content.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def write_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically (see :func:`atomic_writer`)."""
    with atomic_writer(path) as out:
        out.write(data)


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Make a rename or file creation in ``directory`` durable (best effort: some filesystems refuse)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def lock_directory(directory: str | os.PathLike[str]) -> int | None:
    """Take an exclusive lock on ``directory``; return the descriptor holding it (close it to release).

    ``None`` when the platform or filesystem cannot lock (logged at DEBUG; the caller runs unlocked).

    Raises:
        DirectoryLocked: another process holds the lock.
    """
    if fcntl is None:
        return None
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise DirectoryLocked(exc.errno, f"{directory} is locked by another process") from exc
        logger.debug("cannot lock %s (%s); continuing without a lock", directory, exc)
        return None
    return fd


