"""Sketch every page of the local corpora and compare with a saved run: a change meant to be a pure speed-up must
leave every sketch bit-identical.

Pages: the prepared documentation corpora of ``tests/accuracy`` (served and stripped variants), the Debian pages in
other languages and scripts of ``tests/accuracy/folding.py`` (as they are and altered by each of its trick families),
the article pages of ``benchmarks/bench_openweb.py`` when present, and a few hostile or odd texts. Each page is
sketched from its HTML (default settings, and ``content="body"``), from the text ``html_to_text`` extracts (default
settings with sniffing, ``is_html=False``, and ``content="body"``), with the template learned over the group's pages
and a word run left out, and a sample with ``shingle="char"`` and a small ``max_chars``. Every field
of a :class:`~scrapy_neardup.core.sketch.Sketch` counts (signature, fingerprint, shingle count, truncation, block
hashes, what was sketched, words, page words), so do :meth:`Sketcher.block_hashes` and :meth:`Sketcher.text`.

    python benchmarks/check_sketches.py --save FILE      # record
    python benchmarks/check_sketches.py --compare FILE   # exit 1 on any difference, naming the pages
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "accuracy"))

from scrapy_neardup import Sketcher  # noqa: E402
from scrapy_neardup.core.host_template import learn_template  # noqa: E402
from scrapy_neardup.core.html import html_to_text  # noqa: E402
from scrapy_neardup.core.shingles import join_texts, tokens, word_hashes  # noqa: E402
from scrapy_neardup.core.sketch import Sketch  # noqa: E402


def _words(text: bytes) -> tuple[bytes, np.ndarray, np.ndarray]:
    buffer, _ = join_texts([text])
    return (buffer, *tokens(buffer))

_ODD_TEXTS = [
    "", " ", "\n\n\n", "a", "one two three four", "one two three four five six",
    "line one\r\nline two\r\n\r\nline three four five six seven\rcarriage",
    "tabs\tand\x0bvertical\x0cfeeds\x1cfile\x1dgroup\x1erecord\x1funit end of the line here",
    "NUL\x00inside\x00the text and more words to make shingles of it",
    "lone \ud800 surrogate \udfff and text around them for shingles of five words",
    "NEL\x85line\u2028sep\u2029para separators and words beyond the five of a shingle",
    "Ｆｕｌｌｗｉｄｔｈ ｌｅｔｔｅｒｓ and ﬁ ligatures ＡＢＣ straße İstanbul ΣΊΣΥΦΟΣ",
    "e\u0301 combining accents cafe\u0301 na\u0131ve soft\u00adhyphen zero\u200bwidth\u200d joiner",
    "Ｃyrillic lookalikes: Рython раrsеr аnd Grееk Αlpha Βeta words for the shingles",
    "<p>looks like html</p> but is it? <div>yes</div> a few more words here",
    "x" * 5000 + " tail words of a very long single token page",
    " ".join(f"w{i % 97}" for i in range(20000)),
    "中文文本没有空格但是有很多字符。日本語のテキストも同様です。한국어 텍스트",
    "\ufdfa" * 50 + " NFKC bomb growth",
    "mixed ascii " * 300 + "é" + " more ascii " * 300 + "ü end",
]


def digest(sketch: Sketch) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(sketch.signature.tobytes())
    h.update(repr((sketch.fingerprint, sketch.tag, sketch.num_shingles, sketch.truncated, sketch.sketched,
                   sketch.words, sketch.page_words, sketch.signature.dtype.str)).encode())
    h.update(b"-" if sketch.blocks is None else sketch.blocks.tobytes())
    return h.hexdigest()


def pages(only: tuple[str, ...] = ()) -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
    """(group name, [(key, HTML bytes)]) of every corpus at hand (those whose names start with one of ``only``)."""
    from corpora import CORPUS_NAMES, CorpusUnavailable, load_corpus

    def wanted(name: str) -> bool:
        return not only or any(f"{name}/".startswith(o) or o.startswith(f"{name}/") for o in only)

    for name in CORPUS_NAMES:
        if not wanted(name):
            continue
        try:
            corpus = load_corpus(name)
        except CorpusUnavailable as error:
            print(f"skipped {name}: {error}", file=sys.stderr)
            continue
        for variant in ("served", "stripped"):
            yield f"{name}/{variant}", corpus.html(variant)  # type: ignore[arg-type]
    import folding

    for source in folding.SOURCES:
        if not wanted(source.name):
            continue
        try:
            loaded = folding.load_pages(source, 400)
        except folding.CorpusUnavailable as error:
            print(f"skipped {source.name}: {error}", file=sys.stderr)
            continue
        yield f"{source.name}/as-is", [(p.path, p.html) for p in loaded]
        for family in folding.TRICKS:
            for rate in folding.RATES:
                altered = [(p.path, folding.altered_page(p.html, family, rate, seed=3)) for p in loaded[:60]]
                yield f"{source.name}/{family}-{rate}", altered
    openweb = Path(os.environ.get("NEARDUP_OPENWEB_DIR", Path.home() / ".cache/scrapy-neardup/openweb/aeb"))
    if (openweb / "ground-truth.json").exists() and wanted("openweb"):
        import bench_openweb

        articles = bench_openweb.load_articles(openweb)
        built = bench_openweb.build_pages(articles)
        yield "openweb/served", [(f"{i}:{p.key}", p.html) for i, p in enumerate(built)]
        yield "openweb/stripped", [(f"{i}:{p.key}", p.html) for i, p in enumerate(bench_openweb.stripped(built))]


def run(only: tuple[str, ...] = ()) -> dict[str, str]:
    out: dict[str, str] = {}
    auto, body = Sketcher(), Sketcher(content="body")
    main_mode, char = Sketcher(content="main"), Sketcher(shingle="char")
    small = Sketcher(max_chars=3000)

    def record(group: str, keys: list[str], label: str, sketches: list[Sketch]) -> None:
        for key, sketch in zip(keys, sketches, strict=True):
            out[f"{group}|{key}|{label}"] = digest(sketch)

    for group, items in [*pages(only), ("odd", [(f"odd{i}", t.encode("utf-8", "surrogatepass"))
                                            for i, t in enumerate(_ODD_TEXTS)])]:
        if not items or (only and not group.startswith(only)):
            continue
        keys = [k for k, _ in items]
        htmls = [h for _, h in items]
        record(group, keys, "html-auto", auto.sketch_many(htmls))
        record(group, keys, "html-body", body.sketch_many(htmls))
        as_str = [h.decode("utf-8", "surrogatepass") for h in htmls]
        if group == "odd":
            texts = as_str
        else:
            texts = [html_to_text(h) for h in as_str]
            record(group, keys, "html-auto-str", auto.sketch_many(as_str))
            record(group, keys, "html-main", main_mode.sketch_many(htmls))
        record(group, keys, "text-auto", auto.sketch_many(texts))
        record(group, keys, "text-auto-nohtml", auto.sketch_many(texts, is_html=False))
        record(group, keys, "text-body", body.sketch_many(texts, is_html=False))
        few = slice(None, None, max(1, len(items) // 20))
        record(group, keys[few], "text-char", char.sketch_many(texts[few], is_html=False))
        record(group, keys[few], "html-small", small.sketch_many(htmls[few]))
        record(group, keys[few], "text-small", small.sketch_many(texts[few], is_html=False))
        # With the template learned over the group's pages, and a word run left out of every page.
        learned = [b for b in auto.block_hashes(htmls) if b is not None]
        template = learn_template(learned).hashes if learned else None
        leave = np.array(word_hashes(*_words(b"index python the")), dtype=np.uint64)
        record(group, keys, "html-template", auto.sketch_many(htmls, templates=[template] * len(htmls),
                                                              leave_out=[leave] * len(htmls)))
        record(group, keys[few], "text-template", auto.sketch_many(texts[few], templates=[template] * len(texts[few])))
        for key, blocks in zip(keys[few], auto.block_hashes(htmls[few]), strict=True):
            out[f"{group}|{key}|block_hashes"] = "-" if blocks is None else hashlib.md5(blocks.tobytes()).hexdigest()
        for key, html in zip(keys[few], htmls[few], strict=True):
            out[f"{group}|{key}|text"] = hashlib.md5(auto.text(html)).hexdigest()
        print(f"{group}: {len(items)} pages", file=sys.stderr)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", type=Path)
    group.add_argument("--compare", type=Path)
    parser.add_argument("--only", default="", help="comma-separated group prefixes (python,openweb,odd...)")
    args = parser.parse_args()
    random.seed(0)
    only = tuple(p for p in args.only.split(",") if p)
    result = run(only)
    if args.save:
        with gzip.open(args.save, "wt") as f:
            json.dump(result, f)
        print(f"saved {len(result)} sketches to {args.save}")
        return
    with gzip.open(args.compare, "rt") as f:
        saved = json.load(f)
    if only:
        saved = {k: v for k, v in saved.items() if k.startswith(only)}
    differ = sorted(k for k in saved.keys() | result.keys() if saved.get(k) != result.get(k))
    if differ:
        groups: dict[str, int] = {}
        for key in differ:
            groups[key.split("|", 1)[0]] = groups.get(key.split("|", 1)[0], 0) + 1
        print(f"{len(differ)} of {len(saved)} sketches differ; by group: "
              + ", ".join(f"{group} {n}" for group, n in sorted(groups.items())) + "; e.g.:")
        for key in differ[:20]:
            print(" ", key)
        sys.exit(1)
    print(f"all {len(result)} sketches equal")


if __name__ == "__main__":
    main()
