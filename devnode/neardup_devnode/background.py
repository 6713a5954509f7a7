"""Background nodes (``neardup es start|stop|status``): nodes that outlive the command that started them, one per
user and per name, whose data is kept until asked otherwise.

``start`` starts a new node, or finds the running one, or starts a node that stopped (``stop``) or died (a crash, a
kill, a reboot of the JVM's machine left its directory in place) again on its data: the same version, engine,
security and ``elastic`` password, on its old ports when they are free. ``stop`` stops it and keeps its data and
record; ``stop --purge`` deletes both. ``status`` says what each record describes: running (and the cluster's
health and indices), stopped, or dead.

The records are :mod:`.state`'s; the nodes are started by :mod:`.node`.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import NodeError
from .handles import RunningNode
from .node import DEFAULT_HEAP, restart_node, start_node
from .probe import ProbeError, probe
from .state import (
    DEFAULT_NAME,
    check_name,
    locked,
    read_record,
    recorded_names,
    remove_record,
    resolve_base,
    write_record,
)
from .versions import product

#: What :func:`start_background` did: ``started`` a new node, found it ``running``, ``restarted`` a node stopped by
#: ``stop`` on its data, or ``recovered`` a node that had died (a crash, a kill) on its data.
START_OUTCOMES = ("started", "running", "restarted", "recovered")


@dataclass
class Started:
    """The result of :func:`start_background`: the node, what was done (:data:`START_OUTCOMES`), and notes for the
    user (e.g. the asked-for version differs from the running node's, a record whose data had vanished)."""

    node: RunningNode
    outcome: str
    notes: list[str] = field(default_factory=list)


def _describe(node: RunningNode) -> str:
    return f"{product(node.engine)} {node.version}"


def _make_base(base: Path) -> None:
    base.mkdir(parents=True, exist_ok=True, mode=0o755 if os.geteuid() == 0 else 0o700)


def background_node(name: str = DEFAULT_NAME, base: Path | str | None = None) -> RunningNode | None:
    """The running background node recorded under *name*, or ``None``."""
    node = read_record(resolve_base(base), check_name(name))
    return node if node is not None and node.is_running() else None


def background_nodes(base: Path | str | None = None) -> list[RunningNode]:
    """Every running background node of this user (all names)."""
    base_path = resolve_base(base)
    return [n for n in (background_node(name, base_path) for name in recorded_names(base_path)) if n is not None]


def start_background(
    *,
    name: str = DEFAULT_NAME,
    base: Path | str | None = None,
    version: str | None = None,
    engine: str | None = None,
    secure: bool | None = None,
    heap: str | None = None,
    timeout: float = 180.0,
) -> Started:
    """Start the background node *name*, or find it running, or start it again on the data it left.

    *version*, *engine* and *secure* (``None``: as recorded, else the defaults) must match a recorded node's: its
    data belongs to that server (``stop --purge`` it first, or use another *name*). A running node is returned as
    it is, with a note when it is not the one asked for. *heap* ``None``: as recorded, else
    :data:`~.node.DEFAULT_HEAP`.

    :raises NodeError: the recorded node does not match, or it could not start (:class:`~.errors.NodeStartError`).
    """
    check_name(name)
    base_path = resolve_base(base)
    _make_base(base_path)
    with locked(base_path, name):
        record = read_record(base_path, name)
        notes: list[str] = []
        if record is not None and record.is_running():
            asked = [
                f"{what} {want}"
                for what, want, have in (
                    ("engine", engine, record.engine),
                    ("version", version, record.version),
                    ("secure", secure, bool(record.username)),
                )
                if want is not None and want != have
            ]
            if asked:
                notes.append(
                    f"the running node is {_describe(record)}{' (secure)' if record.username else ''}, not the one "
                    f"asked for ({', '.join(asked)}): `neardup es stop{_name_flag(name)}` first, or use another --name"
                )
            return Started(record, "running", notes)
        if record is not None and record.data_dir.is_dir():
            _check_matches(record, name, version=version, engine=engine, secure=secure)
            died = not record.stopped_on_purpose
            node = restart_node(record, base=base_path, heap=heap, timeout=timeout, background=True)
            if node.http_port != record.http_port:
                notes.append(f"its old port {record.http_port} is taken: it now listens on {node.http_port}")
            write_record(base_path, node)
            return Started(node, "recovered" if died else "restarted", notes)
        if record is not None:
            notes.append(
                f"the data of the recorded {_describe(record)} node is gone ({record.data_dir}): starting a new, "
                "empty node"
            )
            _remove_node_dir(base_path, record)
            remove_record(base_path, name)
        node = start_node(
            base=base_path,
            background=True,
            name=name,
            keep_data=True,
            version=version,
            engine=engine or "elasticsearch",
            secure=bool(secure),
            heap=heap or DEFAULT_HEAP,
            timeout=timeout,
        )
        write_record(base_path, node)
        return Started(node, "started", notes)


def _remove_node_dir(base: Path, node: RunningNode) -> None:
    """Delete the directory of a recorded node, if it is one of the base dir's (``<base>/nodes/<name>``)."""
    if node.node_dir.parent.resolve() == (base / "nodes").resolve() and node.node_dir.is_dir():
        shutil.rmtree(node.node_dir, ignore_errors=True)


def _name_flag(name: str) -> str:
    return "" if name == DEFAULT_NAME else f" --name {name}"


def _check_matches(
    record: RunningNode, name: str, *, version: str | None, engine: str | None, secure: bool | None
) -> None:
    wrong = []
    if engine is not None and engine != record.engine:
        wrong.append(f"engine {engine}")
    if version is not None and version != record.version:
        wrong.append(f"version {version}")
    if secure is not None and secure != bool(record.username):
        wrong.append("--secure" if secure else "no --secure")
    if wrong:
        raise NodeError(
            f"the stopped node named {name!r} is {_describe(record)}{' (secure)' if record.username else ''} and its "
            f"data ({record.data_dir}) belongs to it, not to the one asked for ({', '.join(wrong)}): start it as it "
            f"is (without those options), delete it with `neardup es stop --purge{_name_flag(name)}`, or use "
            "another --name"
        )


@dataclass
class Stopped:
    """The result of :func:`stop_background`: the recorded node, whether it was running, and whether its data
    and record were deleted."""

    node: RunningNode
    was_running: bool
    purged: bool


def stop_background(
    name: str = DEFAULT_NAME,
    base: Path | str | None = None,
    *,
    purge: bool = False,
    timeout: float = 30.0,
) -> Stopped | None:
    """Stop the background node recorded under *name* and keep its data (``start`` starts it again on it), or with
    *purge* delete its directory (data, logs, config) and record. ``None`` when nothing is recorded under *name*."""
    check_name(name)
    base_path = resolve_base(base)
    if not base_path.is_dir():
        return None
    with locked(base_path, name):
        node = read_record(base_path, name)
        if node is None:
            return None
        was_running = node.is_running()
        node.stop(keep_data=True, timeout=timeout)
        if purge:
            _remove_node_dir(base_path, node)
            remove_record(base_path, name)
        else:
            node.stopped_on_purpose = True
            write_record(base_path, node)
    return Stopped(node, was_running, purge)


#: A recorded node's state in :class:`Status`.
RUNNING, STOPPED, DIED = "running", "stopped", "died"


@dataclass
class Status:
    """What :func:`status` found of one recorded node: :data:`RUNNING`, :data:`STOPPED` (by ``stop``) or
    :data:`DIED` (gone without ``stop``); when running, the cluster's health and its indices (``None``: it did not
    answer), else whether its data is still there."""

    name: str
    node: RunningNode
    state: str
    health: dict[str, Any] | None = None
    indices: list[dict[str, Any]] | None = None
    error: str | None = None

    @property
    def has_data(self) -> bool:
        return self.node.data_dir.is_dir()


def status(name: str | None = None, base: Path | str | None = None, *, timeout: float = 15.0) -> list[Status]:
    """The recorded background nodes (or the one named *name*; an empty list when nothing is recorded), each with
    its state, and, when running, the cluster's health and indices (plain HTTP requests: nothing is logged when
    the node does not answer)."""
    base_path = resolve_base(base)
    names = [check_name(name)] if name is not None else recorded_names(base_path)
    found = []
    for each in names:
        node = read_record(base_path, each)
        if node is None:
            continue
        if not node.is_running():
            found.append(Status(each, node, STOPPED if node.stopped_on_purpose else DIED))
            continue
        entry = Status(each, node, RUNNING)
        auth = (node.username, node.password or "") if node.username else None
        try:
            code, health = probe(node.url, "GET", "/_cluster/health", auth=auth, ca_certs=node.ca_certs,
                                 timeout=timeout)
            if code == 200 and isinstance(health, dict):
                entry.health = health
            else:
                entry.error = f"GET /_cluster/health: HTTP {code}"
            code, indices = probe(node.url, "GET", "/_cat/indices?format=json&h=index,health,docs.count&s=index",
                                  auth=auth, ca_certs=node.ca_certs, timeout=timeout)
            if code == 200 and isinstance(indices, list):
                entry.indices = indices
        except ProbeError as exc:
            entry.error = f"no answer: {exc!r}"[:300]
        found.append(entry)
    return found
