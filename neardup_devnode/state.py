"""Background nodes (``neardup es start`` / ``stop``), recorded per user and per name.

The base dir is per user (its path holds the uid, and it must belong to the caller); inside it each name has
``state/<name>.json`` (the node's :meth:`~neardup_devnode.handles.RunningNode.to_state`) and ``state/<name>.pid``.
Two projects that use different names (``--name``) cannot see, reuse or stop each other's node.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

from .handles import RunningNode
from .locations import base_dir, file_lock

logger = logging.getLogger(__name__)

DEFAULT_NAME = "default"


def _check_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name) or name.startswith("."):
        raise ValueError(f"invalid node name {name!r}: use letters, digits, '.', '_' or '-'")
    return name


def _paths(base: Path, name: str) -> tuple[Path, Path]:
    folder = base / "state"
    return folder / f"{name}.json", folder / f"{name}.pid"


def _read(base: Path, name: str) -> dict[str, Any] | None:
    path, _ = _paths(base, name)
    if not path.is_file():
        return None
    try:
        return dict(json.loads(path.read_text()))
    except ValueError:
        logger.warning("ignoring unreadable %s", path)
        return None


def _write(base: Path, name: str, state: dict[str, Any] | None) -> None:
    path, pid_path = _paths(base, name)
    if state is None:
        for p in (path, pid_path):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
        return
    path.parent.mkdir(mode=0o700, exist_ok=True)
    for target, content in ((path, json.dumps(state, indent=2) + "\n"), (pid_path, f"{state['pid']}\n")):
        tmp = target.with_name(target.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(content)
        os.replace(tmp, target)


def _base(base: Path | str | None) -> Path:
    return Path(base).resolve() if base is not None else base_dir()


def background_node(name: str = DEFAULT_NAME, base: Path | str | None = None) -> RunningNode | None:
    """The running background node recorded under *name*, or ``None``."""
    state = _read(_base(base), _check_name(name))
    if state is None:
        return None
    node = RunningNode.from_state(state)
    return node if node.is_running() else None


def background_nodes(base: Path | str | None = None) -> list[RunningNode]:
    """Every running background node of this user (all names)."""
    folder = _base(base) / "state"
    names = sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []
    return [n for n in (background_node(name, base) for name in names) if n is not None]


def start_background(
    *, name: str = DEFAULT_NAME, base: Path | str | None = None, **kwargs: Any
) -> tuple[RunningNode, bool]:
    """Start a node that outlives this process, recorded under *name*; if one already runs under that name,
    return it. Returns ``(node, started)``. Keyword arguments are those of
    :func:`~neardup_devnode.node.start_node` (the node's own name is ``<name>``).
    """
    from .node import start_node

    _check_name(name)
    base_path = _base(base)
    base_path.mkdir(parents=True, exist_ok=True, mode=0o755 if os.geteuid() == 0 else 0o700)
    with file_lock(base_path / f".state-{name}.lock"):
        running = background_node(name, base_path)
        if running is not None:
            return running, False
        _discard(base_path, name)
        node = start_node(base=base_path, background=True, name=name, **kwargs)
        _write(base_path, name, node.to_state())
    return node, True


def _discard(base: Path, name: str, keep_data: bool | None = None) -> None:
    """Forget a recorded node that no longer runs (and remove its directory unless kept)."""
    state = _read(base, name)
    if state is not None:
        node = RunningNode.from_state(state)
        if not (node.keep_data if keep_data is None else keep_data) and node.node_dir.is_dir():
            shutil.rmtree(node.node_dir, ignore_errors=True)
    _write(base, name, None)


def stop_background(
    name: str = DEFAULT_NAME,
    base: Path | str | None = None,
    *,
    keep_data: bool | None = None,
    timeout: float = 30.0,
) -> RunningNode | None:
    """Stop the background node recorded under *name*; return it, or ``None`` when none was running."""
    _check_name(name)
    base_path = _base(base)
    if not base_path.is_dir():
        return None
    with file_lock(base_path / f".state-{name}.lock"):
        node = background_node(name, base_path)
        if node is not None:
            node.stop(keep_data=keep_data, timeout=timeout)
        _discard(base_path, name, keep_data)
    return node
