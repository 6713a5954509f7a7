"""Sketches: determinism, comparability, short texts, batch vs single, and the estimator's properties."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_neardup import Sketcher, SketchParams
from scrapy_neardup.core.minhash import OnePermutationHasher
from scrapy_neardup.errors import IncompatibleSketches

TEXT = "the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat"


def test_sketch_shape_and_tag() -> None:
    sketch = Sketcher(num_perm=64, seed=7).sketch(TEXT)
    assert sketch.signature.shape == (64,)
    assert sketch.signature.dtype == np.uint32
    assert sketch.tag == "mh16-k64-word5-s7-auto"
    assert 0 <= sketch.fingerprint < 2**64
    assert sketch.num_shingles == len(TEXT.split()) - 5 + 1


def test_a_sketcher_holds_its_parameters() -> None:
    """``params`` names what the sketcher does (its tag is ``params.tag``): as given to ``from_params``, ``t``
    included; made directly, ``t`` is the default threshold's for ``k`` (at least 1)."""
    params = SketchParams.create(num_perm=64, min_shared=50, shingle="char", seed=7, content="main")
    sketcher = Sketcher.from_params(params)
    assert sketcher.params is params and sketcher.tag == params.tag == sketcher.sketch("a b c d e f").tag
    direct = Sketcher(num_perm=64, shingle="char", seed=7, content="main")
    assert direct.tag == params.tag and direct.params.min_shared == 52  # min_shared_for(0.9, 64)
    again = SketchParams.from_tag(direct.tag, min_shared=50)  # the tag read back: the same sketches, the same t
    assert (again.tag, again.width, again.min_shared) == (params.tag, params.width, 50)
    assert Sketcher(num_perm=1).params.min_shared == 1


def test_deterministic_across_processes() -> None:
    code = (
        f"from scrapy_neardup import Sketcher; s = Sketcher().sketch({TEXT!r}); "
        "print(s.fingerprint, ','.join(map(str, s.signature.tolist())))"
    )
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
            for _ in range(2)}
    here = Sketcher().sketch(TEXT)
    assert runs == {f"{here.fingerprint} {','.join(map(str, here.signature.tolist()))}\n"}


def test_seeds_and_parameters_change_the_tag_and_refuse_comparison() -> None:
    a = Sketcher(seed=1).sketch(TEXT)
    b = Sketcher(seed=2).sketch(TEXT)
    assert not np.array_equal(a.signature, b.signature)
    with pytest.raises(IncompatibleSketches, match="different parameters"):
        a.resemblance(b)
    with pytest.raises(IncompatibleSketches):
        a.shared_positions(Sketcher(shingle="char").sketch(TEXT))


def test_identical_after_normalization_means_identical_sketch() -> None:
    sketcher = Sketcher()
    a, b = sketcher.sketch_many([TEXT, "<p>The QUICK brown fox,</p> jumps over the lazy dog; while the cat sleeps "
                                       "on the warm mat!"])
    assert a == b
    assert a.resemblance(b) == 1.0
    assert a.fingerprint == b.fingerprint


def test_short_text_gets_a_usable_signature() -> None:
    sketcher = Sketcher()
    one, one_again, other = sketcher.sketch_many(["Hello", "hello!", "Goodbye"])
    assert one.num_shingles == 1 and not one.empty
    assert one.resemblance(one_again) == 1.0
    assert one.resemblance(other) == 0.0
    two_words = sketcher.sketch("hello world")
    assert two_words.resemblance(one) == 0.0


def test_empty_text_is_flagged_empty() -> None:
    sketcher = Sketcher()
    for text in ["", "   ", "\n\t", "!!! ???"]:
        assert sketcher.sketch(text).empty


def test_batch_equals_single() -> None:
    sketcher = Sketcher(num_perm=96)
    texts = [TEXT, "", "one", "Мама мыла раму " * 20, TEXT.upper() + " extra words here", "x " * 3000]
    batch = sketcher.sketch_many(texts)
    single = [sketcher.sketch(t) for t in texts]
    assert batch == single


