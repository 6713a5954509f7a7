"""The evidence of a decision: which rule decided, how many signature positions the two pages share of ``k``, and
the resemblance this estimates with its 95% interval. The same few fields go into the mark field, a drop's message,
the ``neardup dedupe`` output and the groups, so a user can answer "why?" from the output alone.

Design notes: docs/architecture.md#scrapy_neardupcoreevidence
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from .match import Match, Sketched
from .sketch import removed_share

if TYPE_CHECKING:
    from .sketch import Sketch
from .theory import resemblance_interval

Rule = Literal["near_duplicate", "exact", "canonical", "soft404", "mirror", "repeat", "transitive"]
RULES: tuple[str, ...] = ("near_duplicate", "exact", "canonical", "soft404", "mirror", "repeat", "transitive")


def evidence(shared: int, num_perm: int, rule: Rule) -> dict[str, Any]:
    """``{"rule", "shared", "k", "interval"}`` for a decision taken on ``shared`` of ``num_perm`` positions.

    Args:
        shared: ``s``, positions where the two signatures agree (``0 <= s <= k``).
        num_perm: ``k``, signature positions.
        rule: the rule that decided (module doc).

    The resemblance ``r`` is estimated by ``s / k`` (``s ~ Binomial(k, r)``); ``interval`` is its 95% Wilson score
    interval, so a drop at ``s = 108`` of ``k = 128`` says ``r`` lies in ``[0.77, 0.90]`` (not "is 0.84").
    """
    if rule not in RULES:
        raise ValueError(f"rule must be one of {', '.join(RULES)}, got {rule!r}")
    low, high = resemblance_interval(shared, num_perm)
    return {"rule": rule, "shared": int(shared), "k": int(num_perm), "interval": [round(low, 3), round(high, 3)]}


def side_fields(sketched: str | None, words: int = 0, page_words: int = 0, prefix: str = "") -> dict[str, Any]:
    """What of one page was sketched, as evidence fields: ``sketched`` (one of
    :data:`~scrapy_neardup.core.sketch.SKETCHED`), ``words`` (words sketched, when counted) and ``removed``
    (``1 - words / page_words``, 2 decimals: the share of the page's whole text left out before sketching, when
    ``page_words`` was counted); each name after ``prefix`` (``"kept_"`` for the kept page). Empty when
    ``sketched`` is not known."""
    if not sketched:
        return {}
    fields: dict[str, Any] = {prefix + "sketched": sketched}
    if words > 0:
        fields[prefix + "words"] = int(words)
    share = removed_share(words, page_words) if words > 0 else None
    if share is not None:
        fields[prefix + "removed"] = share
    return fields


def kept_fields(kept: Sketched | None) -> dict[str, Any]:
    """The kept page's side (:func:`side_fields` with ``prefix="kept_"``); empty when its store does not know it."""
    return {} if kept is None else side_fields(kept.kind, kept.words, kept.page_words, prefix="kept_")


def sides(duplicate: Sketched | None, kept: Sketched | None) -> dict[str, Any]:
    """The evidence fields saying what of a duplicate (``sketched``, ``words``, ``removed``) and of the kept page it
    names (``kept_sketched``, ``kept_words``, ``kept_removed``) was sketched, as far as each is known."""
    own = {} if duplicate is None else side_fields(duplicate.kind, duplicate.words, duplicate.page_words)
    return {**own, **kept_fields(kept)}


def match_evidence(match: Match, num_perm: int, canonical: bool = False,
                   sketch: Sketch | None = None) -> dict[str, Any]:
    """The evidence of a duplicate of ``match``: rule ``"exact"`` for equal fingerprints, ``"canonical"`` when the
    page was grouped by its canonical link (``canonical=True``), ``"near_duplicate"`` otherwise; with the
    duplicate's ``sketch``, what of it was sketched (``sketched``, ``words``, ``removed``: :func:`side_fields`),
    and what of the kept page was when its store remembers it (``kept_sketched``, ``kept_words``,
    ``kept_removed``)."""
    rule: Rule = "canonical" if canonical else ("exact" if match.exact else "near_duplicate")
    fields = evidence(min(match.shared, num_perm), num_perm, rule)
    if sketch is not None:
        fields.update(side_fields(sketch.sketched, sketch.words, sketch.page_words))
    fields.update(kept_fields(match.kept))
    return fields


def mirror_evidence(copies: int, checked: int) -> dict[str, Any]:
    """The evidence of a mirror host: ``copies`` of its ``checked`` pages near-duplicate a page of the host it
    mirrors. The same fields as :func:`evidence` (``shared = copies``, ``k = checked``); ``interval`` is the 95%
    Wilson interval of the share of its pages that are copies (``copies ~ Binomial(checked, share)``)."""
    return evidence(copies, checked, "mirror")


def describe_evidence(fields: dict[str, Any]) -> str:
    """One line for a log or a drop message: ``near_duplicate: 122 of 128 positions shared, r in [0.901, 0.978]``,
    then what of each page was sketched when known (``; sketched: own text, 412 words, 8% removed; kept: main
    content, 415 words, 31% removed``); ``mirror: 23 of 24 checked pages are copies, share in [0.798, 0.993]`` for
    a mirror host."""
    low, high = fields["interval"]
    what = "".join(f"; {label}: {_side(fields, prefix)}" for label, prefix in (("sketched", ""), ("kept", "kept_"))
                   if fields.get(prefix + "sketched"))
    if fields["rule"] == "mirror":
        return (f"mirror: {fields['shared']} of {fields['k']} checked pages are copies, share in "
                f"[{low:.3f}, {high:.3f}]")
    return (f"{fields['rule']}: {fields['shared']} of {fields['k']} positions shared, r in [{low:.3f}, {high:.3f}]"
            f"{what}")


def _side(fields: dict[str, Any], prefix: str) -> str:
    """``own text, 812 words, 35% removed`` (what is known of one side)."""
    parts = [str(fields[prefix + "sketched"])]
    if fields.get(prefix + "words"):
        parts.append(f"{fields[prefix + 'words']} words")
    if fields.get(prefix + "removed") is not None:
        parts.append(f"{fields[prefix + 'removed']:.0%} removed")
    return ", ".join(parts)
