"""The evidence of a decision: the 95% interval of the resemblance, and ``neardup explain`` on files and JSON lines."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from scrapy_neardup.cli.main import main
from scrapy_neardup.core.evidence import describe_evidence, evidence, match_evidence, sides
from scrapy_neardup.core.match import Match, Sketched
from scrapy_neardup.core.sketch import Sketcher
from scrapy_neardup.core.theory import _binomial_pmf, resemblance_interval

Z = 1.959963984540054


def _score_root(p: float, k: int, lo: float, hi: float) -> float:
    """The r in [lo, hi] where (p - r)^2 = z^2 r (1 - r) / k, by bisection: a Wilson end point found without
    the closed form."""
    f = lambda r: (p - r) ** 2 - Z * Z * r * (1 - r) / k  # noqa: E731
    for _ in range(200):
        mid = (lo + hi) / 2
        if (f(lo) > 0) == (f(mid) > 0):
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@pytest.mark.parametrize(("shared", "k"), [(1, 128), (64, 128), (108, 128), (122, 128), (127, 128), (30, 32)])
def test_interval_ends_solve_the_score_equation(shared: int, k: int) -> None:
    low, high = resemblance_interval(shared, k)
    p = shared / k
    assert low < p < high
    assert math.isclose(low, _score_root(p, k, 0.0, p), abs_tol=1e-9)
    assert math.isclose(high, _score_root(p, k, p, 1.0), abs_tol=1e-9)


def test_interval_at_the_ends_reaches_0_and_1() -> None:
    assert resemblance_interval(0, 128)[0] == 0.0 and resemblance_interval(0, 128)[1] > 0.0
    assert resemblance_interval(128, 128)[1] == 1.0 and 0.96 < resemblance_interval(128, 128)[0] < 0.98
    with pytest.raises(ValueError, match="shared must lie"):
        resemblance_interval(129, 128)


@pytest.mark.parametrize("r", [0.5, 0.8, 0.9, 0.95])
def test_interval_covers_the_true_resemblance_about_95_percent(r: float) -> None:
    # Coverage = sum over s of P[Binomial(k, r) = s] for the s whose interval holds r: exact, no sampling.
    k = 128
    pmf = _binomial_pmf(r, k)[0]
    covered = sum(pmf[s] for s in range(k + 1) if resemblance_interval(s, k)[0] <= r <= resemblance_interval(s, k)[1])
    assert 0.92 < covered < 0.98


def test_interval_narrows_with_k() -> None:
    widths = [np.subtract(*resemblance_interval(round(0.9 * k), k)[::-1]) for k in (32, 128, 512)]
    assert widths[0] > widths[1] > widths[2]


def test_evidence_fields() -> None:
    fields = match_evidence(Match("a", 122, 122 / 128, False), 128)
    assert fields == {"rule": "near_duplicate", "shared": 122, "k": 128, "interval": [0.902, 0.978]}
    assert match_evidence(Match("a", 128, 1.0, True), 128)["rule"] == "exact"
    assert match_evidence(Match("a", 120, 0.9, False), 128, canonical=True)["rule"] == "canonical"
    assert describe_evidence(fields) == "near_duplicate: 122 of 128 positions shared, r in [0.902, 0.978]"
    with pytest.raises(ValueError, match="rule must be one of"):
        evidence(3, 128, "similar")  # type: ignore[arg-type]


def _pages(tmp_path: Path) -> tuple[str, str, str]:
    rng = random.Random(7)
    words = [f"w{rng.randint(0, 5000)}" for _ in range(400)]
    nav = "<nav><ul>" + "".join(f'<li><a href="/{i}">Link {i}</a></li>' for i in range(12)) + "</ul></nav>"
    changed = list(words)
    changed[100], changed[300] = "changed", "other"
    far = [f"z{rng.randint(0, 5000)}" for _ in range(400)]
    return tuple(f"<html><body>{nav}<p>{' '.join(w)}</p></body></html>"  # type: ignore[return-value]
                 for w in (words, changed, far))


def test_explain_two_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b, far = _pages(tmp_path)
    for name, text in (("a.html", a), ("b.html", b), ("far.html", far)):
        (tmp_path / name).write_text(text)
    report = tmp_path / "why.html"
    assert main(["explain", str(tmp_path / "a.html"), str(tmp_path / "b.html"), "--json", "--html", str(report)]) == 0
    result = json.loads(capsys.readouterr().out)
    sketcher = Sketcher()
    sa, sb = sketcher.sketch_many([a, b])
    assert result["shared"] == sa.shared_positions(sb) and result["k"] == 128
    assert result["jaccard"] == pytest.approx(sketcher.jaccard(a, b))
    assert result["interval"] == evidence(result["shared"], 128, "near_duplicate")["interval"]
    assert result["decision"] == "near_duplicate"
    changes = [d[1:] for d in result["diff"] if d[0] != "equal"]
    assert [op for op, *_ in result["diff"] if op != "equal"] == ["replace", "replace"]
    assert [c[1] for c in changes] == ["changed", "other"]
    page = result["pages"][0]
    assert page["words_sketched"] == 400 and page["words_whole"] > 400  # the link list is left out
    # the counts are the evidence's: what a drop of b in favour of a would say of each page
    assert (page["words_sketched"], page["words_whole"], page["removed_share"]) == (sa.words, sa.page_words,
                                                                                     sa.removed)
    assert any("link 0" in run for run in page["left_out"])
    shown = report.read_text()
    assert "<ins>changed</ins>" in shown and "Near-duplicates" in shown and "http" not in shown.split("<body>")[0]

    assert main(["explain", str(tmp_path / "a.html"), str(tmp_path / "far.html")]) == 0
    out = capsys.readouterr().out
    assert "not near-duplicates: both are kept" in out and "95% interval [0.000," in out


def test_explain_records_of_a_jsonl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b, far = _pages(tmp_path)
    path = tmp_path / "pages.jsonl"
    path.write_text("".join(json.dumps({"id": i, "url": f"http://x.test/{i}", "text": t}) + "\n"
                            for i, t in ((1, a), (2, far), (3, b))))
    assert main(["explain", str(path), "1", "3"]) == 0
    out = capsys.readouterr().out
    assert "A: 1" in out and "B: 3" in out and "near-duplicate: B is dropped" in out
    assert main(["explain", str(path), "1", "9"]) == 1
    assert "has no record with id = 9" in capsys.readouterr().err


def test_dedupe_output_carries_the_evidence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b, _ = _pages(tmp_path)
    path = tmp_path / "pages.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in ((1, a), (2, b))))
    assert main(["dedupe", str(path)]) == 0
    first, second = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert first["evidence"] is None
    fields = second["evidence"]
    assert fields["rule"] == "near_duplicate" and fields["k"] == 128
    assert fields["interval"][0] <= second["resemblance"] <= fields["interval"][1]
    assert fields["shared"] == round(second["resemblance"] * 128)
    # What of the duplicate was sketched: its body without the menu (a link list), 400 words.
    assert (fields["sketched"], fields["words"]) == ("own text", 400)
    # And of the kept page (the first record), as the index remembers it; each page's share removed before
    # sketching: its <nav> menu, 12 links of 2 words (24 of 424 words).
    assert (fields["kept_sketched"], fields["kept_words"], fields["removed"], fields["kept_removed"]) == (
        "own text", 400, round(1 - 400 / 424, 2), round(1 - 400 / 424, 2))


def test_dedupe_output_names_the_share_of_each_page_removed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """A kept page with a list of 25 links (75 words) around its 400 words, and its copy without: the kept side
    says 75 of 475 words were removed (0.16), the copy's side none."""
    words = " ".join(f"v{i}" for i in range(400))
    links = "<ul>" + "".join(f'<li><a href="/{i}">see page {i}</a></li>' for i in range(25)) + "</ul>"
    kept, copy = f"<html><body>{links}<p>{words}</p></body></html>", f"<html><body><p>{words}</p></body></html>"
    path = tmp_path / "pages.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in ((1, kept), (2, copy))))
    assert main(["dedupe", str(path)]) == 0
    second = [json.loads(line) for line in capsys.readouterr().out.splitlines()][1]
    fields = second["evidence"]
    assert (fields["sketched"], fields["words"], fields["removed"]) == ("own text", 400, 0.0)
    assert (fields["kept_sketched"], fields["kept_words"], fields["kept_removed"]) == ("own text", 400, 0.16)
    assert fields["kept_removed"] == round(1 - 400 / 475, 2)


