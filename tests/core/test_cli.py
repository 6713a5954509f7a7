"""The ``neardup`` command: dedupe, compare, curve; bad input never loses a record."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scrapy_neardup.cli.main import main

ARTICLE = " ".join(f"w{i}" for i in range(300))
EDITED = ARTICLE.replace("w150 ", "changed ")
OTHER = " ".join(f"x{i}" for i in range(300))


def _write_jsonl(path: Path, records: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_dedupe_keeps_order_and_points_to_kept_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = _write_jsonl(tmp_path / "in.jsonl", [
        {"id": 1, "text": ARTICLE},
        {"id": "two", "text": OTHER},
        {"id": 3, "text": EDITED},
        {"id": 4, "text": ARTICLE.upper()},
        {"id": 5, "text": f"<html><body><p>{OTHER}</p></body></html>"},
    ])
    out = tmp_path / "out.jsonl"
    code, _, err = _run(["dedupe", str(source), "-o", str(out)], capsys)
    assert code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == [1, "two", 3, 4, 5]
    assert [r["duplicate_of"] for r in rows] == [None, None, 1, 1, "two"]
    assert rows[0]["resemblance"] is None
    assert 0.9 <= rows[2]["resemblance"] < 1.0
    assert rows[3]["resemblance"] == 1.0
    assert rows[0]["text"] == ARTICLE  # records come back whole
    assert "records: 5, kept: 2, near-duplicates: 3 (exact: 2)" in err


def test_dedupe_drop_and_pipes(tmp_path: Path) -> None:
    records = [{"id": i, "text": t} for i, t in enumerate([ARTICLE, EDITED, OTHER, OTHER])]
    payload = "".join(json.dumps(r) + "\n" for r in records)
    result = subprocess.run(
        [sys.executable, "-m", "scrapy_neardup", "dedupe", "-", "-o", "-", "--drop"],
        input=payload, capture_output=True, text=True, check=True,
    )
    kept = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["id"] for r in kept] == [0, 2]
    assert all(r["duplicate_of"] is None for r in kept)
    assert "near-duplicates: 2" in result.stderr


def test_bad_text_never_loses_a_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    huge = "lorem ipsum dolor " * 1_200_000  # ~21 MB of text
    records: list[object] = [
        {"id": "empty", "text": ""},
        {"id": "blank", "text": "   \n\t "},
        {"id": "missing"},
        {"id": "number", "text": 42},
        {"id": "list", "text": ["a", "b"]},
        {"id": "object", "text": {"nested": True}},
        {"id": "null", "text": None},
        {"id": "surrogate", "text": "lone \ud800 surrogate and NUL \u0000 " + ARTICLE},
        {"id": "huge", "text": huge},
        {"id": "huge-again", "text": huge},
        {"id": "copy", "text": ARTICLE},
    ]
    source = _write_jsonl(tmp_path / "in.jsonl", records)
    out = tmp_path / "out.jsonl"
    code, _, err = _run(["dedupe", str(source), "-o", str(out)], capsys)
    assert code == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == [r["id"] for r in records]  # type: ignore[index]
    by_id = {r["id"]: r for r in rows}
    for bad in ["empty", "blank", "missing", "number", "list", "object", "null"]:
        assert by_id[bad]["duplicate_of"] is None and by_id[bad]["resemblance"] is None
    assert by_id["surrogate"]["text"].startswith("lone \ud800 surrogate")  # round-trips through JSON
    assert by_id["huge"]["duplicate_of"] is None
    assert by_id["huge-again"]["duplicate_of"] == "huge"
    assert by_id["copy"]["duplicate_of"] == "surrogate"
    assert "skipped (bad text): 7 (empty: 2, missing: 2, not_text: 3)" in err
    assert "truncated: 2" in err


def test_unparsable_line_stops_with_its_number(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"id": 1, "text": ARTICLE}) + "\n\n" + '{"id": 2, "text": "oops' + "\n")
    out = tmp_path / "out.jsonl"
    code, _, err = _run(["dedupe", str(source), "-o", str(out)], capsys)
    assert code == 1
    assert "line 3: invalid JSON" in err
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == [1]
    source.write_text("[1, 2]\n")
    code, _, err = _run(["dedupe", str(source), "-o", str(out)], capsys)
    assert code == 1 and "line 1: expected a JSON object" in err


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--threshold", "0"], "--threshold"),
        (["--threshold", "1.5"], "--threshold"),
        (["--min-shared", "0"], "--min-shared"),
        (["--min-shared", "200"], "--min-shared"),
        (["--num-perm", "0"], "--num-perm"),
        (["--shingle-size", "0"], "--shingle-size"),
        (["--threshold", "0.9", "--min-shared", "100"], "--min-shared"),
        (["--shingle", "sentence"], "--shingle"),
        (["--content", "article"], "--content"),
        (["--threshold", "high"], "--threshold"),
    ],
)
def test_wrong_options_exit_nonzero_naming_the_option(
    tmp_path: Path, options: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _write_jsonl(tmp_path / "in.jsonl", [{"id": 1, "text": ARTICLE}])
    with pytest.raises(SystemExit) as exit_info:
        main(["dedupe", str(source), *options])
    assert exit_info.value.code == 2
    assert named in capsys.readouterr().err


def test_missing_input_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(["dedupe", str(tmp_path / "nope.jsonl")], capsys)
    assert code == 1 and "cannot read" in err


def test_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = tmp_path / "a.html"
    b = tmp_path / "b.txt"
    a.write_text(f"<html><head><script>x()</script></head><body><p>{ARTICLE}</p></body></html>")
    b.write_text(EDITED)
    code, out, _ = _run(["compare", str(a), str(b), "--json"], capsys)
    assert code == 0
    result = json.loads(out)
    assert result["near_duplicate"] is True and result["exact_duplicate"] is False
    assert 0.95 < result["jaccard"] < 1.0
    assert result["shared_positions"] == round(result["resemblance"] * 128)
    assert abs(result["resemblance"] - result["jaccard"]) < 0.1
    code, out, _ = _run(["compare", str(a), str(b)], capsys)
    assert "near-duplicates" in out and "exact Jaccard" in out


def test_curve_json_and_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["curve", "--num-perm", "100", "--min-shared", "90", "--json"], capsys)
    assert code == 0
    payload = json.loads(out)
    assert payload["num_perm"] == 100 and payload["min_shared"] == 90
    points = payload["points"]
    assert [p["resemblance"] for p in points] == [round(i / 100, 2) for i in range(101)]
    by_r = {p["resemblance"]: p["probability"] for p in points}
    assert by_r[0.8] < 0.006 and by_r[0.95] > 0.988 and by_r[0.96] > 0.997
    code, out, _ = _run(["curve", "--num-perm", "128", "--threshold", "0.9", "--json"], capsys)
    assert json.loads(out)["min_shared"] == 107
    png = tmp_path / "curve.png"
    code, _, _ = _run(["curve", "--threshold", "0.9", "--png", str(png)], capsys)
    assert code == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("command", [[], ["dedupe"], ["compare"], ["curve"], ["explain"], ["report"],
                                     ["es", "explain"], ["es", "report"], ["es", "groups"]])
def test_help(command: list[str]) -> None:
    result = subprocess.run(["neardup", *command, "--help"], capture_output=True, text=True)
    assert result.returncode == 0
    assert "usage: neardup" in result.stdout
    # argparse %-formats help= strings but prints a description as written: a "%%" there reaches the user
    assert "%%" not in result.stdout


def test_version_and_module_entry_point() -> None:
    """`neardup --version` and `python -m scrapy_neardup --version` print the installed package version."""
    from importlib.metadata import version

    expected = f"neardup {version('scrapy-neardup')}"
    for argv in (["neardup", "--version"], [sys.executable, "-m", "scrapy_neardup", "--version"]):
        result = subprocess.run(argv, capture_output=True, text=True, check=True)
        assert result.stdout.strip() == expected


def test_curve_text_says_what_the_threshold_means(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["curve", "--threshold", "0.9"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("t = 107 of k = 128: flags r >= 0.90 in 99% of cases, r = 0.83 in 50%")


def test_compare_content_main_ignores_the_site_template(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    template = "<header>" + " ".join(f"menu{i}" for i in range(300)) + "</header>"
    a, b = tmp_path / "a.html", tmp_path / "b.html"
    a.write_text(f"<html><body>{template}<main>{ARTICLE}</main><footer>page one</footer></body></html>")
    b.write_text(f"<html><body>{template}<main>{ARTICLE}</main><footer>page two of the site</footer></body></html>")
    results = {}
    for content in ("body", "main"):
        code, out, _ = _run(["compare", str(a), str(b), "--json", "--content", content], capsys)
        assert code == 0
        results[content] = json.loads(out)
    assert results["main"]["jaccard"] == 1.0 > results["body"]["jaccard"]


def test_dedupe_names_records_by_url_when_they_have_no_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What the Scrapy pipeline exports ({url, text}, no id) names its records by URL, as the pipeline keys pages;
    one line says so. Records with an id, or an explicit --id-field, are named as before."""
    pages = [{"url": "https://a.test/1", "text": ARTICLE}, {"url": "https://a.test/2", "text": EDITED},
             {"url": "https://a.test/3", "text": OTHER}]
    out = tmp_path / "out.jsonl"
    code, _, err = _run(["dedupe", str(_write_jsonl(tmp_path / "pages.jsonl", pages)), "-o", str(out)], capsys)
    assert code == 0
    assert [json.loads(line)["duplicate_of"] for line in out.read_text().splitlines()] == [
        None, "https://a.test/1", None]
    line = "neardup dedupe: the records have no 'id' field; using 'url' as their id (--id-field to choose)"
    assert err.count(line) == 1
    # --id-field given: as asked (here a field no record has: line numbers), and nothing said.
    code, _, err = _run(["dedupe", str(tmp_path / "pages.jsonl"), "-o", str(out), "--id-field", "id"], capsys)
    assert [json.loads(line)["duplicate_of"] for line in out.read_text().splitlines()] == [None, 1, None]
    assert "--id-field to choose" not in err
    # Records with an id: named by it, nothing said; the help states the default.
    with_ids = [{"id": f"p{i}", **page} for i, page in enumerate(pages)]
    code, _, err = _run(["dedupe", str(_write_jsonl(tmp_path / "ids.jsonl", with_ids)), "-o", str(out)], capsys)
    assert [json.loads(line)["duplicate_of"] for line in out.read_text().splitlines()] == [None, "p0", None]
    assert "--id-field to choose" not in err
    with pytest.raises(SystemExit):
        main(["dedupe", "--help"])
    assert "when the first record has no id but a --url-field value, the URL" in " ".join(
        capsys.readouterr().out.split())


