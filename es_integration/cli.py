"""The ``neardup es ...`` command group.

The main ``neardup`` entry point calls :func:`register` with its sub-parsers. Each subcommand is one
``_add_<name>(commands)`` function that builds its parser and sets ``func`` to a ``cmd_<name>(args) -> int``
handler; to add a subcommand (index, backfill, groups, search, ...), write both and call the ``_add_`` function
from :func:`_add_subcommands`. Handlers print results to stdout, diagnostics to stderr, and return the exit code.

``start``, ``stop`` and ``status`` (a local node for development) are the launcher's, a distribution of its own
that adds them through :func:`add_command`; without it they say what to install. Run the other commands on
their own with ``python -m es_integration.cli index|backfill|groups|search``.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import sys
import weakref
from collections.abc import Sequence
from typing import Any

from scrapy_neardup.cli.jsonl import ID_FIELD_HELP, choose_id_field, open_input, read_records, record_pages
from scrapy_neardup.cli.options import add_sketch_options
from scrapy_neardup.cli.progress import progress_bar
from scrapy_neardup.core.host_template import learn_hosts
from scrapy_neardup.core.sketch import Sketcher
from scrapy_neardup.errors import EsError, InputError

from .band_filter import BandFilterStore, default_directory
from .cli_jobs import connection_options, job_params, run_job
from .cli_report import add_report_commands, extend_core_commands
from .collapse import collapse_hits, search_collapsed, text_fields, text_query
from .groups import KeepRule, assign_groups, find_groups, find_new_groups
from .host_template_index import resolve_templates
from .indexing import backfill, get_field, index_records
from .listing import duplicate_targets, hit_line, label_fields, label_of, page_labels, write_groups
from .mapping import F_DUPLICATE_OF, F_GROUP, F_STATUS, ensure_index, require_tag
from .names import validate_field_name


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``es`` command group to *subparsers* (from ``ArgumentParser.add_subparsers()``); return it."""
    es = subparsers.add_parser(
        "es",
        help="Elasticsearch: index, group and search near-duplicates (and run a local node)",
        description="Elasticsearch commands: index documents with sketches, backfill sketches, find near-duplicate "
        "groups, search with them collapsed; with the local node launcher installed (neardup-devnode), run a local "
        "node for development and tests (start, stop, status).",
    )
    _add_subcommands(es)
    es.set_defaults(handler=_run_with_parser)
    extend_core_commands(subparsers)  # `neardup report|explain --es-url URL --index I ...`
    return es


