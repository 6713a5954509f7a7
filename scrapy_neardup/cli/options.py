"""Command-line options that every command sketching pages shares (``neardup`` and ``neardup es``), with one rule
for their values (:class:`~scrapy_neardup.core.params.SketchParams`) and error messages under the options' names."""

from __future__ import annotations

import argparse
from typing import Any

from ..core.params import DEFAULT_NUM_PERM, DEFAULT_SEED, SketchParams
from ..core.text import CONTENT_MODES, DEFAULT_CONTENT
from ..core.theory import DEFAULT_THRESHOLD
from ..errors import ParameterError


def add_sketch_options(
    parser: argparse.ArgumentParser, *, with_threshold: bool = True, title: str = "sketch parameters"
) -> None:
    """The sketch options (``--num-perm``, ``--shingle``, ``--shingle-size``, ``--seed``, ``--content``, and optionally
    ``--threshold`` / ``--min-shared``), shared by every command that sketches."""
    group = parser.add_argument_group(title)
    group.add_argument("--num-perm", type=int, default=DEFAULT_NUM_PERM, metavar="K",
                       help=f"signature positions k (default {DEFAULT_NUM_PERM})")
    group.add_argument("--shingle", choices=("word", "char"), default="word",
                       help="word w-shingles (default) or character n-grams")
    group.add_argument("--shingle-size", type=int, default=None, metavar="W",
                       help="units per shingle (default 5 words or 9 characters)")
    group.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"hash seed (default {DEFAULT_SEED})")
    group.add_argument("--content", choices=CONTENT_MODES, default=DEFAULT_CONTENT,
                       help="what of a page is sketched: auto (default: its own text, without link lists and the "
                            "blocks its site repeats on many pages), main (the main content it marks: <main>, else "
                            "<article>, else <body>, without nav, header, footer, aside) or body (all visible text)")
    if with_threshold:
        add_threshold_options(group)


def add_threshold_options(group: Any) -> None:
    """``--threshold`` or ``--min-shared`` (one excludes the other)."""
    exclusive = group.add_mutually_exclusive_group()
    exclusive.add_argument("--threshold", type=float, metavar="R",
                           help=f"target resemblance: pairs at R are caught with probability >= 0.99 "
                                f"(default {DEFAULT_THRESHOLD})")
    exclusive.add_argument("--min-shared", type=int, metavar="T",
                           help="positions that must agree (overrides --threshold)")


def add_progress_option(parser: argparse.ArgumentParser) -> None:
    """``--progress`` / ``--no-progress``: a progress bar on stderr (default: when stderr is a terminal)."""
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar on stderr (default: when stderr is a terminal)")


#: The option behind each sketch parameter, for error messages.
OPTION_NAMES = {
    "num_perm": "--num-perm", "min_shared": "--min-shared", "threshold": "--threshold", "shingle": "--shingle",
    "shingle_size": "--shingle-size", "seed": "--seed", "content": "--content",
}


def params_from_args(args: argparse.Namespace) -> SketchParams:
    """The :class:`~scrapy_neardup.core.params.SketchParams` the sketch options ask for (the threshold options
    are optional: commands without them get the default ``t``).

    Raises:
        ValueError: a value is wrong; the message names the option.
    """
    given = vars(args)
    try:
        return SketchParams.create(
            num_perm=args.num_perm, threshold=given.get("threshold"), min_shared=given.get("min_shared"),
            shingle=given.get("shingle", "word"), shingle_size=given.get("shingle_size"),
            seed=given.get("seed", DEFAULT_SEED), content=given.get("content", DEFAULT_CONTENT),
        )
    except ParameterError as exc:
        raise ValueError(exc.render(OPTION_NAMES)) from None



def params_or_exit(args: argparse.Namespace, parser: argparse.ArgumentParser) -> SketchParams:
    """:func:`params_from_args`, a bad value ending the command with the parser's one-line usage error (exit 2)."""
    try:
        return params_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
