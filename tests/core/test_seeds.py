"""The worked examples of the seed lectures, reproduced with the library's own functions."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_neardup import Sketcher, broder_clusters, jaccard
from scrapy_neardup.core.minhash import classic_signature
from scrapy_neardup.core.theory import flag_probability

INIGO = "My name is Inigo Montoya. You killed my father. Prepare to die"
INIGO_4_SHINGLES = [
    "my name is inigo",
    "name is inigo montoya",
    "is inigo montoya you",
    "inigo montoya you killed",
    "montoya you killed my",
    "you killed my father",
    "killed my father prepare",
    "my father prepare to",
    "father prepare to die",
]


def test_inigo_montoya_4_shingling() -> None:
    """Seed 001: the 4-shingling of the Inigo Montoya sentence is exactly the nine listed shingles."""
    sketcher = Sketcher(shingle="word", shingle_size=4)
    shingles = sketcher.shingle_set(INIGO)
    # A text of exactly four words is one shingle, hashed like the same window inside a longer text.
    listed = {int(sketcher.shingle_set(s)[0]) for s in INIGO_4_SHINGLES}
    assert len(listed) == 9
    assert set(shingles.tolist()) == listed


def test_permutation_table_signatures() -> None:
    """Seed 001: rows R1..R5, columns C1..C3, three permutations give S1, S2, S3 and the similarities."""
    columns = {"C1": {1, 3, 4}, "C2": {2, 5}, "C3": {1, 2, 4}}
    permutations = [(1, 2, 3, 4, 5), (5, 4, 3, 2, 1), (3, 4, 5, 1, 2)]
    # A permutation lists the rows in order; its hash function is a row's rank in that order.
    hash_functions = [lambda row, p=p: p.index(row) for p in permutations]
    signatures = {}
    for name, rows in columns.items():
        ranks = classic_signature(rows, hash_functions)
        signatures[name] = [permutations[i][rank] for i, rank in enumerate(ranks.tolist())]
    assert signatures == {"C1": [1, 4, 3], "C2": [2, 5, 5], "C3": [1, 4, 4]}

    def sig_sim(a: str, b: str) -> float:
        return float(np.mean(np.array(signatures[a]) == np.array(signatures[b])))

    assert jaccard(columns["C1"], columns["C2"]) == 0.0
    assert jaccard(columns["C1"], columns["C3"]) == 0.5
    assert jaccard(columns["C2"], columns["C3"]) == 0.25
    assert sig_sim("C1", "C2") == 0.0
    assert sig_sim("C1", "C3") == pytest.approx(2 / 3)
    assert sig_sim("C2", "C3") == 0.0


def test_one_pass_example_with_explicit_hash_functions() -> None:
    """Seed 001: h(x) = x mod 5, g(x) = 2x + 1 mod 5 over C1 = {1, 3, 4}, C2 = {2, 3, 5}."""
    hash_functions = [lambda x: x % 5, lambda x: (2 * x + 1) % 5]
    assert classic_signature({1, 3, 4}, hash_functions).tolist() == [1, 2]
    assert classic_signature({2, 3, 5}, hash_functions).tolist() == [0, 0]


def test_classic_signature_of_empty_set_is_an_error() -> None:
    with pytest.raises(ValueError, match="empty set"):
        classic_signature([], [lambda x: x])


def test_jaccard_one_quarter() -> None:
    """Seed 000: d1 = {sh1, sh4}, d2 = {sh1, sh2, sh6}: one shingle in common out of four: JC = 1/4."""
    matrix = np.array([[1, 1], [0, 1], [0, 0], [1, 0], [0, 0], [0, 1]])
    d1 = set(np.flatnonzero(matrix[:, 0]) + 1)
    d2 = set(np.flatnonzero(matrix[:, 1]) + 1)
    assert jaccard(d1, d2) == 0.25


# Seed 000, "Minshingle": six shingles, five documents, and the three row orders of the lecture.
BRODER_MATRIX = {
    "doc1": {"sh1", "sh5"},
    "doc2": {"sh2"},
    "doc3": {"sh1", "sh2", "sh5"},
    "doc4": {"sh4"},
    "doc5": {"sh3", "sh6"},
}
BRODER_ORDERS = [
    ["sh1", "sh2", "sh3", "sh4", "sh5", "sh6"],
    ["sh4", "sh3", "sh6", "sh1", "sh5", "sh2"],
    ["sh6", "sh4", "sh3", "sh5", "sh2", "sh1"],
]


def test_five_document_broder_example() -> None:
    """Seed 000: Msh(doc1..doc5) = (1 4 4), (2 6 5), (1 4 4), (4 1 2), (3 2 1); doc1 and doc3 cluster."""
    # Msh is the rank (1-based) in the permuted order of the first shingle the document contains.
    hash_functions = [lambda s, order=order: order.index(s) + 1 for order in BRODER_ORDERS]
    names = sorted(BRODER_MATRIX)
    sigs = np.stack([classic_signature(BRODER_MATRIX[n], hash_functions) for n in names])
    assert sigs.tolist() == [[1, 4, 4], [2, 6, 5], [1, 4, 4], [4, 1, 2], [3, 2, 1]]
    clusters = [[names[i] for i in c] for c in broder_clusters(sigs, min_shared=3)]
    assert clusters == [["doc1", "doc3"]]
    # Lowering t to one shared position links nothing else: no other pair shares a position.
    assert [[names[i] for i in c] for c in broder_clusters(sigs, min_shared=1)] == [["doc1", "doc3"]]


def test_cs124_figures() -> None:
    """Seed 002: k = 100, t = 90 gives p(0.8) < 0.006, p(0.95) > 0.988, p(0.96) > 0.997, p(0.5) ~ 1e-18."""
    p = flag_probability(np.array([0.5, 0.8, 0.95, 0.96]), 100, 90)
    assert p[1] < 0.006
    assert p[2] > 0.988
    assert p[3] > 0.997
    assert 1e-19 < p[0] < 1e-16


def test_russian_character_shingles() -> None:
    """Seed 000: "Мама мыла раму" in 10-character shingles ("мама мыла ", ...): 14 - 10 + 1 = 5 shingles."""
    sketcher = Sketcher(shingle="char", shingle_size=10)
    shingles = sketcher.shingle_set("Мама мыла раму")
    assert shingles.size == 5
    # Case and spacing do not change the set; a changed letter does.
    assert np.array_equal(shingles, sketcher.shingle_set("МАМА   мыла\nраму"))
    assert not np.array_equal(shingles, sketcher.shingle_set("Мама мыла рамы"))


def test_russian_word_shingles_give_sensible_resemblance() -> None:
    """Russian text shingles by words like any other: an edited copy stays similar, another text does not."""
    base = (
        "Поиск нечётких дубликатов веб-страниц важен для поисковых систем: зеркала, версии для печати и "
        "перепечатки статей занимают место в индексе и засоряют выдачу. Алгоритм шинглов разбивает текст "
        "на последовательности слов, а минхеш позволяет оценить меру Жаккара по короткой сигнатуре."
    )
    edited = base.replace("засоряют выдачу", "портят выдачу")
    other = "Мама мыла раму, а папа читал газету о погоде на завтра и ругал синоптиков за ошибки прогноза."
    sketcher = Sketcher()
    a, b, c = sketcher.sketch_many([base, edited, other])
    assert 0.7 < sketcher.jaccard(base, edited) < 1.0
    assert abs(a.resemblance(b) - sketcher.jaccard(base, edited)) < 0.15
    assert a.resemblance(c) < 0.1
