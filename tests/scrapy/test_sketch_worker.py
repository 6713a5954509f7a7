"""The sketch worker process: the same sketches as in-process sketching, and a crawl that survives its death."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from neardup_testkit import (
    CrawlResult,
    Page,
    article_words,
    burst_items,
    check_burst_precondition,
    check_kinds_outcome,
    check_one_kept_per_group,
    html_page,
    kinds_site,
    run_crawl_process,
)

from scrapy_neardup.core.sketch import SKETCHED, Sketch, Sketcher
from scrapy_neardup.crawl.sketch_worker import (
    _ANSWER,
    _BINARY,
    _ERROR,
    _OK,
    FrameReader,
    encode_request,
    serve,
    sketcher_parameters,
)

REPO = Path(__file__).resolve().parents[2]


def _contents() -> list[Any]:
    words = article_words(3, 400)
    return [
        html_page("An article", words),
        "\n".join(" ".join(words[i : i + 20]) for i in range(0, len(words), 20)),
        " ".join(words),
        " ".join(words).encode("utf-8"),
        bytearray("Съешь же ещё этих мягких французских булок, да выпей чаю".encode()),
        "lone \ud800 surrogate and a NUL \x00 in text " * 20,
        "",
        "   \n\t ",
        "un café, s'il vous plaît ".encode("latin-1") * 50,  # a few bytes that are not UTF-8: still text
        "x" * 3_000 + "<p>" * 10,
    ]


def test_worker_process_sketches_equal_in_process_sketches() -> None:
    """A real child process, fed through its pipes, answers each request with the very sketch made here, block
    hashes included, also under a host template sent once and then named by its number."""
    sketcher = Sketcher(num_perm=64, shingle_size=4, seed=5, max_chars=2_000)  # caps apply in the child too
    contents = _contents()
    template = sketcher.sketch(contents[1]).blocks  # plain text: a block a line
    assert template is not None and template.size > 3
    template = template[::2].copy()  # some of the page's blocks are its host's template
    # Every page twice: without template, then under it (its hashes sent with the first such request only).
    requests = [encode_request(i, c) for i, c in enumerate(contents)]
    requests += [encode_request(len(contents) + i, c, 7, template if i == 0 else None) for i, c in enumerate(contents)]
    child = subprocess.run(
        [sys.executable, "-m", "scrapy_neardup.crawl.sketch_worker", json.dumps(sketcher_parameters(sketcher))],
        input=b"".join(requests), capture_output=True, timeout=60, cwd=REPO, check=True,
    )
    frames = FrameReader(_ANSWER).feed(child.stdout)
    assert [fields[0] for fields, _ in frames] == list(range(2 * len(contents)))
    expected = [sketcher.sketch(c) for c in contents] + [sketcher.sketch(c, template=template) for c in contents]
    for (fields, body), sketch in zip(frames, expected, strict=True):
        _, status, fingerprint, shingles, truncated, sketched, words, page_words, blocks, _ = fields
        assert status == _OK
        assert (fingerprint, shingles, bool(truncated)) == (sketch.fingerprint, sketch.num_shingles, sketch.truncated)
        assert (SKETCHED[sketched - 1], words, page_words) == (sketch.sketched, sketch.words, sketch.page_words)
        hashes = b"" if sketch.blocks is None else sketch.blocks.astype("<u8").tobytes()
        assert bytes(body) == sketch.signature.astype("<u4").tobytes() + hashes
        assert blocks == (0xFFFFFFFF if sketch.blocks is None else sketch.blocks.size)
    assert any(f[0][4] for f in frames)  # the max_chars cap was applied by the child (flagged)
    # The template changed what the plain text's sketch is made of; the article, which marks its main content,
    # is sketched without one.
    assert expected[1].fingerprint != expected[len(contents) + 1].fingerprint
    assert expected[0].blocks is None and expected[0] == expected[len(contents)]
    # The words of each page's whole text travel too (counted for the plain text, whole: nothing removed).
    assert expected[1].page_words == expected[1].words > 0


def test_worker_tells_binary_content_from_text() -> None:
    """Binary bodies (PDF, PNG) are answered "binary", not sketched, so the pipeline skips them as bad text."""
    binary = [b"%PDF-1.7\n" + bytes(range(256)) * 20, b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 20]
    requests = [*binary, "plain words make a page of text here"]
    out: list[bytes] = []
    chunks = [b"".join(encode_request(i, c) for i, c in enumerate(requests)), b""]
    serve(Sketcher(), lambda size: chunks.pop(0), out.append)
    assert [fields[1] for fields, _ in FrameReader(_ANSWER).feed(b"".join(out))] == [_BINARY, _BINARY, _OK]


class _FailsOnMarker(Sketcher):
    """Sketches like its parent but raises on one content, as a sketching bug would."""

    def sketch_many(self, contents: Any, is_html: bool | None = None, **options: Any) -> list[Sketch]:
        contents = list(contents)
        if any(c == "boom" for c in contents):
            raise RuntimeError("cannot sketch this")
        return super().sketch_many(contents, is_html, **options)


def test_one_failing_page_does_not_fail_its_batch() -> None:
    sketcher = _FailsOnMarker()
    requests = b"".join(encode_request(i, c) for i, c in enumerate(["alpha beta gamma delta epsilon", "boom",
                                                                     "zeta eta theta iota kappa"]))
    chunks = [requests[:7], requests[7:], b""]  # a frame split across reads
    out: list[bytes] = []
    serve(sketcher, lambda size: chunks.pop(0), out.append)
    frames = FrameReader(_ANSWER).feed(b"".join(out))
    assert [f[0][1] for f in frames] == [_OK, _ERROR, _OK]
    assert frames[1][1].decode() == "RuntimeError: cannot sketch this"
    expected = Sketcher().sketch("zeta eta theta iota kappa")
    assert frames[2][1] == expected.signature.astype("<u4").tobytes() + expected.blocks.astype("<u8").tobytes()


#: Run in a child process (a reactor of its own): a SketchWorker sent PAGES pages of about 300 KB while the reactor
#: is kept busy 20 ms a turn, as a CPU-bound crawl keeps it; prints the pipes' sizes, the turns until every answer
#: was in, and whether every sketch equals the in-process one.
_BUSY_REACTOR = """
import fcntl, json, sys, time
from twisted.internet import reactor
from scrapy_neardup.core.sketch import Sketcher
from scrapy_neardup.crawl.sketch_worker import SketchWorker

