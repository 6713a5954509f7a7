"""How a ``neardup es`` job runs: the connection options every job command takes, the client they describe, the
sketch parameters checked before any connection, and failures said in one line (``neardup es <cmd>: error:
...``, exit status 1; secrets never appear in them). The commands themselves are in :mod:`es_integration.cli`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from scrapy_neardup.cli.options import add_progress_option, params_from_args
from scrapy_neardup.core.params import SketchParams
from scrapy_neardup.errors import EsError, InputError, InvalidNameError

from .client import ConnectionSettings, make_client, translate_errors, transport_logs_at_debug
from .indexing import BulkErrorKind, add_bulk_error
from .names import validate_index_name

#: A job: ``job(args, client)`` returns the exit status.
Job = Callable[[argparse.Namespace, Any], int]


def _env(name: str) -> str | None:
    return os.environ.get(name) or None


def connection_options(p: argparse.ArgumentParser, *, index_required: bool = True, progress: bool = True) -> None:
    """``--es-url``, ``--index``, ``--api-key``, ``--username``, ``--password``, ``--ca-certs``, ``--timeout`` (secrets
    also from ``NEARDUP_ES_PASSWORD`` / ``NEARDUP_ES_API_KEY``), and ``--progress`` (unless ``progress=False``)."""
    g = p.add_argument_group("connection")
    g.add_argument("--es-url", default=_env("NEARDUP_ES_URL"), metavar="URL",
                   help="cluster URL, e.g. http://127.0.0.1:9200 (default: $NEARDUP_ES_URL)")
    g.add_argument("--index", required=index_required, metavar="NAME", help="index name")
    g.add_argument("--api-key", default=_env("NEARDUP_ES_API_KEY"), metavar="KEY",
                   help="encoded API key (default: $NEARDUP_ES_API_KEY; prefer the variable: command lines are "
                   "visible to other users)")
    g.add_argument("--username", default=_env("NEARDUP_ES_USERNAME"), help="basic-auth user (default: "
                   "$NEARDUP_ES_USERNAME)")
    g.add_argument("--password", default=_env("NEARDUP_ES_PASSWORD"),
                   help="basic-auth password (default: $NEARDUP_ES_PASSWORD; prefer the variable)")
    g.add_argument("--ca-certs", default=_env("NEARDUP_ES_CA_CERTS"), metavar="PEM",
                   help="CA certificate for https (default: $NEARDUP_ES_CA_CERTS)")
    g.add_argument("--timeout", type=float, default=60.0, help="seconds per request (default: %(default)s)")
    if progress:
        add_progress_option(p)


def job_params(args: argparse.Namespace) -> SketchParams:
    """The validated sketch parameters of the options (one rule with every other entry point)."""
    try:
        return params_from_args(args)
    except ValueError as exc:
        raise EsError(str(exc)) from None


def job_client(args: argparse.Namespace) -> tuple[ConnectionSettings, Any]:
    """The connection settings of the options, and a client connected with them."""
    if not args.es_url:
        raise EsError("no cluster URL: give --es-url or set NEARDUP_ES_URL")
    validate_index_name(args.index)
    settings = ConnectionSettings.create(
        args.es_url, api_key=args.api_key, username=args.username, password=args.password,
        ca_certs=args.ca_certs, request_timeout=args.timeout,
    )
    hint = "check --es-url and that the node is up"
    return settings, make_client(settings, unreachable_hint=hint, max_retries=3, retry_on_timeout=True)


def run_job(name: str, job: Job, args: argparse.Namespace) -> int:
    """Run ``job(args, client)`` with the client built from ``args``; print errors as one line (the transport's
    per-attempt warnings and their tracebacks only with ``neardup -v``)."""
    with transport_logs_at_debug():
        return _run_job_reporting(name, job, args)


def _run_job_reporting(name: str, job: Job, args: argparse.Namespace) -> int:
    try:
        job_params(args)  # wrong sketch options are said before any connection is tried
        settings, client = job_client(args)
        try:
            with translate_errors(settings.url):
                return int(job(args, client))
        finally:
            client.close()
    except (EsError, InvalidNameError, InputError) as exc:
        print(f"neardup es {name}: error: {exc}", file=sys.stderr)
        return 1
    except _bulk_error() as exc:
        print(f"neardup es {name}: error: {_bulk_message(exc)}", file=sys.stderr)
        return 1


def _bulk_error() -> type[Exception]:
    # Lazy: elasticsearch-py takes ~0.6 s to import, which every `neardup` command would pay at start-up; this runs
    # only once a job has failed.
    from elasticsearch.helpers import BulkIndexError

    return BulkIndexError


def _bulk_message(exc: Exception) -> str:
    errors: list[Any] = list(getattr(exc, "errors", []))
    kinds: dict[str, BulkErrorKind] = {}
    for error in errors:
        add_bulk_error(kinds, error)
    lines = [f"{len(errors)} document(s) refused by Elasticsearch"]
    return "\n  ".join(lines + [kind.describe(name) for name, kind in kinds.items()])