def test_the_package_lists_its_public_names_only() -> None:
    import scrapy_neardup

    names = dir(scrapy_neardup)
    assert not {"Any", "TYPE_CHECKING", "annotations"} & set(names)
    assert set(scrapy_neardup.__all__) <= set(names) and "__version__" in names
    assert {"NearDuplicatePipeline", "NearDuplicateAddon", "CsvItemExporter"} <= set(names)
    assert all(getattr(scrapy_neardup, name) is not None for name in scrapy_neardup.__all__)


RUSSIAN = " ".join(f"Капибара водосвинка живет у воды номер{i} и хорошо плавает в реке" for i in range(30))
# The same text typed with Latin lookalikes, stress marks, soft hyphens and zero-width spaces.
TYPED = (RUSSIAN.replace("а", "a").replace("о", "o").replace("р", "p").replace("ка", "к\u00ada")
         .replace("во", "в\u200bо").replace("ет", "е\u0301т"))


def test_dedupe_and_compare_fold_text_typed_with_tricks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = _write_jsonl(tmp_path / "in.jsonl", [{"id": 1, "text": RUSSIAN},
                                                  {"id": 2, "text": f"<html><body><p>{TYPED}</p></body></html>"}])
    out = tmp_path / "out.jsonl"
    code, _, _ = _run(["dedupe", str(source), "-o", str(out)], capsys)
    assert code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["duplicate_of"] for r in rows] == [None, 1] and rows[1]["resemblance"] == 1.0
    (tmp_path / "a.txt").write_text(RUSSIAN)
    (tmp_path / "b.txt").write_text(TYPED)
    code, out_json, _ = _run(["compare", str(tmp_path / "a.txt"), str(tmp_path / "b.txt"), "--json"], capsys)
    assert code == 0 and json.loads(out_json)["jaccard"] == 1.0


