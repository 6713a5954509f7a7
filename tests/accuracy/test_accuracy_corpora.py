"""Tests of the accuracy test bed itself: the corpora, their stripped variant, crawl order, labels and scoring.

The product's near-duplicate decisions are measured against this test bed (``benchmarks/bench_templates.py``), so
the test bed must be right: the stripped variant must hide every semantic hint but change no visible text, the
labels must be exact, and the crawl must reach every page once.
"""

from __future__ import annotations

import random
import re
from urllib.parse import unquote, urldefrag, urljoin

import labels as labeller
import numpy as np
import pytest
from corpora import (
    COPY_HOST,
    CORPUS_NAMES,
    SEMANTIC_ATTRIBUTES,
    SEMANTIC_ELEMENTS,
    SOURCES,
    TWICE,
    Corpus,
    Page,
    SiteResolver,
    Source,
    copy_pairs,
    fetch_package,
    links,
    list_pages,
    neutral,
    parse,
)
from evaluate import Decision, components_report, evaluate, star_groups
from labels import Labels, main_elements, main_text, set_jaccard, shingles, visible_text, words

#: The page-by-page checks of the variants look at every third page of each corpus (every page would take minutes).
STRIDE = 3
_HREF = re.compile(rb"""<a\s[^>]*?href\s*=\s*["']?([^"'\s>]+)""", re.IGNORECASE)


def _checked_pages(corpus: Corpus) -> list[Page]:
    """Every third page; in ``python-twice``, of the copies only (the originals are the ``python`` corpus')."""
    pages = [p for p in corpus.pages if p.host == COPY_HOST] if corpus.name == TWICE else list(corpus.pages)
    return pages[::STRIDE]


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_stripped_variant_hides_semantics_keeps_layout_and_visible_text(corpora: dict[str, Corpus],
                                                                        name: str) -> None:
    """No semantic element or attribute is left; element for element the stripped page is the served one renamed
    (same structure; each class name and id replaced by the same neutral token wherever it appears); the visible
    text of the body is the same, by the labeller's own extraction."""
    for page in _checked_pages(corpora[name]):
        served, stripped = parse(page.served), parse(page.stripped)
        for before, after in zip(served.iter(), stripped.iter(), strict=True):
            if not isinstance(after.tag, str):
                continue
            assert after.tag not in SEMANTIC_ELEMENTS, (page.key, after.tag)
            assert after.tag == ("div" if before.tag in SEMANTIC_ELEMENTS else before.tag), page.key
            for attribute in after.attrib:
                assert attribute not in SEMANTIC_ATTRIBUTES and not attribute.startswith("aria-"), (page.key, attribute)
            if after.tag == "meta":  # charset declarations: see corpora.serialize
                continue
            if before.get("class") is not None:
                assert after.get("class") == " ".join(neutral(c, "c") for c in before.get("class").split())
            if before.get("id") is not None:
                assert after.get("id") == neutral(before.get("id"), "i")
        assert words(visible_text([stripped.body])) == words(visible_text([served.body])), page.key


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_main_content_selectors_match(corpora: dict[str, Corpus], labels: dict[str, Labels], name: str) -> None:
    """The labeller finds the main content of the served pages, and it is only part of the page's text."""
    corpus, found = corpora[name], labels[name]
    assert np.count_nonzero(found.words == 0) <= (2 if name == TWICE else 1)  # a JavaScript search page at most
    body_words = main_words = 0
    for page in _checked_pages(corpus):
        root = parse(page.served)
        assert main_elements(root, corpus.generator), f"no main content found in {page.key}"
        body_words += len(words(visible_text([root.body])))
        main_words += int(found.words[found.index(page.key)])
    assert 0 < main_words < body_words


