"""Hostile JSON lines through ``neardup dedupe``: arbitrary values in the text and id fields (None, numbers,
nested objects, strings with lone surrogates as JSON escapes, huge texts), records without them, blank lines.

For every generated file: exit status 0; every record comes back, in order, unchanged but for the two fields
the command adds; every ``duplicate_of`` names the id of an earlier record that was kept; the summary's counts
add up to the number of records.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from fuzzing import EXAMPLES, hostile_text, json_values
from hypothesis import given, settings
from hypothesis import strategies as st
from neardup_testkit import article_words, edit_words
from reliability_kit import Ledger

from scrapy_neardup.cli.main import main

_TALLY = {"files": 0, "records": 0, "near_duplicates": 0, "skipped": 0, "truncated": 0}
_BASES = [article_words(700 + i, 150) for i in range(3)]
NEAR_COPIES = [" ".join(edit_words(words, changes, seed)) for words in _BASES for changes, seed in
               [(0, 0), (1, 1), (2, 2)]]
# A page over the default cap of 8,000,000 characters: sketched on its head, counted as truncated.
HUGE = ("lorem ipsum dolor sit amet " * 300_000)[:8_000_050]

texts = st.one_of(
    st.sampled_from(NEAR_COPIES),
    st.sampled_from(NEAR_COPIES).map(lambda t: f"<p>{t}</p>\ud800"),
    json_values,
    hostile_text,
)
ids = st.one_of(st.integers(0, 5), st.sampled_from(["a", "b", "\ud800", ""]), json_values)


@st.composite
def records(draw: st.DrawFn) -> dict[str, Any]:
    record: dict[str, Any] = {}
    if draw(st.integers(0, 4)):
        record["id"] = draw(ids)
    if draw(st.integers(0, 9)):
        record["text"] = draw(texts)
    if draw(st.booleans()):
        record["other"] = draw(json_values)
    return record


def run_dedupe(lines: list[str], *extra: str) -> tuple[int, list[dict[str, Any]], str]:
    with tempfile.TemporaryDirectory() as tmp:
        source, out = Path(tmp) / "in.jsonl", Path(tmp) / "out.jsonl"
        source.write_text("".join(lines), encoding="utf-8")
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(["dedupe", str(source), "-o", str(out), *extra])
        # Lines end with \n only: raw U+0085 / U+2028 inside JSON strings are valid (str.splitlines() would cut).
        written = out.read_text(encoding="utf-8") if out.exists() else ""
        rows = [json.loads(line) for line in written.split("\n") if line]
    return code, rows, err.getvalue()


def check_output(batch: list[dict[str, Any]], numbers: list[int], code: int, rows: list[dict[str, Any]],
                 err: str) -> dict[str, int]:
    assert len(rows) == len(batch)
    kept_ids: list[str] = []  # JSON of the effective id of every kept record so far
    pointers = 0
    for record, number, row in zip(batch, numbers, rows, strict=True):
        row = dict(row)
        duplicate_of, resemblance = row.pop("duplicate_of"), row.pop("resemblance")
        evidence = row.pop("evidence")  # docs/evidence.md: present on a near-duplicate only
        assert (evidence is None) == (duplicate_of is None), "evidence without a near-duplicate, or none with one"
        assert row == record  # unchanged, in order (lone surrogates included)
        # A missing or null id is replaced by the line number.
        effective = json.dumps(number if record.get("id") is None else record["id"])
        if duplicate_of is None:
            assert resemblance is None, "a near-duplicate without duplicate_of"
            kept_ids.append(effective)
        else:
            pointers += 1
            assert json.dumps(duplicate_of) in kept_ids, "duplicate_of names no earlier kept record"
            assert 0 < resemblance <= 1
    summary = re.search(r"records: (\d+), kept: (\d+), near-duplicates: (\d+) \(exact: \d+\), skipped \(bad text\): "
                        r"(\d+).*truncated: (\d+)", err)
    assert summary, err
    seen, kept, near, skipped, truncated = map(int, summary.groups())
    assert seen == len(batch) and kept + near + skipped == seen and near == pointers
    # Every record back either way; exit 1 only when no record could be checked (docs/cli.md).
    assert code == (1 if skipped == seen else 0), err
    return {"near_duplicates": near, "skipped": skipped, "truncated": truncated}


# Half the examples of the other properties: each run of the command builds its sketcher (~75 ms).
@settings(max_examples=max(20, EXAMPLES // 2), deadline=None)
@given(st.lists(st.tuples(records(), st.booleans()), min_size=1, max_size=20))
def test_fuzz_dedupe_returns_every_record_in_order_and_points_back(batch: list[tuple[dict[str, Any], bool]]) -> None:
    lines, numbers, plain = [], [], []
    for record, blank_before in batch:
        if blank_before:
            lines.append("\n")
        lines.append(json.dumps(record) + "\n")  # ensure_ascii: lone surrogates travel as \udXXX escapes
        numbers.append(len(lines))
        plain.append(record)
    code, rows, err = run_dedupe(lines)
    counts = check_output(plain, numbers, code, rows, err)
    _TALLY["files"] += 1
    _TALLY["records"] += len(plain)
    for name in ("near_duplicates", "skipped"):
        _TALLY[name] += counts[name]


def test_huge_and_hostile_records_in_one_file(ledger: Ledger) -> None:
    """Two 8 MB+ texts (truncated, the second a copy of the first), invalid UTF-8 on a line, binary in a text."""
    batch: list[dict[str, Any]] = [{"id": "huge", "text": HUGE}, {"id": "huge-copy", "text": HUGE + " tail"},
             {"id": 7, "text": NEAR_COPIES[0]}, {"id": [1, {"x": None}], "text": NEAR_COPIES[1]},
             {"id": "pdf", "text": "%PDF-1.7\n\x00\x01\x02 stream"}, {"text": None}, {"id": None}]
    lines = [json.dumps(r) + "\n" for r in batch]
    code, rows, err = run_dedupe(lines)
    counts = check_output(batch, list(range(1, len(batch) + 1)), code, rows, err)
    assert [r["duplicate_of"] for r in rows] == [None, "huge", None, 7, None, None, None]
    assert counts == {"near_duplicates": 2, "skipped": 3, "truncated": 2}
    # Bytes that are not UTF-8 inside a line: decoded with U+FFFD, the record still comes back.
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "in.jsonl"
        source.write_bytes(b'{"id": 1, "text": "caf\xe9 \xff\xfe ' + NEAR_COPIES[2].encode() + b'"}\n')
        err_io = io.StringIO()
        with contextlib.redirect_stderr(err_io):
            assert main(["dedupe", str(source), "-o", str(Path(tmp) / "out.jsonl")]) == 0
        (row,) = [json.loads(x) for x in (Path(tmp) / "out.jsonl").read_text().split("\n") if x]
        assert row["id"] == 1 and row["text"].startswith("caf\ufffd")
    ledger.record("2 pages over 8 MB, a nested id, a PDF-like text, null text, invalid UTF-8", lost=0,
                  truncated=counts["truncated"])


def test_duplicate_of_a_record_with_a_null_id_is_told_apart() -> None:
    batch: list[dict[str, Any]] = [{"id": None, "text": NEAR_COPIES[0]}, {"id": "copy", "text": NEAR_COPIES[0]}]
    code, rows, err = run_dedupe([json.dumps(r) + "\n" for r in batch])
    assert code == 0
    assert rows[1]["duplicate_of"] is not None, "the copy reads as kept: duplicate_of null, resemblance 1.0"


def test_cli_fuzz_tally(ledger: Ledger) -> None:
    t = _TALLY
    if not t["files"]:
        pytest.skip("the fuzz test did not run")
    ledger.record(f"{t['files']} generated JSON-lines files, {t['records']} records ({t['near_duplicates']} "
                  f"near-duplicates, {t['skipped']} skipped as bad text)", lost=0,
                  notes="every record back in order; every duplicate_of named an earlier kept record")
