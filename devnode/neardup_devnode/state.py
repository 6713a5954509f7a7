"""The records of background nodes (``neardup es start``), per user and per name.

The base dir is per user (its path holds the uid, and it must belong to the caller); inside it each name has
``state/<name>.json`` (the node's :meth:`~neardup_devnode.handles.RunningNode.to_state`) and ``state/<name>.pid``.
Two projects that use different names (``--name``) cannot see, reuse or stop each other's node. A record stays
after ``neardup es stop`` (the node's data is kept, and ``start`` restarts it) until ``stop --purge``.

This module only reads and writes the records; starting and stopping is :mod:`.background`'s.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

from .handles import RunningNode
from .locations import base_dir, file_lock

logger = logging.getLogger(__name__)

DEFAULT_NAME = "default"


def check_name(name: str) -> str:
    """*name* if it can name a background node (and a file), else :class:`ValueError`."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name) or name.startswith("."):
        raise ValueError(f"invalid node name {name!r}: use letters, digits, '.', '_' or '-'")
    return name


def resolve_base(base: Path | str | None) -> Path:
    """*base* made absolute, or the per-user :func:`~.locations.base_dir`."""
    return Path(base).resolve() if base is not None else base_dir()


def _paths(base: Path, name: str) -> tuple[Path, Path]:
    folder = base / "state"
    return folder / f"{name}.json", folder / f"{name}.pid"


@contextlib.contextmanager
def locked(base: Path, name: str) -> Iterator[None]:
    """Hold the lock of *name*'s record (one ``start`` / ``stop`` at a time per name)."""
    with file_lock(base / f".state-{name}.lock"):
        yield


def read_record(base: Path, name: str) -> RunningNode | None:
    """The node recorded under *name* (running or not), or ``None``."""
    path, _ = _paths(base, check_name(name))
    if not path.is_file():
        return None
    try:
        return RunningNode.from_state(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError):
        logger.warning("ignoring unreadable %s", path)
        return None


def write_record(base: Path, node: RunningNode) -> None:
    """Record *node* under its name (atomically: temporary file, then rename; readable by the owner only, since
    it holds the ``elastic`` password of a secured node)."""
    path, pid_path = _paths(base, check_name(node.name))
    path.parent.mkdir(mode=0o700, exist_ok=True)
    for target, content in ((path, json.dumps(node.to_state(), indent=2) + "\n"), (pid_path, f"{node.pid}\n")):
        tmp = target.with_name(target.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(content)
        os.replace(tmp, target)


def remove_record(base: Path, name: str) -> None:
    for p in _paths(base, check_name(name)):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def recorded_names(base: Path) -> list[str]:
    folder = base / "state"
    return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []
