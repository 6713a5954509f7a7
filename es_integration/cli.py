"""The ``neardup es ...`` command group.

The main ``neardup`` entry point calls :func:`register` with its sub-parsers. Each subcommand is one
``_add_<name>(commands)`` function that builds its parser and sets ``func`` to a ``cmd_<name>(args) -> int``
handler; to add a subcommand (index, backfill, groups, search, ...), write both and call the ``_add_`` function
from :func:`_add_subcommands`. Handlers print results to stdout, diagnostics to stderr, and return the exit code.

Run on its own with ``python -m es_integration.cli start|stop``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["register", "main", "cmd_start", "cmd_stop"]


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``es`` command group to *subparsers* (from ``ArgumentParser.add_subparsers()``); return it."""
    es = subparsers.add_parser(
        "es",
        help="Elasticsearch: run a local node, ...",
        description="Elasticsearch commands: run a local Elasticsearch node for development and tests, ...",
    )
    _add_subcommands(es)
    return es


def _add_subcommands(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(title="commands", dest="es_command", metavar="<command>")
    parser.set_defaults(func=lambda args: _usage(parser))
    _add_start(commands)
    _add_stop(commands)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


# --------------------------------------------------------------------------------------------------------------
# start / stop
# --------------------------------------------------------------------------------------------------------------


def _add_start(commands: Any) -> None:
    from es_integration.node import DEFAULT_HEAP, ES_VERSION

    p = commands.add_parser(
        "start",
        help="start a local Elasticsearch node in the background",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            f"Start a single-node Elasticsearch {ES_VERSION} on 127.0.0.1 (free ports) in the background; it\n"
            "keeps running after this command exits. Stop it with `neardup es stop`.\n\n"
            "The first run downloads the integ-test-zip distribution from Maven Central into\n"
            "${NEARDUP_CACHE:-~/.cache/scrapy-neardup}/elasticsearch/. Needs Java 17 (ES_JAVA_HOME, else\n"
            "/usr/lib/jvm/java-17-openjdk-amd64, JAVA_HOME or `java` on PATH). When run as root the node runs as\n"
            "the system user `neardup-es` (created if missing). Node data, logs and the state file live under\n"
            "${NEARDUP_ES_BASE:-/tmp/scrapy-neardup-es-<uid>}.\n\n"
            "The node URL is printed as the last line, so `URL=$(neardup es start | tail -n1)` works."
        ),
    )
    p.add_argument(
        "--secure",
        action="store_true",
        help="enable security: HTTPS with a generated CA, user `elastic` with a generated password "
        "(printed, and stored in the state file)",
    )
    p.add_argument("--heap", default=DEFAULT_HEAP, help="JVM heap, e.g. 512m or 1g (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the node (default: %(default)s)")
    p.set_defaults(func=cmd_start)


def cmd_start(args: argparse.Namespace) -> int:
    """``neardup es start``: start a background node and print where it lives; the URL is the last line."""
    from es_integration.node import NodeError, start_background

    try:
        node = start_background(secure=args.secure, heap=args.heap, timeout=args.timeout)
    except NodeError as exc:
        print(f"neardup es start: {exc}", file=sys.stderr)
        return 1
    print(f"Elasticsearch {node.version} running, pid {node.pid}")
    print(f"data: {node.data_dir}")
    print(f"logs: {node.logs_dir} (console output: {node.log_path})")
    if node.username:
        print(f"user: {node.username}")
        print(f"password: {node.password}")
        print(f"ca_certs: {node.ca_certs}")
    print("stop it with: neardup es stop")
    print(node.url, flush=True)
    return 0


def _add_stop(commands: Any) -> None:
    p = commands.add_parser(
        "stop",
        help="stop the node started by `neardup es start`",
        description="Stop the background node(s) recorded by `neardup es start` (SIGTERM, then SIGKILL after "
        "--timeout seconds) and delete their data and logs unless --keep-data is given.",
    )
    p.add_argument("--keep-data", action="store_true", help="keep the node's data, config and logs directory")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait before SIGKILL (default: %(default)s)")
    p.set_defaults(func=cmd_stop)


def cmd_stop(args: argparse.Namespace) -> int:
    """``neardup es stop``: stop the recorded background node(s); exit 0 also when none was running."""
    from es_integration.node import NodeError, base_dir, stop_background

    try:
        stopped = stop_background(keep_data=args.keep_data or None, timeout=args.timeout)
    except NodeError as exc:
        print(f"neardup es stop: {exc}", file=sys.stderr)
        return 1
    if not stopped:
        print(f"no Elasticsearch node started by `neardup es start` is running (state dir {base_dir()})")
        return 0
    for node in stopped:
        kept = f"; data kept in {node.node_dir}" if args.keep_data else ""
        print(f"stopped Elasticsearch at {node.url} (pid {node.pid}){kept}")
    return 0


# --------------------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``es`` commands without the main ``neardup`` entry point."""
    parser = argparse.ArgumentParser(prog="python -m es_integration.cli", description="Elasticsearch commands")
    _add_subcommands(parser)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
