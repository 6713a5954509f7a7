"""News and blog article pages and the copies a crawler meets: the defaults against trafilatura + MinHash LSH.

Data: pages with gold article text from a public web-content-extraction set, or a whole site built from its public
repository, read from a directory in one of three layouts. Nothing of it is shipped with the package.

* The scrapinghub article-extraction-benchmark (181 news and blog pages, human gold text): ``ground-truth.json``
  (``{id: {"articleBody": ..., "url": ...}}``) and ``html/<id>.html.gz``. The default directory::

      git clone https://github.com/scrapinghub/article-extraction-benchmark ~/.cache/scrapy-neardup/openweb/aeb

* WCXB, the Web Content eXtraction Benchmark (pages of 2025, gold text reviewed by people; its article and forum
  pages are read, 1,127 of them, both splits): ``metadata.json``, ``<split>/ground-truth/<id>.json`` and
  ``<split>/html/<id>.html.gz``::

      git clone https://github.com/Murrough-Foley/web-content-extraction-benchmark ~/.cache/scrapy-neardup/openweb/wcxb
      python benchmarks/bench_openweb.py --dir ~/.cache/scrapy-neardup/openweb/wcxb

* A whole site, every page under one template: ``site.json`` (``{"url": "https://go.dev/blog/", "gold": "div.Article
  div.markdown"}``: the pages' base URL and the CSS selector of a post's body, the labeller's own reading of the
  site) and ``pages/<name>.html``. The Go blog (about 270 posts), built from its repository and served on
  127.0.0.1 by the site's own server::

      git clone https://github.com/golang/website /tmp/website && cd /tmp/website
      go build -o /tmp/golangorg ./cmd/golangorg && /tmp/golangorg -http=127.0.0.1:6060 &
      python benchmarks/fetch_site.py --from http://127.0.0.1:6060/blog/all --host go.dev \
          --links '^/blog/[^/]+$' --url https://go.dev/blog/ --gold 'div.Article div.markdown' \
          --to ~/.cache/scrapy-neardup/openweb/goblog
      python benchmarks/bench_openweb.py --dir ~/.cache/scrapy-neardup/openweb/goblog

``--dir`` (or ``NEARDUP_OPENWEB_DIR``) names the directory.

From each page the benchmark makes the copies a crawler meets:

* ``print``: the gold article in minimal print chrome ("Print this page ... All rights reserved");
* ``amp``: the gold article in an AMP-style page with its own header, share buttons and footer;
* ``syndicated``: the gold article inside the *next* page's real template (that page's largest text container
  emptied and filled with this article's paragraphs);
* ``again``: the page served again with a date line, a "N comments" count and a related-links block of other
  articles' headlines and teasers added.

Each page is read as served and with its semantic markup removed (``strip_semantics`` of the documentation
corpora, applied to originals and copies alike). Labels come from the gold texts only: pages of one gold article
are copies; two gold articles are distinct when their word 3-shingle Jaccard is below 0.5 (the benchmark's
tokenizer: lower-cased ``\\w+`` runs, its own).

Metrics, each page decided in order (originals first, then each kind of copy), the first seen kept:

* kept-recall: share of copy pairs (two pages of one gold article) of which only one is left in the output;
* precision: share of dropped pages whose match is a copy of the same article;
* distinct dropped: dropped pages whose match is a distinct article;
* on WCXB, kept-recall by page type as well (its article pages and its forum topics).

The peer: trafilatura's extraction (``favor_precision`` off, defaults) and datasketch ``MinHashLSH(threshold=0.9,
num_perm=128)`` over the same word 5-shingles, the first page of a match kept.

``--threshold R`` (repeatable) runs both methods at resemblance ``R`` instead of 0.9: the product with the t its
settings choose for ``R`` (``NEARDUP_THRESHOLD``, ``--threshold``), the peer with ``MinHashLSH(threshold=R)``.

``--containment C`` also runs the defaults with a rule the product does not apply: a page dropped when a larger
kept page holds at least ``C`` of its shingles, estimated from the sketches (``benchmarks/containment.py``); rows
``auto+contained`` and ``auto+contained-articles`` (only kept pages that declare themselves articles hold others).

Run: ``python benchmarks/bench_openweb.py [--dir DIR] [--methods auto,trafilatura+lsh] [--threshold R ...]
[--containment C] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import gzip
import html as html_lib
import itertools
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import lxml.html

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "accuracy"))

import containment  # noqa: E402
from corpora import parse, serialize, strip_semantics  # noqa: E402

from scrapy_neardup.core.dedupe import Deduper  # noqa: E402
from scrapy_neardup.core.host_template import learn_template  # noqa: E402
from scrapy_neardup.core.sketch import Sketcher  # noqa: E402
from scrapy_neardup.core.theory import DEFAULT_THRESHOLD  # noqa: E402

DEFAULT_DIR = Path.home() / ".cache" / "scrapy-neardup" / "openweb" / "aeb"
KINDS = ("print", "amp", "syndicated", "again")
DISTINCT_BELOW = 0.5
_WORD = re.compile(r"\w+")
#: A syndicated copy still holding this share of its host page's gold shingles is left out (the host's article
#: was not where the template's largest text container was).
LEFT_OVER = 0.2
#: The WCXB page types read: the article and forum pages (its product, service, listing, collection and
#: documentation pages are not what this benchmark's copies are made of).
WCXB_TYPES = ("article", "forum")


def host_of(url: str) -> str | None:
    return urlsplit(url).hostname


@dataclass(frozen=True)
class Article:
    key: str
    url: str
    gold: str
    html: bytes
    page_type: str = "article"  # WCXB's page type ("article", "forum"); the other layouts hold articles


def load_articles(directory: Path, page_types: Sequence[str] = WCXB_TYPES) -> list[Article]:
    """The pages with gold text under ``directory``: the aeb layout, or WCXB's (only the ``page_types`` given)."""
    if (directory / "ground-truth.json").exists():
        return _load_aeb(directory)
    if (directory / "metadata.json").exists():
        return _load_wcxb(directory, page_types)
    if (directory / "site.json").exists():
        return _load_site(directory)
    raise FileNotFoundError(f"no ground-truth.json, metadata.json or site.json under {directory} (see the module doc)")