def test_char_shingles_and_sizes() -> None:
    sketcher = Sketcher(shingle="char", shingle_size=4)
    assert sketcher.sketch("abcdef").num_shingles == 3
    assert sketcher.sketch("abc").num_shingles == 1
    with pytest.raises(ValueError, match="shingle"):
        Sketcher(shingle="sentence")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shingle_size"):
        Sketcher(shingle_size=0)
    with pytest.raises(ValueError, match="num_perm"):
        Sketcher(num_perm=0)


def test_very_long_word_and_huge_text() -> None:
    sketcher = Sketcher(max_chars=3_000_000)
    giant = "a" * 2_500_000
    sketch = sketcher.sketch(giant + " tail")
    assert not sketch.empty and not sketch.truncated
    capped = sketcher.sketch("word " * 1_000_000)
    assert capped.truncated


words = st.text(alphabet="abcdefghij", min_size=1, max_size=4)
documents = st.lists(words, min_size=0, max_size=60).map(" ".join)


@settings(max_examples=60, deadline=None)
@given(a=documents, b=documents)
def test_resemblance_is_symmetric_and_bounded(a: str, b: str) -> None:
    sketcher = Sketcher(num_perm=32)
    sa, sb = sketcher.sketch_many([a, b])
    assert sa.shared_positions(sb) == sb.shared_positions(sa)
    assert 0.0 <= sa.resemblance(sb) <= 1.0
    if sketcher.jaccard(a, b) == 0.0 and not (sa.empty or sb.empty):
        # Disjoint shingle sets share a position only through a 32-bit value collision.
        assert sa.shared_positions(sb) <= 1


@settings(max_examples=40, deadline=None)
@given(texts=st.lists(documents, min_size=1, max_size=8), seed=st.integers(0, 2**32))
def test_sketching_is_deterministic(texts: list[str], seed: int) -> None:
    assert Sketcher(num_perm=16, seed=seed).sketch_many(texts) == Sketcher(num_perm=16, seed=seed).sketch_many(texts)


@settings(max_examples=25, deadline=None)
@given(
    shared=st.integers(0, 300),
    only_a=st.integers(0, 300),
    only_b=st.integers(1, 300),
    offset=st.integers(0, 2**40),
)
def test_estimate_is_unbiased(shared: int, only_a: int, only_b: int, offset: int) -> None:
    """Averaged over independent seeds, the share of agreeing positions converges to the exact Jaccard."""
    universe = np.arange(offset, offset + shared + only_a + only_b, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    a = universe[: shared + only_a]
    b = np.concatenate([universe[:shared], universe[shared + only_a :]])
    exact = shared / universe.size
    seeds = 40
    agree = 0.0
    for seed in range(seeds):
        hasher = OnePermutationHasher(128, seed)
        sigs = hasher.signatures(np.concatenate([a, b]), np.array([a.size, b.size]))
        if a.size == 0:
            continue
        agree += float(np.mean(sigs[0] == sigs[1]))
    if a.size == 0:
        return
    mean = agree / seeds
    # Standard error of the mean of 40 estimates, each with variance <= r(1-r)/128 (plus slack for OPH).
    tolerance = 4 * np.sqrt(max(exact * (1 - exact), 0.01) / 128 / seeds) + 0.01
    assert abs(mean - exact) <= tolerance


def test_each_content_mode_carries_its_own_tag() -> None:
    body, main, auto = Sketcher(content="body"), Sketcher(content="main"), Sketcher()
    assert body.tag == "mh11-k128-word5-s1" and main.tag == "mh11-k128-word5-s1-main"
    assert auto.tag == "mh16-k128-word5-s1-auto"
    page = "<body><nav>home news sport weather</nav><main>" + "the story itself goes here " * 20 + "</main></body>"
    with pytest.raises(IncompatibleSketches):
        body.sketch(page).resemblance(main.sketch(page))
    with pytest.raises(ValueError, match="content='article' is not valid: expected one of 'auto', 'main', 'body'"):
        Sketcher(content="article")  # type: ignore[arg-type]