@pytest.mark.parametrize("source", SOURCES, ids=lambda s: s.name)
def test_crawl_order_starts_at_index_and_covers_every_page_once(corpora: dict[str, Corpus], source: Source) -> None:
    corpus = corpora[source.name]
    assert corpus.pages[0].path == source.index
    tree, version = fetch_package(source.package)
    assert version == corpus.version
    site = tree / source.root
    expected = list_pages(site, source)
    paths = [page.path for page in corpus.pages]
    assert len(paths) == len(set(paths)) == len(expected)
    assert set(paths) == set(expected)
    assert len({page.key for page in corpus.pages}) == len(corpus)
    assert 0.8 * len(corpus) <= corpus.reached <= len(corpus)
    # The unreached pages come last, sorted; each reached page (the index aside) is linked from an earlier one
    # (hrefs found by a regular expression here, independently of the crawl's parser).
    assert paths[corpus.reached :] == sorted(paths[corpus.reached :])
    resolve = SiteResolver(site, source.host, frozenset(paths))
    linked: set[str] = {source.index}
    for page in corpus.pages[: corpus.reached]:
        assert page.path in linked, f"{page.path} is crawled before any page links to it"
        for href in _HREF.findall(page.served):
            try:
                target = urldefrag(urljoin(page.key, href.decode("utf-8", "replace").replace("&amp;", "&")))[0]
            except ValueError:  # not a URL
                continue
            if target.startswith(f"http://{source.host}/"):
                path = unquote(target.split("/", 3)[3].split("?")[0])
                resolved = resolve(path + "index.html" if path == "" or path.endswith("/") else path)
                if resolved is not None:
                    linked.add(resolved)
        if source.menu_script and page.path == source.index:
            linked.update(paths[: corpus.reached])  # the menu drawn by the script links the rest
    # Breadth-first: the index's own links come right after it, in document order.
    first = links(parse(corpus.pages[0].served), corpus.pages[0].key, source.host, resolve)
    first = [p for p in first if p != source.index]
    assert paths[1 : 1 + len(first)] == first


def test_python_twice_interleaves_both_hosts(corpora: dict[str, Corpus]) -> None:
    twice, python = corpora[TWICE], corpora["python"]
    assert len(twice) == 2 * len(python)
    assert [p.key for p in twice.pages[0::2]] == python.keys
    assert [p.path for p in twice.pages[1::2]] == [p.path for p in python.pages]
    assert {p.host for p in twice.pages[1::2]} == {COPY_HOST}


def test_python_copies_are_real_pairs_with_another_template(corpora: dict[str, Corpus],
                                                            labels: dict[str, Labels]) -> None:
    twice = corpora[TWICE]
    real = {(a, b) for a, b, _ in labels[TWICE].real_pairs(0.9)}
    pairs = copy_pairs(twice)
    assert len(pairs) == len(twice) // 2
    for original, copy in pairs:
        assert labels[TWICE].jaccard(original, copy) == 1.0
        assert (original, copy) in real
    for original, copy in pairs[::25]:
        a, b = twice.page(original), twice.page(copy)
        assert main_text(a.served, twice.generator) == main_text(b.served, twice.generator)
        body_a, body_b = labeller.body_text(a.served), labeller.body_text(b.served)
        assert "3.12.0 Documentation" in body_b and "3.12.0" not in body_a


def _brute_force(corpus: Corpus, a: str, b: str) -> float:
    return set_jaccard(shingles(words(main_text(corpus.page(a).served, corpus.generator))),
                       shingles(words(main_text(corpus.page(b).served, corpus.generator))))


@pytest.mark.parametrize("name", [n for n in CORPUS_NAMES if n != TWICE])
def test_labels_are_exact_and_symmetric(corpora: dict[str, Corpus], labels: dict[str, Labels], name: str) -> None:
    corpus, found = corpora[name], labels[name]
    assert found.keys == tuple(corpus.keys)
    i, j, jac = found.pair_jaccards()
    assert np.all(i < j) and np.all(np.diff(found.pair_codes) > 0)
    order = np.argsort(jac, kind="stable")
    chosen = list(order[-3:]) + list(order[np.searchsorted(jac[order], 0.5) :][:3]) + list(order[:3])
    rng = random.Random(name)
    picks = [(found.keys[i[c]], found.keys[j[c]]) for c in chosen]
    for _ in range(4):  # often sharing nothing
        a, b = rng.sample(found.keys, 2)
        picks.append((a, b))
    for a, b in picks:
        exact = _brute_force(corpus, a, b)
        assert found.jaccard(a, b) == found.jaccard(b, a) == exact, (a, b)
    for key in rng.sample(found.keys, 5):
        assert found.words[found.index(key)] == len(words(main_text(corpus.page(key).served, corpus.generator)))