def _load_aeb(directory: Path) -> list[Article]:
    truth = json.loads((directory / "ground-truth.json").read_text())
    out = []
    for key in sorted(truth):
        path = directory / "html" / f"{key}.html.gz"
        if path.exists() and truth[key].get("articleBody"):
            out.append(Article(key, truth[key]["url"], truth[key]["articleBody"], gzip.decompress(path.read_bytes())))
    return out


def _load_wcxb(directory: Path, page_types: Sequence[str]) -> list[Article]:
    """WCXB: ``metadata.json`` names each page's split and type; ``<split>/ground-truth/<id>.json`` holds its gold
    ``main_content`` and URL, ``<split>/html/<id>.html.gz`` its HTML. Both splits are read."""
    files = json.loads((directory / "metadata.json").read_text())["files"]
    out, seen = [], set()
    for key in sorted(files):
        meta = files[key]
        if meta["page_type"] not in page_types:
            continue
        split = directory / meta["split"]
        truth = json.loads((split / "ground-truth" / f"{key}.json").read_text())
        gold, url = truth["ground_truth"].get("main_content"), truth.get("url")
        path = split / "html" / f"{key}.html.gz"
        if gold and url and url not in seen and path.exists():
            seen.add(url)  # a page's key is its URL
            out.append(Article(key, url, gold, gzip.decompress(path.read_bytes()), meta["page_type"]))
    return out


def _load_site(directory: Path) -> list[Article]:
    """A whole site: ``site.json`` (``{"url": base URL, "gold": CSS selector of a post's body}``) and
    ``pages/<name>.html``, each page at ``<base URL><name>``. A page's gold text is the text of the element the
    selector finds, one line per child element (the test bed's labeller, not the product's reader); pages without
    it (indexes, listings) are left out."""
    site = json.loads((directory / "site.json").read_text())
    out = []
    for path in sorted((directory / "pages").glob("*.html")):
        html = path.read_bytes()
        found = parse(html).cssselect(site["gold"])
        if not found:
            continue
        lines = (" ".join(child.text_content().split()) for child in found[0] if isinstance(child.tag, str))
        gold = "\n".join(line for line in lines if line)
        if gold:
            out.append(Article(path.stem, site["url"] + path.stem, gold, html))
    return out


def gold_shingles(text: str) -> set[tuple[str, ...]]:
    words = _WORD.findall(text.lower())
    return {tuple(words[i:i + 3]) for i in range(max(1, len(words) - 2))}


def _paragraphs(gold: str) -> str:
    return "".join(f"<p>{html_lib.escape(p.strip())}</p>" for p in gold.split("\n") if p.strip())


