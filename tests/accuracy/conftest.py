"""Fixtures of the accuracy test bed: the corpora (downloaded and prepared once, see ``corpora.py``) and their labels.

Without apt (or its network) the corpora cannot be had: the tests are skipped with the reason, except in CI
(``CI`` set), where that fails them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpora import CORPUS_NAMES, Corpus, CorpusUnavailable, load_corpus  # noqa: E402
from labels import Labels, labels_for  # noqa: E402


@pytest.fixture(scope="session")
def corpora() -> dict[str, Corpus]:
    """Every corpus, by name."""
    try:
        return {name: load_corpus(name) for name in CORPUS_NAMES}
    except CorpusUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"the accuracy corpora are needed in CI: {exc}")
        pytest.skip(f"the accuracy corpora cannot be had here: {exc}")


@pytest.fixture(scope="session")
def labels(corpora: dict[str, Corpus]) -> dict[str, Labels]:
    """Every corpus' labels, by corpus name."""
    return {name: labels_for(corpus) for name, corpus in corpora.items()}