def test_explain_fetches_pages_given_as_urls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import functools
    import http.server
    import threading

    a, b, _ = _pages(tmp_path)
    (tmp_path / "a.html").write_text(a)
    (tmp_path / "b.html").write_text(b)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        assert main(["explain", f"{base}/a.html", f"{base}/b.html", "--json"]) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["decision"] == "near_duplicate" and result["pages"][1]["name"] == f"{base}/b.html"
        assert main(["explain", f"{base}/a.html", f"{base}/missing.html"]) == 1
        assert "cannot fetch" in capsys.readouterr().err
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_report_from_dedupe_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b, far = _pages(tmp_path)
    pages = tmp_path / "pages.jsonl"
    pages.write_text("".join(json.dumps({"id": i, "url": f"http://x.test/{i}", "text": t}) + "\n"
                             for i, t in ((1, a), (2, far), (3, b))))
    out, report = tmp_path / "out.jsonl", tmp_path / "report.html"
    assert main(["dedupe", str(pages), "-o", str(out)]) == 0
    assert main(["report", str(out), "-o", str(report)]) == 0
    page = report.read_text()
    second = json.loads(out.read_text().splitlines()[2])
    low, high = second["evidence"]["interval"]
    assert f"near_duplicate: {second['evidence']['shared']} of 128, r in [{low:.3f}, {high:.3f}]" in page
    assert page.count('<section id="why-') == 1 and "<ins>changed</ins>" in page and "<ins>other</ins>" in page
    assert main(["report", str(out), "-o", str(report), "--views", "0"]) == 0
    assert '<section id="why-' not in report.read_text()
    # Not a dedupe output: said, with the line, and a non-zero exit.
    assert main(["report", str(pages), "-o", str(tmp_path / "r2.html")]) == 1
    assert "line 1: no 'duplicate_of' field" in capsys.readouterr().err
    assert not (tmp_path / "r2.html").exists()