def _title(gold: str) -> str:
    return html_lib.escape(" ".join(gold.split()[:8]))


def print_copy(article: Article) -> bytes:
    host = host_of(article.url) or "example.org"
    return (f"<html><head><meta charset=utf-8><title>{_title(article.gold)}</title></head><body>"
            f"<div class=print-bar><a href='javascript:print()'>Print this page</a> <a href='#'>Close window</a></div>"
            f"<h1>{_title(article.gold)}</h1>{_paragraphs(article.gold)}"
            f"<div class=print-footer>Find this article at: {html_lib.escape(article.url)}<br>"
            f"Copyright 2026 {host}. All rights reserved.</div></body></html>").encode()


def amp_copy(article: Article) -> bytes:
    host = host_of(article.url) or "example.org"
    return (f"<!doctype html><html amp><head><meta charset=utf-8><title>{_title(article.gold)}</title></head><body>"
            f"<header class=amp-header><a href='/'>{host}</a> <a href='/news'>News</a> <a href='/sport'>Sport</a>"
            f"</header><article><h1>{_title(article.gold)}</h1>"
            f"<div class=amp-share><a href='#'>Share on Facebook</a><a href='#'>Share on Twitter</a>"
            f"<a href='#'>Email</a></div>{_paragraphs(article.gold)}</article>"
            f"<footer><a href='/privacy'>Privacy</a> <a href='/terms'>Terms</a> View full site</footer>"
            f"</body></html>").encode()


def _largest_container(root: lxml.html.HtmlElement) -> lxml.html.HtmlElement | None:
    best, best_len = None, 0
    for element in root.iter("div", "article", "section", "main", "td"):
        length = sum(len(p.text_content()) for p in element.findall("p"))
        if length > best_len:
            best, best_len = element, length
    return best


def syndicated_copy(article: Article, host_page: Article) -> bytes | None:
    root = parse(host_page.html)
    container = _largest_container(root)
    if container is None:
        return None
    for child in list(container):
        container.remove(child)
    container.text = None
    for element in lxml.html.fragments_fromstring(_paragraphs(article.gold)):
        container.append(element)
    body = root.find("body")
    host_gold = gold_shingles(host_page.gold)
    left = gold_shingles((body if body is not None else root).text_content())
    if len(host_gold & left) > LEFT_OVER * len(host_gold):
        return None
    return serialize(root)


def again_copy(article: Article, others: Sequence[Article], number: int) -> bytes:
    root = parse(article.html)
    body = root.find("body")
    if body is None:
        body = root
    date = lxml.html.fragment_fromstring(
        f"<div class=dateline>Updated November {number % 28 + 1}, 2026 {number % 12 + 1}:{number % 60:02d} pm</div>")
    count = lxml.html.fragment_fromstring(f"<div class=comment-count><a href='#comments'>{number * 7 + 3} comments</a>"
                                          f"</div>")
    teasers = "".join(f"<li><a href='/a{number}-{i}'>{_title(o.gold)}</a><p>"
                      f"{html_lib.escape(' '.join(o.gold.split()[8:28]))}</p></li>" for i, o in enumerate(others))
    related = lxml.html.fragment_fromstring(
        f"<div class=related-stories><h3>Related stories</h3><ul>{teasers}</ul></div>")
    body.insert(0, date)
    container = _largest_container(root)
    (container if container is not None else body).append(count)
    body.append(related)
    return serialize(root)


@dataclass(frozen=True)
class Page:
    key: str  # a URL
    gold: int  # index of the gold article
    kind: str
    html: bytes


def build_pages(articles: Sequence[Article]) -> list[Page]:
    pages = [Page(a.url, i, "original", a.html) for i, a in enumerate(articles)]
    n = len(articles)
    for kind in KINDS:
        for i, a in enumerate(articles):
            host = host_of(a.url) or "example.org"
            if kind == "print":
                pages.append(Page(f"https://{host}/print/{a.key}", i, kind, print_copy(a)))
            elif kind == "amp":
                pages.append(Page(f"https://amp.{host}/{a.key}", i, kind, amp_copy(a)))
            elif kind == "syndicated":
                other = articles[(i + 1) % n]
                html = syndicated_copy(a, other)
                if html is not None:
                    pages.append(Page(f"https://{host_of(other.url)}/syndicated/{a.key}", i, kind, html))
            else:
                others = [articles[(i + j) % n] for j in (2, 3, 5)]
                pages.append(Page(a.url + "?again", i, kind, again_copy(a, others, i)))
    return pages