PAGES = 40
sketcher = Sketcher()
pages = [" ".join(f"w{i}x{j % 5000}" for j in range(40_000)) for i in range(PAGES)]
worker = SketchWorker(sketcher)
answers, turns = [], [0]

def busy():
    turns[0] += 1
    until = time.perf_counter() + 0.02
    while time.perf_counter() < until:
        pass
    if len(answers) < PAGES:
        reactor.callLater(0, busy)

def go():
    worker.start()
    process = worker._protocol.transport
    sizes = [fcntl.fcntl(process.pipes[fd].fileno(), fcntl.F_GETPIPE_SZ) for fd in (0, 1)]
    for page in pages:
        worker.sketch(page).addCallback(answers.append)
    reactor.callLater(0, busy)
    def done():
        if len(answers) < PAGES:
            return reactor.callLater(0.05, done)
        same = all(a.signature.tobytes() == sketcher.sketch(p).signature.tobytes() for a, p in zip(answers, pages))
        print(json.dumps({"sizes": sizes, "turns": turns[0], "bytes": sum(map(len, pages)), "same": same}))
        worker.stop().addBoth(lambda _: reactor.stop())
    done()

reactor.callWhenRunning(go)
reactor.run()
"""


def test_pages_reach_the_worker_in_few_turns_of_a_busy_reactor() -> None:
    """The pipes to and from the worker hold 1 MiB (as much as the system lets a process ask for), so that a
    reactor kept busy by the crawl moves many pages per turn. With Linux's default 64 KiB, each turn moved at most
    64 KiB of requests, and 100 KB pages waited 1.4 s on average in a real crawl while the child sat idle. Counted
    in reactor turns, not seconds: the 13.6 MB of pages need at least 208 turns through 64 KiB pipes."""
    limit = min(1 << 20, int(Path("/proc/sys/fs/pipe-max-size").read_text()))
    child = subprocess.run([sys.executable, "-c", _BUSY_REACTOR], capture_output=True, text=True, timeout=300,
                           cwd=REPO, check=True)
    result = json.loads(child.stdout.strip().splitlines()[-1])
    assert result["same"]
    assert result["sizes"] == [limit, limit]
    assert result["turns"] < result["bytes"] / (64 << 10) / 2, result


def test_crawl_through_the_worker_equals_crawl_without(tmp_path: Path, serve_kinds_site: Any) -> None:
    site = kinds_site()
    server = serve_kinds_site(site)
    results = {}
    for worker in (True, False):
        result = run_crawl_process(tmp_path, settings={"NEARDUP_WORKER": worker, "CONCURRENT_REQUESTS": 1},
                                   spider={"start_url": server.url + "/"}, name=f"worker-{worker}")
        assert result.returncode == 0, result.log[-3000:]
        check_kinds_outcome(result, site, server)
        results[worker] = result
    with_worker, without = results[True], results[False]
    assert with_worker.stat("neardup/sketched_in_worker") == with_worker.stat("neardup/checked") > 0
    assert without.stat("neardup/sketched_in_worker") == 0
    assert sorted(with_worker.kept_urls) == sorted(without.kept_urls)
    assert with_worker.drops_by_url().keys() == without.drops_by_url().keys()


def _children_running_worker(parent_marker: str) -> list[int]:
    """Pids of sketch worker processes whose parent's command line contains ``parent_marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            parent = Path(f"/proc/{ppid}/cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if b"scrapy_neardup.crawl.sketch_worker" in cmdline and parent_marker.encode() in parent:
            found.append(int(entry.name))
    return found