def test_explain_gives_the_containment_of_a_page_in_a_longer_one(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """An article and the same article with a long thread appended (in elements whose names say nothing): the
    longer page holds nearly all of the shorter one's shingles while their resemblance is low, and both are kept."""
    rng = random.Random(11)
    article = " ".join(f"w{rng.randint(0, 5000)}" for _ in range(200))
    thread = " ".join(f"c{rng.randint(0, 5000)}" for _ in range(600))
    (tmp_path / "a.html").write_text(f"<html><body><p>{article}</p></body></html>")
    (tmp_path / "b.html").write_text(f"<html><body><p>{article}</p><div><p>{thread}</p></div></body></html>")
    assert main(["explain", str(tmp_path / "a.html"), str(tmp_path / "b.html"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["a_in_b"] == 1.0 and 0.2 < result["b_in_a"] < 0.3
    assert result["jaccard"] == pytest.approx(result["b_in_a"])  # A inside B: |A & B| / |A | B| = |A| / |B|
    assert result["decision"] == "kept"


def test_report_and_explain_of_a_state_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A store whose pages were changed by a recrawl (put) so that two of them near-duplicate each other: the
    report of the state directory shows that pair with its evidence, ``explain --state`` compares the keys."""
    from scrapy_neardup.store.embedded import EmbeddedBackend

    a, b, far = _pages(tmp_path)
    sketcher = Sketcher()
    params = sketcher.params
    state = tmp_path / "state"
    backend = EmbeddedBackend(params.num_perm, params.min_shared, params.tag, state_dir=state)
    backend.load()
    for key, text in (("http://x.test/a", a), ("http://x.test/far", far), ("http://y.test/b", far + " other")):
        assert backend.decide(key, sketcher.sketch(text)).match is None or key == "http://y.test/b"
    backend.index.put("http://y.test/b", sketcher.sketch(b))  # its page changed into a copy of a
    backend.save()
    shared = sketcher.sketch(a).shared_positions(sketcher.sketch(b))
    report = tmp_path / "state.html"
    assert main(["report", str(state), "-o", str(report)]) == 0
    page = report.read_text()
    fields = evidence(shared, 128, "near_duplicate")
    # With what of both stored pages was sketched (each: 400 of its 424 words, its <nav> menu left out).
    side = Sketched("own text", 400, 424)
    assert [(s.sketched, s.words, s.page_words) for s in sketcher.sketch_many([a, b])] == [("own text", 400, 424)] * 2
    assert (f"<tr><td>http://y.test/b</td><td>http://x.test/a</td><td>{shared / 128:.3f}</td>"
            f"<td>{describe_evidence({**fields, **sides(side, side)})}<br><code>neardup explain --state {state} "
            "http://x.test/a http://y.test/b</code></td></tr>") in page
    assert '<div class="card"><b>3</b>pages</div>' in page and '<div class="card"><b>1</b>duplicates</div>' in page
    assert main(["explain", "--state", str(state), "http://x.test/a", "http://y.test/b", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["shared"] == shared and result["decision"] == "near_duplicate" and result["evidence"] == fields
    with pytest.raises(SystemExit):  # no input at all
        main(["report", "-o", str(report)])
    assert "give the input" in capsys.readouterr().err
    # Not a state directory, and other parameters than the store's: one line each, exit 1.
    assert main(["report", str(tmp_path), "-o", str(report)]) == 1
    assert "holds no near-duplicate store" in capsys.readouterr().err
    assert main(["explain", "--state", str(state), "--num-perm", "64", "http://x.test/a", "http://y.test/b"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("neardup: error:") and err.count("\n") == 1


def test_largest_groups_break_ties_by_key_whatever_the_input_order() -> None:
    from collections import Counter

    from scrapy_neardup.core.report_html import largest

    one = Counter({"t2": 3, "t1": 3, "big": 5, "t3": 3})
    other = Counter({"t3": 3, "big": 5, "t1": 3, "t2": 3})
    assert largest(one) == largest(other) == [("big", 5), ("t1", 3), ("t2", 3), ("t3", 3)]
    assert largest(one, 2) == [("big", 5), ("t1", 3)]


def test_explain_says_when_a_page_was_read_for_its_passages_of_prose(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(5)
    paragraphs = "".join(f"<p>{' '.join(f'word{rng.randint(0, 9000)}' for _ in range(40))}</p>" for _ in range(4))
    widgets = ("<div class=c1>Updated November 3, 2026 at 4:15 pm</div>"
               "<div class=c2><a href=/f>Facebook</a> <a href=/t>Twitter</a></div>")
    (tmp_path / "a.html").write_text(f"<html><body>{widgets}{paragraphs}<div><a href=#c>17 comments</a></div>"
                                     f"</body></html>")
    (tmp_path / "b.html").write_text(f"<html><body><a href=#>Print this page</a>{paragraphs}</body></html>")
    assert main(["explain", str(tmp_path / "a.html"), str(tmp_path / "b.html"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    served, printed = result["pages"]
    assert served["sketched"] == "whole body (link lists out), its passages of prose"
    assert any("updated november 3" in run for run in served["left_out"])
    assert result["decision"] == "exact"