def stripped(pages: Sequence[Page]) -> list[Page]:
    out = []
    for page in pages:
        root = parse(page.html)
        strip_semantics(root)
        _declare_utf8(root)
        out.append(Page(page.key, page.gold, page.kind, serialize(root)))
    return out


def _declare_utf8(root: lxml.html.HtmlElement) -> None:
    """Say in the page that it is UTF-8 (the parse read it so; undeclared, a reader may guess otherwise)."""
    if any(meta.get("charset") for meta in root.iter("meta")):
        return
    head = root.find("head")
    if head is None:
        head = lxml.html.Element("head")
        root.insert(0, head)
    head.insert(0, lxml.html.Element("meta", charset="utf-8"))


Decisions = dict[str, str | None]  # key -> matched key (None: kept)


def product(pages: Sequence[Page], threshold: float = DEFAULT_THRESHOLD) -> tuple[Decisions, float]:
    """The defaults as ``neardup dedupe`` runs them: ``"auto"`` content, host templates learned over the batch;
    ``threshold``: the resemblance to catch (``--threshold``; t is chosen for it as the product chooses it)."""
    sketcher, sketches, cpu = _sketch(pages)
    deduper = Deduper(sketcher, threshold=threshold)
    decisions: Decisions = {}
    for page, sketch in zip(pages, sketches, strict=True):
        verdict = deduper.check_sketch(page.key, sketch)
        decisions[page.key] = None if verdict.match is None else verdict.match.key
    return decisions, cpu


def _sketch(pages: Sequence[Page]) -> tuple[Sketcher, list[Any], float]:
    """The pages' default sketches, host templates learned over the batch, and the CPU seconds they took."""
    sketcher = Sketcher()
    start = time.process_time()
    htmls = [p.html for p in pages]
    learned = host_templates(pages, sketcher.block_hashes(htmls))
    sketches = sketcher.sketch_many(htmls, templates=[learned.get(host_of(p.key) or "") for p in pages])
    return sketcher, sketches, time.process_time() - start


def host_templates(pages: Sequence[Page], blocks: Sequence[Any]) -> dict[str, Any]:
    """Each host's template, learned from its original pages (``blocks``: their ``Sketcher.block_hashes``)."""
    by_host: dict[str, list[Any]] = {}
    for page, hashes in zip(pages, blocks, strict=True):
        # Templates come from the hosts' distinct pages (a crawl meets far more of them than copies): learned
        # over the copies too, a host of two articles would take the article its copies repeat for template.
        if hashes is not None and page.kind == "original":
            by_host.setdefault(host_of(page.key) or "", []).append(hashes)
    return {host: learn_template(sample).hashes for host, sample in by_host.items()}


def contained(least: float, articles_only: bool) -> Callable[[Sequence[Page], float], tuple[Decisions, float]]:
    """The defaults plus a rule the product does not apply (``benchmarks/containment.py``): a page is also dropped
    when a larger kept page holds at least ``least`` of it (``articles_only``: a kept page that declares itself an
    article)."""

    def run(pages: Sequence[Page], threshold: float = DEFAULT_THRESHOLD) -> tuple[Decisions, float]:
        sketcher, sketches, cpu = _sketch(pages)
        articles = containment.declares_article([p.html for p in pages]) if articles_only else None
        decisions, _ = containment.decide([p.key for p in pages], sketches, sketcher, threshold=threshold,
                                          least=least, articles=articles)
        return decisions, cpu

    return run


def trafilatura_lsh(pages: Sequence[Page], threshold: float = DEFAULT_THRESHOLD) -> tuple[Decisions, float]:
    import trafilatura
    from datasketch import MinHash, MinHashLSH

    start = time.process_time()
    lsh = MinHashLSH(threshold=threshold, num_perm=128)
    decisions: Decisions = {}
    for page in pages:
        text = trafilatura.extract(page.html.decode("utf-8", "replace")) or ""
        words = _WORD.findall(text.lower())
        minhash = MinHash(num_perm=128)
        for i in range(max(1, len(words) - 4)):
            minhash.update(" ".join(words[i:i + 5]).encode())
        found = lsh.query(minhash)
        decisions[page.key] = found[0] if found else None
        if not found:
            lsh.insert(page.key, minhash)
    return decisions, time.process_time() - start