def test_shared_counts_are_exact_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pair lists for rare shingles and the dense product for common ones give the brute-force counts."""
    rng = np.random.default_rng(7)
    sets = [np.unique(rng.integers(0, 60, size=rng.integers(0, 25))) for _ in range(40)]
    expected = {}
    for a in range(len(sets)):
        for b in range(a + 1, len(sets)):
            common = len(set(sets[a].tolist()) & set(sets[b].tolist()))
            if common:
                expected[a * len(sets) + b] = common
    for cap in (2, 5, 1000):
        monkeypatch.setattr(labeller, "COMMON_SHINGLE_PAGES", cap)
        codes, shared = labeller.shared_counts(sets)
        assert dict(zip(codes.tolist(), shared.tolist(), strict=True)) == expected


def test_shingles_follow_the_rule() -> None:
    assert words("Hello, WORLD_wide ﬁle 3.11") == ["hello", "world", "wide", "file", "3", "11"]
    assert shingles([]) == set()
    assert shingles(["a", "b"]) == {"a b"}
    assert shingles(list("abcdef")) == {"a b c d e", "b c d e f"}


def test_evaluate_scores_known_decisions(corpora: dict[str, Corpus], labels: dict[str, Labels]) -> None:
    twice, found = corpora[TWICE], labels[TWICE]
    pairs = copy_pairs(twice)
    perfect: dict[str, Decision] = {key: ("kept", None) for key in twice.keys}
    perfect.update({copy: ("dropped", original) for original, copy in pairs})
    score = evaluate(twice, perfect)
    assert (score.drops, score.false_drops, score.grey_drops, score.correct_drops) == (len(pairs), 0, 0, len(pairs))
    assert score.precision == 1.0 and score.real_pairs == len(pairs) and score.whole == 0 and score.recall == 1.0

    keep_all: list[tuple[str, Decision]] = [(key, ("kept", None)) for key in twice.keys]  # pairs in crawl order
    score = evaluate(twice, keep_all)
    assert score.drops == 0 and score.whole == score.real_pairs and score.recall == 0.0

    index = twice.keys[0]
    all_to_index: dict[str, Decision] = {key: ("dropped", index) for key in twice.keys[1:]}
    all_to_index[index] = ("kept", None)
    score = evaluate(twice, all_to_index)
    expected_false = sum(found.jaccard(k, index) <= 0.5 for k in twice.keys[1:])
    assert score.false_drops == expected_false > len(twice) // 2
    assert [d.jaccard for d in score.worst_false_drops] == sorted(d.jaccard for d in score.worst_false_drops)

    report = components_report(twice, star_groups(all_to_index))
    n = len(twice)
    _, _, jac = found.pair_jaccards()
    assert report.largest == n and report.member_pairs == n * (n - 1) // 2
    assert report.false_pairs == report.member_pairs - int(np.count_nonzero(jac > 0.5))
    assert (report.grouped_pages, report.all_member_pairs, report.all_false_pairs) == (
        n, report.member_pairs, report.false_pairs)
    assert report.false_to_first == expected_false  # every member to the page all drops name

    with pytest.raises(ValueError, match="no decision"):
        evaluate(twice, {index: ("kept", None)})


def test_pairs_are_listed_in_crawl_order(corpora: dict[str, Corpus], labels: dict[str, Labels]) -> None:
    corpus = corpora["rust-std"]
    real = labels["rust-std"].real_pairs(0.9)
    assert real, "std re-exports core and alloc items: their pages are near-duplicates"
    assert all(corpus.position(a) < corpus.position(b) for a, b, _ in real)
    assert [(corpus.position(a), corpus.position(b)) for a, b, _ in real] == sorted(
        (corpus.position(a), corpus.position(b)) for a, b, _ in real
    )
    assert all(x >= 0.9 for *_, x in real)