NEARDUP = str(Path(sys.executable).with_name("neardup"))  # the console script, as a user types it


def test_dedupe_with_a_text_field_no_record_has_fails_naming_the_fields(tmp_path: Path) -> None:
    """``--text-field body`` on records without it: every record is still written back, but nothing was
    compared: one error line naming the fields the records have, exit 1."""
    source = _write_jsonl(tmp_path / "in.jsonl", [{"url": f"http://a.test/{i}", "text": ARTICLE} for i in range(20)])
    result = subprocess.run([NEARDUP, "dedupe", str(source), "--text-field", "body"], capture_output=True, text=True)
    assert result.returncode == 1, result.stderr
    assert len(result.stdout.splitlines()) == 20
    assert "skipped (bad text): 20 (missing: 20)" in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("neardup: error:")]
    assert errors == ["neardup: error: no record could be checked: none of the 20 records has usable text in "
                      "--text-field 'body' (missing: 20); the records have fields: text, url (choose one with "
                      "--text-field)"]


def test_dedupe_with_some_records_skipped_counts_them_and_exits_0(tmp_path: Path) -> None:
    """Bad text in some records is bad input counted in the summary (the crawl passes such pages through and
    counts them too): the others were checked, exit 0."""
    source = _write_jsonl(tmp_path / "in.jsonl", [{"id": 1, "text": ARTICLE}, {"id": 2}, {"id": 3, "text": ARTICLE}])
    result = subprocess.run([NEARDUP, "dedupe", str(source)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "records: 3, kept: 1, near-duplicates: 1 (exact: 1), skipped (bad text): 1 (missing: 1)" in result.stderr


def test_ctrl_c_in_dedupe_is_one_line_and_exit_130(tmp_path: Path) -> None:
    """SIGINT to a running ``neardup dedupe`` (reading a pipe that stays open, as a slow producer would): the
    records checked so far are written (whole lines), the summary counts them, one line says it was interrupted,
    exit 130, no traceback."""
    import os
    import signal
    import time

    # SIGINT as a terminal delivers it: a test run that a script starts in the background (`pytest &`) ignores
    # SIGINT, and the child would inherit that and never see the signal.
    proc = subprocess.Popen([NEARDUP, "dedupe", "-", "--content", "main"], stdin=subprocess.PIPE,
                            stdout=open(tmp_path / "out.jsonl", "wb"), stderr=subprocess.PIPE,  # noqa: SIM115
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdin is not None and proc.stderr is not None
    records = 600  # more than one batch (512): the first batch is checked and written while the pipe stays open
    proc.stdin.write("".join(json.dumps({"id": i, "text": f"{ARTICLE} {i}"}) + "\n"
                             for i in range(records)).encode())
    proc.stdin.flush()
    deadline = time.monotonic() + 60
    while (tmp_path / "out.jsonl").stat().st_size == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "dedupe ended before it was interrupted"
    os.kill(proc.pid, signal.SIGINT)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=30) == 130, err
    proc.stdin.close()
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.splitlines()[-1] == "neardup: interrupted"
    written = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert 0 < len(written) < records and [r["id"] for r in written] == list(range(len(written)))
    assert f"neardup dedupe: records: {len(written)}, " in err