METHODS: dict[str, Callable[[Sequence[Page], float], tuple[Decisions, float]]] = {
    "auto": product, "trafilatura+lsh": trafilatura_lsh,
}


def score(pages: Sequence[Page], decisions: Decisions, distinct: Callable[[int, int], bool],
          types: Sequence[str] = ()) -> dict[str, Any]:
    """Kept-recall, precision, distinct pages dropped and copies found by kind; with ``types`` (each gold
    article's page type), kept-recall per page type too, when there are several."""
    gold = {p.key: p.gold for p in pages}
    kind = {p.key: p.kind for p in pages}
    groups: dict[int, list[str]] = {}
    for page in pages:
        groups.setdefault(page.gold, []).append(page.key)
    pairs = found = 0
    by_kind: dict[str, list[int]] = {k: [0, 0] for k in KINDS}
    by_type: dict[str, list[int]] = {t: [0, 0] for t in sorted(set(types))}
    for number, keys in groups.items():
        for a, b in itertools.combinations(keys, 2):
            pairs += 1
            ok = decisions[a] is not None or decisions[b] is not None
            found += ok
            if by_type:
                by_type[types[number]][0] += ok
                by_type[types[number]][1] += 1
            for k in {kind[a], kind[b]} - {"original"}:
                if "original" in (kind[a], kind[b]):
                    by_kind[k][0] += ok
                    by_kind[k][1] += 1
    dropped = [k for k, m in decisions.items() if m is not None]
    right = sum(gold[k] == gold[decisions[k]] for k in dropped)  # type: ignore[index]
    wrong = [k for k in dropped if distinct(gold[k], gold[decisions[k]])]  # type: ignore[index]
    return {"kept_recall": found / pairs if pairs else 1.0, "pairs": pairs,
            "precision": right / len(dropped) if dropped else 1.0, "distinct_dropped": len(wrong),
            "by_kind": {k: f"{v[0]}/{v[1]}" for k, v in by_kind.items()},
            **({"kept_recall_by_type": {t: round(v[0] / v[1], 4) for t, v in by_type.items() if v[1]}}
               if len(by_type) > 1 else {}),
            "wrong": [(k, decisions[k]) for k in wrong[:10]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=Path(os.environ.get("NEARDUP_OPENWEB_DIR", DEFAULT_DIR)))
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--threshold", type=float, action="append",
                        help=f"resemblance to catch, both methods (repeat for several; default {DEFAULT_THRESHOLD})")
    parser.add_argument("--containment", type=float, metavar="C",
                        help="also the defaults with a page dropped when a larger kept page holds at least C of it "
                             "(auto+contained; auto+contained-articles: kept article pages only), a rule the "
                             "product does not apply (benchmarks/containment.py)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    methods = dict(METHODS)
    names = args.methods.split(",")
    if args.containment is not None:
        methods["auto+contained"] = contained(args.containment, articles_only=False)
        methods["auto+contained-articles"] = contained(args.containment, articles_only=True)
        names += ["auto+contained", "auto+contained-articles"]
    try:
        articles = load_articles(args.dir)
    except FileNotFoundError as error:
        parser.exit(2, f"bench_openweb: {error}\n")
    shingles = [gold_shingles(a.gold) for a in articles]
    types = [a.page_type for a in articles]

    def distinct(i: int, j: int) -> bool:
        if i == j:
            return False
        a, b = shingles[i], shingles[j]
        return len(a & b) / max(1, len(a | b)) < DISTINCT_BELOW

    served = build_pages(articles)
    variants = {"served": served, "stripped": stripped(served)}
    rows = []
    for variant, pages in variants.items():
        for name, threshold in itertools.product(names, args.threshold or [DEFAULT_THRESHOLD]):
            decisions, cpu = methods[name](pages, threshold)
            row = {"variant": variant, "method": name, "threshold": threshold, "pages": len(pages),
                   "cpu_s": round(cpu, 2), **score(pages, decisions, distinct, types)}
            rows.append(row)
            by_type = f"  by type {row['kept_recall_by_type']}" if "kept_recall_by_type" in row else ""
            print(f"{variant:9} {name:16} {threshold:4.2f} pages {len(pages):5}  kept-recall {row['kept_recall']:.3f}  "
                  f"precision {row['precision']:.3f}  distinct dropped {row['distinct_dropped']:3}  "
                  f"by kind {row['by_kind']}{by_type}  cpu {cpu:.1f} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
