"""One parameter object, validated once; one backend protocol with a batch call and a decision type."""

from __future__ import annotations

import asyncio

import pytest

from scrapy_neardup import Sketcher
from scrapy_neardup.core.params import SketchParams, content_change
from scrapy_neardup.errors import ParameterError
from scrapy_neardup.store.backend import Backend, Decision
from scrapy_neardup.store.embedded import EmbeddedBackend


def test_defaults_and_derived_t() -> None:
    params = SketchParams.create()
    assert (params.num_perm, params.min_shared, params.threshold, params.width, params.seed) == (128, 107, 0.9, 5, 1)
    assert params.tag == Sketcher().tag == "mh16-k128-word5-s1-auto"
    assert SketchParams.create(threshold=0.5, min_shared=100).threshold is None  # explicit t wins
    char = SketchParams.create(shingle="char", shingle_size=4, seed=7)
    assert Sketcher.from_params(char).tag == "mh16-k128-char4-s7-auto"


@pytest.mark.parametrize(("saved", "named", "not_named"), [
    # A "body" store of scheme 5 missed only what changed every mode, not the changes of "auto" in between.
    ("mh5-k128-word5-s1", ["self-closing SVG"], ["main-content extraction", "passages of prose", "<header>"]),
    ("mh5-k128-word5-s1-main", ["self-closing SVG"], ["main-content extraction", "<header>"]),
    ("mh8-k128-word5-s1-auto", ["<header>", "self-closing SVG"], ["passages of prose", "folding"]),
])
def test_a_store_of_an_earlier_scheme_is_told_what_its_mode_read_otherwise(
    saved: str, named: list[str], not_named: list[str],
) -> None:
    mode = saved.rsplit("-", 1)[-1] if saved.endswith(("-auto", "-main")) else "body"
    message = content_change(saved, Sketcher(content=mode).tag)  # type: ignore[arg-type]
    assert message is not None and f"made by an earlier version ({saved})" in message
    assert all(what in message for what in named) and not any(what in message for what in not_named), message


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"num_perm": 0}, "num_perm"), ({"num_perm": 1025}, "num_perm"), ({"num_perm": True}, "num_perm"),
        ({"min_shared": 0}, "min_shared"), ({"num_perm": 16, "min_shared": 17}, "min_shared"),
        ({"threshold": 0}, "threshold"), ({"threshold": 1.01}, "threshold"), ({"threshold": 0.01}, "threshold"),
        ({"shingle": "sentence"}, "shingle"), ({"shingle_size": 0}, "shingle_size"),
        ({"seed": -1}, "seed"), ({"seed": 2**64}, "seed"),
    ],
)
def test_each_wrong_value_names_its_field_under_every_entry_points_names(values: dict, field: str) -> None:
    with pytest.raises(ParameterError) as info:
        SketchParams.create(**values)
    error = info.value
    assert error.field == field and str(error).startswith(f"{field}=")
    settings_names = {name: f"NEARDUP_{name.upper()}" for name in ("num_perm", "min_shared", "threshold", "shingle",
                                                                     "shingle_size", "seed")}
    assert error.render(settings_names).startswith(f"NEARDUP_{field.upper()}=")
    assert "{" not in error.render(settings_names)
    # The Sketcher applies the same rule to the parameters it takes.
    if field in ("num_perm", "shingle", "shingle_size", "seed"):
        with pytest.raises(ParameterError, match=field):
            Sketcher(**values)


def test_default_batch_call_loops_over_check_and_add() -> None:
    sketcher = Sketcher()
    a, b, c = sketcher.sketch_many(["one two three four five six seven"] * 2 + ["eight nine ten eleven twelve x"])
    store = EmbeddedBackend(128, 107, sketcher.tag)
    assert isinstance(store, Backend) and store.never_suspends
    decisions = asyncio.run(store.check_and_add_many([("a", a), ("b", b), ("c", c)]))
    assert [d.outcome for d in decisions] == ["kept", "duplicate", "kept"]
    assert decisions[1].match is not None and decisions[1].match.key == "a" and decisions[1].is_duplicate
    assert Decision.of(None) == Decision.kept() and Decision.revisit(changed=True).changed


@pytest.mark.parametrize("options", [{}, {"content": "body"}, {"content": "main", "num_perm": 64, "seed": 7},
                                     {"shingle": "char", "shingle_size": 7, "content": "auto"}])
def test_the_tag_names_the_parameters_and_reads_back(options: dict) -> None:
    params = SketchParams.create(**options)
    assert params.tag == Sketcher(**options).tag
    again = SketchParams.from_tag(params.tag, min_shared=params.min_shared)
    assert (again.tag, again.num_perm, again.min_shared, again.width, again.seed, again.content) == (
        params.tag, params.num_perm, params.min_shared, params.width, params.seed, params.content)
    with pytest.raises(ValueError, match="not a sketch parameter tag"):
        SketchParams.from_tag(params.tag + "-x")


def test_entry_points_take_sketch_params_not_a_tag() -> None:
    from scrapy_neardup.core.params import require_params

    params = SketchParams.create()
    assert require_params(params, "find_groups") is params
    for wrong in (params.tag, None, {"num_perm": 128}):
        with pytest.raises(TypeError) as info:
            require_params(wrong, "find_groups")
        message = str(info.value)
        assert message.startswith("find_groups takes SketchParams") and "from_tag" in message and "\n" not in message