def _bytes_written(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    return 0


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux /proc to find and kill the worker")
def test_worker_killed_mid_crawl_loses_nothing(tmp_path: Path, serve_site: Any) -> None:
    """SIGKILL the worker after it has sketched part of a burst of 600 near-duplicate variants: the crawl
    finishes, sketching in-process from then on, with one page kept per group and every drop naming it. The pages
    are long (3,000 words, 17 MB in all), so that the burst fills the worker's 1 MiB pipe many times over and
    the kill lands while most of it is still to be answered."""
    items, group_of = burst_items(groups=6, per_group=100, words=3_000)
    check_burst_precondition(items, group_of)
    server = serve_site({"/": Page(html_page("Burst", article_words(1, 20)))})
    outcome: dict[str, CrawlResult] = {}

    def crawl() -> None:
        outcome["result"] = run_crawl_process(
            tmp_path, settings={"CONCURRENT_ITEMS": 1000}, spider={"start_url": server.url + "/", "burst": items},
            name="killed-worker",
        )

    thread = threading.Thread(target=crawl)
    thread.start()
    killed = None
    deadline = time.monotonic() + 30
    while killed is None and thread.is_alive() and time.monotonic() < deadline:
        for pid in _children_running_worker(str(tmp_path)):
            try:
                if _bytes_written(pid) > 0:  # it has answered part of the burst
                    os.kill(pid, 9)
                    killed = pid
            except OSError:
                pass
        time.sleep(0.005)
    thread.join(timeout=120)
    result = outcome["result"]
    assert killed is not None, "the worker was never seen reading the burst"
    assert result.returncode == 0, result.log[-3000:]
    check_one_kept_per_group(result, group_of, groups=6)
    assert result.stat("neardup/sketch_worker_failed") == 1
    in_worker = result.stat("neardup/sketched_in_worker")
    print(f"\nsketched in the worker before its death: {in_worker} of {len(items)}")
    assert 0 < in_worker < len(items)  # some pages were sketched by the worker, the rest after its death
    assert result.stat("neardup/checked") == len(items)
    assert "the sketch worker process failed; sketching in this process from now on" in result.log