def _add_subcommands(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(title="commands", dest="es_command", metavar="<command>")
    parser.set_defaults(func=lambda args: _usage(parser))
    _COMMANDS[parser] = commands
    _add_launcher_placeholders(commands)
    _add_job_subcommands(commands)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


# --------------------------------------------------------------------------------------------------------------
# start / stop / status: the local node launcher's (neardup_devnode.cli), added through add_command
# --------------------------------------------------------------------------------------------------------------

#: The ``es`` commands of the local node launcher, a distribution of its own (``neardup-devnode``, in ``devnode/`` of
#: the repository) that adds them through :func:`add_command`. Until it does, each is a placeholder that says in
#: one line what to install: this package holds no launcher code and imports nothing of it.
LAUNCHER_COMMANDS = ("start", "stop", "status")
LAUNCHER_INSTALL = "pip install -e ./devnode (the neardup-devnode distribution of the scrapy-neardup repository)"

#: The sub-command action of each ``es`` group :func:`register` made, for :func:`add_command`.
_COMMANDS: weakref.WeakKeyDictionary[argparse.ArgumentParser, Any] = weakref.WeakKeyDictionary()


def add_command(subparsers: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """Add the command *name* to the ``es`` group that :func:`register` added to *subparsers*; return its parser
    (*kwargs* go to ``add_parser``).

    The hook through which another package's ``neardup.commands`` entry point adds ``neardup es`` commands: the
    ``neardup`` command loads those entry points sorted by name, so ``es`` (this group) comes before any
    ``es-...`` one. A name of :data:`LAUNCHER_COMMANDS` replaces its placeholder.

    :raises KeyError: *subparsers* has no ``es`` group made by :func:`register`.
    """
    commands = _COMMANDS[subparsers.choices["es"]]
    if name in LAUNCHER_COMMANDS:
        commands.choices.pop(name, None)
    parser: argparse.ArgumentParser = commands.add_parser(name, **kwargs)
    return parser


def _add_launcher_placeholders(commands: Any) -> None:
    for name in LAUNCHER_COMMANDS:
        # Not listed in the help (no help=), and every argument is taken as a word, options included, so that
        # `neardup es start --version 9.5.4` gets the one line below rather than argparse's usage and error.
        p = commands.add_parser(name, add_help=False, prefix_chars="\0")
        p.add_argument("words", nargs="*")
        p.set_defaults(func=functools.partial(_launcher_missing, name))


def _launcher_missing(name: str, args: argparse.Namespace) -> int:
    print(f"neardup es {name}: the local node launcher is not installed: {LAUNCHER_INSTALL}", file=sys.stderr)
    return 1


# --------------------------------------------------------------------------------------------------------------
# index / backfill / groups / search (near-duplicate jobs against an existing cluster)
# --------------------------------------------------------------------------------------------------------------
# Shared options: connection (--es-url, --index, --api-key, --username, --password, --ca-certs, --timeout; secrets
# also from NEARDUP_ES_PASSWORD / NEARDUP_ES_API_KEY), sketch parameters (--num-perm, --shingle, --shingle-size,
# --seed; they must match the ones the index was sketched with) and --threshold / --min-shared. Failures are one
# line on stderr (`neardup es <cmd>: error: ...`) and exit status 1; secrets never appear in them.


def _run_with_parser(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Adapter for the main ``neardup`` entry point, which calls ``args.handler(args, parser)``."""
    return int(args.func(args))


def _add_job_subcommands(commands: Any) -> None:
    _add_index(commands)
    _add_backfill(commands)
    _add_groups(commands)
    _add_search(commands)
    add_report_commands(commands)


def _sketch_options(p: argparse.ArgumentParser, *, threshold: bool) -> None:
    add_sketch_options(p, with_threshold=threshold, title="sketch parameters (as when the index was sketched)")


def _job_sketcher(args: argparse.Namespace) -> Any:
    return Sketcher.from_params(job_params(args))


def _job_min_shared(args: argparse.Namespace) -> int:
    return int(job_params(args).min_shared)


def _progress(args: argparse.Namespace, desc: str, total: int | None = None) -> Any:
    return progress_bar(desc, args.progress, total=total)


# -- index ---------------------------------------------------------------------------------------------------------


def _add_index(commands: Any) -> None:
    p = commands.add_parser(
        "index",
        help="index JSON-lines documents with their near-duplicate sketches",
        description="Read JSON lines (one object per line) and bulk-index each object unchanged plus a `neardup` "
        "object: sketch positions, fingerprint, parameter tag, group id (its own _id) and status. The index is "
        "created with the near-duplicate mapping when missing; an existing index gets the mapping added.",
    )
    p.add_argument("input", help="JSON-lines file, or - for stdin")
    p.add_argument("--id-field", default=None, help=ID_FIELD_HELP + "; a record without one gets a random id")
    p.add_argument("--text-field", default="text", help="field with the text or HTML (default: text)")
    p.add_argument("--url-field", default="url",
                   help="field with the page URL: --content auto learns each host's template over the input, or "
                        "uses the one the index keeps (default: url)")
    p.add_argument("--chunk-size", type=int, default=500,
                   help="documents per bulk request to start with; requests the node rejects (HTTP 429) are retried "
                   "with backoff in smaller ones (default: 500)")
    p.add_argument("--threads", type=int, default=1,
                   help="bulk request threads; more than 1 overlaps sketching with indexing (default: 1)")
    p.add_argument("--move-neardup-to", default=None, metavar="FIELD",
                   help="store a record's own `neardup` field (e.g. a mark-mode crawl's mark) under FIELD; without "
                   "it such a record is refused, never overwritten")
    connection_options(p)
    _sketch_options(p, threshold=False)
    p.set_defaults(func=cmd_index)


def cmd_index(args: argparse.Namespace) -> int:
    """``neardup es index``: bulk-index JSON lines with sketches; summary on stderr."""
    return run_job("index", _index_job, args)


def _index_job(args: argparse.Namespace, client: Any) -> int:
    if args.chunk_size < 1:
        raise EsError(f"--chunk-size must be positive, got {args.chunk_size}")
    for field in (args.id_field, args.text_field, args.url_field, args.move_neardup_to):
        if field is not None:
            validate_field_name(field)
    sketcher = _job_sketcher(args)
    require_tag(client, args.index, sketcher.tag)  # one kind of sketch per index: never overwrite silently
    auto = sketcher.content == "auto"
    with open_input(args.input, rereadable=auto) as (lines, _size), _progress(args, "index") as bar:
        templates = None
        if auto:  # the hosts' templates over the whole input first (or the ones the index keeps)
            ensure_index(client, args.index)
            learner = learn_hosts(record_pages(lines, args.text_field, args.url_field), sketcher.block_hashes)
            templates = resolve_templates(client, args.index, sketcher.tag, learner)
            lines.seek(0)
        bad: list[InputError] = []
        records = _json_records(lines, bad)
        if args.id_field is None:  # the first record tells (scrapy_neardup.cli.jsonl.choose_id_field)
            first = next(records, None)
            args.id_field = choose_id_field(None, first, args.url_field, "neardup es index", get=get_field)
            records = itertools.chain([] if first is None else [first], records)
        stats = index_records(
            client, args.index, records, sketcher, id_field=args.id_field,
            text_field=args.text_field, chunk_size=args.chunk_size, threads=max(1, args.threads),
            progress=bar.update, templates=templates, url_field=args.url_field, move_root_to=args.move_neardup_to,
        )
    print(f"neardup es index: {args.index}: {stats.summary()}", file=sys.stderr)
    if bad:
        print(f"neardup es index: error: {bad[0]}; the records before it are written, none after", file=sys.stderr)
        return 1
    records = stats.indexed + stats.errors
    if records and stats.missing_text == records:
        # Every page its own group forever: what a wrong --text-field does; the user must know.
        print(f"neardup es index: error: no record has the text field {args.text_field!r}: the {records} documents "
              "have no sketch (give the field with the text or HTML: --text-field)", file=sys.stderr)
        return 1
    if stats.missing_text:
        print(f"neardup es index: {stats.missing_text} of {records} records have no {args.text_field!r} field: "
              "written without a sketch (nobody's near-duplicate)", file=sys.stderr)
    return 1 if stats.errors else 0


def _json_records(lines: Any, bad: list[InputError] | None = None) -> Any:
    """The records of ``lines``; with ``bad``, a bad line ends them (kept in ``bad``) instead of raising inside
    the bulk writer, so the records before it are written, as ``neardup dedupe`` does."""
    try:
        for _number, record in read_records(lines):
            yield record
    except InputError as exc:
        if bad is None:
            raise
        bad.append(exc)


# -- backfill ------------------------------------------------------------------------------------------------------


def _add_backfill(commands: Any) -> None:
    p = commands.add_parser(
        "backfill",
        help="add sketches to the documents of an existing index",
        description="Sweep an existing index with a point in time and add the `neardup` sketch fields to every "
        "document that has none for these sketch parameters (all documents with --force), with bulk partial "
        "updates. Each updated document becomes its own group; run `neardup es groups --assign` afterwards.",
    )
    p.add_argument("--text-field", required=True, help="field with the text or HTML")
    p.add_argument("--url-field", default="url",
                   help="field with the page URL, for --content auto's host templates (default: url)")
    p.add_argument("--force", action="store_true", help="re-sketch documents that already have a sketch")
    connection_options(p)
    _sketch_options(p, threshold=False)
    p.set_defaults(func=cmd_backfill)


def cmd_backfill(args: argparse.Namespace) -> int:
    """``neardup es backfill``: sketch the documents of an existing index in place."""
    return run_job("backfill", _backfill_job, args)


def _backfill_job(args: argparse.Namespace, client: Any) -> int:
    validate_field_name(args.text_field)
    validate_field_name(args.url_field)
    sketcher = _job_sketcher(args)
    with _progress(args, "backfill") as bar:
        stats = backfill(
            client, args.index, sketcher, text_field=args.text_field, url_field=args.url_field, force=args.force,
            progress=bar.update, total=lambda n: setattr(bar, "total", n),
        )
    print(f"neardup es backfill: {args.index}: {stats.summary()}", file=sys.stderr)
    return 1 if stats.errors else 0


# -- groups --------------------------------------------------------------------------------------------------------


def _add_groups(commands: Any) -> None:
    p = commands.add_parser(
        "groups",
        help="find near-duplicate groups across an index",
        description="Sweep the sketched documents' signatures and group the pages sharing >= t of k positions. "
        "By default every member of a group shares >= t positions with the group's representative (the page "
        "that stays visible): pages are taken in the --keep order, and one sharing >= t with representatives "
        "chosen before it joins the one it shares most with, else becomes one. --transitive gives Broder's "
        "connected components instead, where pages linked only through others (chains of templated pages) "
        "share a group. Prints groups of two or more (with --json: one object per line, {\"group\", "
        "\"representative\", \"members\"}, representative first). --assign writes neardup.group / status / "
        "duplicate_of onto the documents (for `neardup es search`).",
    )
    p.add_argument("--assign", action="store_true", help="write the group id and status onto every document "
                   "whose fields change (and record the run, for --new)")
    p.add_argument("--new", action="store_true", help="only the documents indexed since the last --assign run, "
                   "against the existing groups (the same groups as a full run for every group they join)")
    p.add_argument("--band-filter-dir", default=None, metavar="DIR",
                   help="where --assign keeps the index's band filter and --new reads it, to query only the band "
                   "tokens an older document may hold (default: $XDG_CACHE_HOME/scrapy-neardup/band-filters, "
                   "else ~/.cache/...)")
    p.add_argument("--no-band-filter", action="store_true",
                   help="neither write nor read a band filter (--new then queries every band token)")
    p.add_argument("--transitive", action="store_true",
                   help="Broder's transitive components: a group may hold pages that near-duplicate only other "
                   "members, not its representative (chains join distinct pages); --new then needs the last "
                   "--assign run to have been --transitive too")
    p.add_argument("--threads", type=int, default=2, help="parallel sweep slices (default: 2)")
    p.add_argument("--chunk-size", type=int, default=500,
                   help="--assign: documents per bulk request to start with; requests the node rejects (HTTP 429) "
                   "are retried with backoff in smaller ones (default: 500)")
    p.add_argument("--json", action="store_true", help="one JSON object per line per group")
    p.add_argument("--keep", choices=("first", "shortest-url", "highest"), default="first",
                   help="representative: first indexed (default), shortest URL, or highest --value-field")
    p.add_argument("--url-field", default="url",
                   help="URL field: --keep shortest-url, and the URL the listing shows (default: url; else the "
                   "page key neardup.key that crawls store)")
    p.add_argument("--title-field", default="title", help="title field the listing shows (default: title)")
    p.add_argument("--value-field", help="numeric field for --keep highest")
    p.add_argument("--ignore-other-tags", action="store_true",
                   help="group the documents sketched with these parameters even when the index also holds "
                   "documents sketched with others (refused by default, naming both tags)")
    connection_options(p)
    _sketch_options(p, threshold=True)
    p.set_defaults(func=cmd_groups)


def cmd_groups(args: argparse.Namespace) -> int:
    """``neardup es groups``: print (and optionally assign) near-duplicate groups."""
    return run_job("groups", _groups_job, args)


def _groups_job(args: argparse.Namespace, client: Any) -> int:
    if args.keep == "highest" and not args.value_field:
        raise EsError("--keep highest needs --value-field")
    field = {"first": None, "shortest-url": args.url_field, "highest": args.value_field}[args.keep]
    keep = KeepRule(args.keep, field)
    params = job_params(args)
    t = params.min_shared
    store = None if args.no_band_filter else BandFilterStore(args.band_filter_dir or default_directory())
    if not args.ignore_other_tags:
        require_tag(client, args.index, params.tag)  # documents with other tags would be ignored silently
    if args.chunk_size < 1:
        raise EsError(f"--chunk-size must be positive, got {args.chunk_size}")
    if not args.new and int(client.count(index=args.index)["count"]) == 0:
        raise EsError(f"index {args.index} has no documents: nothing to group (`neardup es index` writes documents "
                      "with their sketches)")
    with _progress(args, "groups") as bar:
        if args.threads < 1:
            raise EsError(f"--threads must be positive, got {args.threads}")
        options: dict[str, Any] = dict(keep=keep, progress=bar.update, slices=args.threads,
                                       total=lambda n: setattr(bar, "total", n),
                                       linkage="transitive" if args.transitive else "representative")
        if args.new:
            report = find_new_groups(client, args.index, params, band_filter=store, **options)
        else:
            report = find_groups(client, args.index, params, **options)
    if not args.new and report.documents == 0:
        _no_sketches(client, args.index, params.tag)
    write_groups(sys.stdout, client, args.index, report.groups, url_field=args.url_field,
                 title_field=args.title_field, as_json=args.json)
    print(f"neardup es groups: {args.index}: {report.summary()} (k={params.num_perm}, t={t}, "
          f"{report.linkage} linkage)", file=sys.stderr)
    if args.assign:
        with _progress(args, "assign") as bar:
            written = assign_groups(client, args.index, report, progress=bar.update, band_filter=store,
                                    chunk_size=args.chunk_size)
        print(f"neardup es groups: group fields updated on {written} documents", file=sys.stderr)
    return 0


def _no_sketches(client: Any, index: str, tag: str) -> None:
    """Refuse a full groups run that found no sketched document: it would do nothing, whatever it assigns."""
    total = int(client.count(index=index)["count"])
    raise EsError(f"none of the {total} documents of index {index} has a sketch made with {tag}: nothing to group; "
                  f"add sketches with `neardup es backfill --index {index} --text-field F` (F: the field with the "
                  "text or HTML), or give the parameters the index was sketched with")


def _has_field(client: Any, index: str, path: str) -> bool:
    """Whether every index ``index`` names maps the dotted field ``path``."""
    answer = client.indices.get_field_mapping(index=index, fields=path)
    return bool(answer) and all(path in (entry.get("mappings") or {}) for entry in dict(answer).values())


# -- search --------------------------------------------------------------------------------------------------------


def _add_search(commands: Any) -> None:
    p = commands.add_parser(
        "search",
        help="search with near-duplicates collapsed",
        description="Full-text search (simple_query_string, all terms required) showing one hit per "
        "near-duplicate group (its kept page when that matches), each with the number of similar matching pages "
        "it hides. Uses the group ids written by `neardup es groups --assign` or by a crawl "
        "(NEARDUP_SEARCH_INDEX), collapsing on neardup.group; with --by-sketch, collapses the top hits by "
        "comparing their sketches instead (no group ids needed); --no-collapse lists every matching page.",
    )
    p.add_argument("query", help="query text")
    p.add_argument("--size", type=int, default=10, help="results to show (default: 10)")
    p.add_argument("--field", action="append", default=[], metavar="F",
                   help="field to search (repeatable; default: every text field of the index)")
    p.add_argument("--json", action="store_true",
                   help='print {"hits": [{"id", "score", "omitted", "group", "index", ...}]}')
    p.add_argument("--fields", action="append", default=[], metavar="F[,F...]",
                   help='with --json: add {"fields": {F: value}} to each hit (dotted paths; repeatable)')
    p.add_argument("--source", action="store_true", help="with --json: add each hit's whole _source")
    p.add_argument("--by-sketch", action="store_true",
                   help="collapse by comparing the sketches of the top hits (indices without group ids)")
    p.add_argument("--fetch", type=int, default=None, metavar="N",
                   help="hits fetched for --by-sketch before collapsing (default: 5 x --size)")
    p.add_argument("--no-collapse", action="store_true",
                   help="every matching page, near-duplicates too (each naming the page it duplicates)")
    p.add_argument("--hidden", type=int, default=0, metavar="N", help="name up to N of the pages each hit hides, "
                   "with their evidence against the group's representative (default: 0)")
    p.add_argument("--url-field", default="url",
                   help="URL field the listing shows (default: url; else the page key neardup.key)")
    p.add_argument("--title-field", default="title",
                   help="title field the listing shows (default: title; else the start of a text field)")
    connection_options(p)
    _sketch_options(p, threshold=True)
    p.set_defaults(func=cmd_search)


def cmd_search(args: argparse.Namespace) -> int:
    """``neardup es search``: collapsed search results."""
    return run_job("search", _search_job, args)


def _search_job(args: argparse.Namespace, client: Any) -> int:
    if args.size < 1:
        raise EsError(f"--size must be >= 1, got {args.size}")
    if args.hidden < 0:
        raise EsError(f"--hidden must be >= 0, got {args.hidden}")
    if args.by_sketch and args.no_collapse:
        raise EsError("--by-sketch and --no-collapse exclude each other")
    shown = [name for value in args.fields for name in value.split(",") if name]
    for name in [*shown, args.url_field, args.title_field]:
        validate_field_name(name)
    if not (args.by_sketch or args.no_collapse) and not _has_field(client, args.index, F_GROUP):
        raise EsError(f"index {args.index} has no group ids ({F_GROUP}) to collapse on: search it with "
                      "--no-collapse (every page) or --by-sketch (sketched pages), or give it sketches and groups "
                      f"(`neardup es backfill --index {args.index} --text-field F`, then `neardup es groups "
                      "--assign`)")
    # Fetch only what is printed: pages' sources can be large (whole HTML), so --json asks for none of it
    # unless --fields or --source name it; the text listing needs a label.
    listed = [*label_fields(args.url_field, args.title_field, text=True), F_STATUS, F_DUPLICATE_OF]
    source: bool | list[str] = True if args.source else (shown if args.json else listed)
    if args.by_sketch:
        t = _job_min_shared(args)
        fetch = args.fetch or 5 * args.size
        fields = args.field or text_fields(client, args.index)
        response = client.search(index=args.index, query=text_query(args.query, fields), size=fetch)
        hits = collapse_hits(response["hits"]["hits"], t)[: args.size]
    else:
        hits = search_collapsed(client, args.index, args.query, size=args.size, fields=args.field, source=source,
                                collapse=not args.no_collapse, hidden=max(0, args.hidden),
                                min_shared=_job_min_shared(args))
    if args.json:
        print(json.dumps({"hits": [h.to_json(shown, source=args.source) for h in hits]}, ensure_ascii=False))
        return 0
    if not hits:
        print("no results")
    named = duplicate_targets(hits) if args.no_collapse else [i for h in hits for i in h.hidden[: args.hidden]]
    labels = page_labels(client, args.index, named, url_field=args.url_field, title_field=args.title_field)
    for rank, hit in enumerate(hits, start=1):
        label = label_of(hit.id, hit.source or {}, args.url_field, args.title_field)
        print(hit_line(rank, hit, label, labels, hidden=max(0, args.hidden)))
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
