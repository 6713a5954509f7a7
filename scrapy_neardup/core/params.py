"""The sketch parameters, validated once: ``k``, ``t`` (or the threshold it comes from), shingling and seed.

Every entry point (the Scrapy settings, the ``neardup`` and ``neardup es`` options, :class:`Sketcher`, the
backends) builds a :class:`SketchParams` or calls the checks below, so a value is judged by one rule wherever
it comes from. A wrong value raises :class:`ParameterError`, which knows the field it concerns; each entry
point renders it under its own names (``NEARDUP_NUM_PERM``, ``--num-perm``, ``num_perm``) with
:meth:`ParameterError.render`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .shingles import SHINGLE_KINDS, ShingleKind
from .text import CONTENT_MODES, DEFAULT_CONTENT, ContentMode
from .theory import DEFAULT_THRESHOLD, min_shared_for

#: ``k`` may not exceed this: the one-permutation hasher splits the hash range into ``k`` bins, and beyond a
#: thousand positions the candidate queries of Elasticsearch grow past its clause limits.
MAX_NUM_PERM = 1024
DEFAULT_NUM_PERM = 128
DEFAULT_SEED = 1
#: Units per shingle when none is given.
DEFAULT_WIDTH: dict[str, int] = {"word": 5, "char": 9}
#: Seeds are hashed as unsigned 64-bit integers; larger ones would silently alias smaller ones.
SEED_LIMIT = 1 << 64

#: The fields, under the names the Python API uses.
FIELDS = ("num_perm", "min_shared", "threshold", "shingle", "shingle_size", "seed", "content")
_CORE_NAMES = {name: name for name in FIELDS}


class ParameterError(ValueError):
    """A sketch parameter has a wrong value.

    Attributes:
        field: which one (one of :data:`FIELDS`).
        value: the value refused.
        problem: what is wrong, a template in which ``{num_perm}`` etc. stand for the fields' names, so that
            each entry point can name them its own way (see :meth:`render`).
    """

    def __init__(self, field: str, value: Any, problem: str) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        super().__init__(self.render(_CORE_NAMES))

    def render(self, names: Mapping[str, str], value: Any = None) -> str:
        """``"<name>=<value> <problem>"`` with every field named through ``names`` (``value``: the raw value
        as the user wrote it, e.g. the string of ``-s NAME=value``; default the value refused)."""
        shown = self.value if value is None else value
        return f"{names[self.field]}={shown!r} " + self.problem.format_map(names)


def check_num_perm(num_perm: Any) -> int:
    """``k`` in ``[1, MAX_NUM_PERM]``: each position agrees with probability ``r``, so the estimate
    ``r_hat = shared / k`` has standard deviation ``sqrt(r (1 - r) / k)``."""
    if not _is_int(num_perm) or not 1 <= num_perm <= MAX_NUM_PERM:
        raise ParameterError("num_perm", num_perm, f"is not valid: expected an integer in [1, {MAX_NUM_PERM}]")
    return int(num_perm)


def check_min_shared(min_shared: Any, num_perm: int) -> int:
    """``t`` in ``[1, k]``: a pair is flagged when its signatures agree in ``>= t`` positions."""
    if not _is_int(min_shared) or not 1 <= min_shared <= num_perm:
        raise ParameterError(
            "min_shared", min_shared, f"is not valid: expected an integer in [1, {{num_perm}}={num_perm}]"
        )
    return int(min_shared)


def check_threshold(threshold: Any) -> float:
    """The target resemblance ``r*`` in ``(0, 1]``."""
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 < threshold <= 1:
        raise ParameterError("threshold", threshold, "is not valid: expected a resemblance in (0, 1]")
    return float(threshold)


def check_shingling(shingle: Any, shingle_size: Any) -> int:
    """The shingle kind (``"word"`` or ``"char"``) and its width (``None``: the kind's default); returns the
    width."""
    if shingle not in SHINGLE_KINDS:
        raise ParameterError(
            "shingle", shingle, "is not valid: expected one of " + ", ".join(repr(k) for k in SHINGLE_KINDS)
        )
    width = DEFAULT_WIDTH[shingle] if shingle_size is None else shingle_size
    if not _is_int(width) or width < 1:
        raise ParameterError("shingle_size", shingle_size, "is not valid: expected an integer >= 1")
    return int(width)


def check_seed(seed: Any) -> int:
    """The hash seed, an unsigned 64-bit integer: sketches agree across machines for the same seed only."""
    if not _is_int(seed) or not 0 <= seed < SEED_LIMIT:
        raise ParameterError("seed", seed, f"is not valid: expected an integer in [0, {SEED_LIMIT - 1}]")
    return int(seed)


def check_content(content: Any) -> ContentMode:
    """What of a page is sketched: ``"auto"`` (its own text), ``"main"`` (the main content it marks) or
    ``"body"`` (all visible text); see :class:`~scrapy_neardup.core.sketch.Sketcher`."""
    if content not in CONTENT_MODES:
        raise ParameterError(
            "content", content, "is not valid: expected one of " + ", ".join(repr(c) for c in CONTENT_MODES)
        )
    return content


def _is_int(value: Any) -> bool:
    # bool is an int subclass: True must not silently mean 1.
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class SketchParams:
    """The validated parameters of one sketching set-up; build it with :meth:`create`.

    Attributes:
        num_perm: ``k``, signature positions.
        min_shared: ``t``: two pages are near-duplicates when their signatures agree in at least ``t`` of ``k``
            positions. Each position agrees with probability ``r`` (the pages' resemblance), so
            ``P(flag) = P[Binomial(k, r) >= t]``.
        threshold: the target resemblance ``r*`` that ``t`` was chosen for (the largest ``t`` flagging
            ``r = r*`` with probability >= 0.99: ``t = 107`` for ``k = 128, r* = 0.9``); ``None`` when ``t`` was
            given explicitly.
        shingle: ``"word"`` or ``"char"``.
        shingle_size: units per shingle as given; ``None`` for the kind's default (:attr:`width`).
        seed: hash seed.
        content: what of a page is sketched, ``"auto"``, ``"main"`` or ``"body"`` (part of the tag).
    """

    num_perm: int = DEFAULT_NUM_PERM
    min_shared: int = 107
    threshold: float | None = DEFAULT_THRESHOLD
    shingle: ShingleKind = "word"
    shingle_size: int | None = None
    seed: int = DEFAULT_SEED
    content: ContentMode = DEFAULT_CONTENT

    @classmethod
    def create(
        cls,
        *,
        num_perm: int = DEFAULT_NUM_PERM,
        threshold: float | None = None,
        min_shared: int | None = None,
        shingle: ShingleKind = "word",
        shingle_size: int | None = None,
        seed: int = DEFAULT_SEED,
        content: ContentMode = DEFAULT_CONTENT,
    ) -> SketchParams:
        """Check every value and derive ``t``: ``min_shared`` when given (it overrides ``threshold``), else
        :func:`~scrapy_neardup.core.theory.min_shared_for` of ``threshold`` (default 0.9).

        Raises:
            ParameterError: a value is out of range, or the threshold is too low for ``k`` to catch reliably.
        """
        k = check_num_perm(num_perm)
        check_shingling(shingle, shingle_size)
        seed = check_seed(seed)
        content = check_content(content)
        if threshold is not None:
            threshold = check_threshold(threshold)
        if min_shared is not None:
            return cls(k, check_min_shared(min_shared, k), None, shingle, shingle_size, seed, content)
        threshold = DEFAULT_THRESHOLD if threshold is None else threshold
        t = min_shared_for(threshold, k)
        if t < 1:
            raise ParameterError(
                "threshold", threshold,
                f"is too low for {{num_perm}}={k}: no number of shared positions catches it reliably; raise the "
                "threshold or {num_perm}, or set {min_shared}",
            )
        return cls(k, t, threshold, shingle, shingle_size, seed, content)

    @property
    def width(self) -> int:
        """Units per shingle, resolved: ``shingle_size``, or 5 words / 9 characters."""
        return DEFAULT_WIDTH[self.shingle] if self.shingle_size is None else self.shingle_size

    @property
    def tag(self) -> str:
        """The tag sketches made with these parameters carry (:func:`~scrapy_neardup.core.sketch.make_tag`)."""
        from .sketch import make_tag

        return make_tag(self.num_perm, self.shingle, self.width, self.seed, self.content)


__all__ = [
    "DEFAULT_NUM_PERM",
    "DEFAULT_SEED",
    "DEFAULT_WIDTH",
    "FIELDS",
    "MAX_NUM_PERM",
    "ParameterError",
    "SketchParams",
    "check_min_shared",
    "check_num_perm",
    "check_content",
    "check_seed",
    "check_shingling",
    "check_threshold",
]
