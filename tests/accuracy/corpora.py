"""Real template-heavy documentation sites, from Debian's documentation packages, for measuring near-duplicate
decisions.

Each corpus is one site (or, for ``python-twice``, two hosts) made of the HTML pages that a Debian package ships
(:data:`SOURCES`): Javadoc 17 and 11, Sphinx with the Read-the-Docs and the PyData themes, rustdoc, doxygen and
Python's own documentation. Nobody on the project wrote them, and on many of their short pages the template
(navigation bars, sidebar tables of contents, headers, footers) is most of the text: the pages on which sketching the
whole visible body calls distinct pages near-duplicates.

Packages are fetched with ``apt-get download`` into a cache (``$NEARDUP_CORPUS_DIR``, default
``$XDG_CACHE_HOME/scrapy-neardup/corpora`` or ``~/.cache/scrapy-neardup/corpora``), unpacked with ``dpkg-deb -x``
and prepared once; a later run reads the cache and downloads nothing (delete the cache to take newer package
versions). Redirect stubs (``<meta http-equiv="refresh">``) are no pages: a crawler follows them, and so does the
crawl order here. Every page comes in two variants:

* ``served``: the bytes as shipped;
* ``stripped``: the same page with all semantic markup removed (:func:`strip_semantics`), as on the many real sites
  that have none: the layout stays, the visible text is unchanged, but no element or attribute says which part is
  the main content.

Pages are listed in crawl order: breadth-first from the site's index page along ``<a href>`` links to other pages
of the corpus, in document order, then the pages never reached, sorted by path.

``python-twice`` is Python's documentation served by two hosts: the second serves a copy of each page whose
template (not its main content) names another Python version and has another footer, so each page and its copy are
a real near-duplicate pair with identical main content. Both hosts are crawled side by side (each page, then its
copy).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import multiprocessing
import os
import re
import shutil
import subprocess
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar
from urllib.parse import quote, unquote, urldefrag, urljoin, urlsplit

import lxml.html

logger = logging.getLogger(__name__)

#: Version of the prepared data (page lists, crawl order, stripped and copied pages): part of the cache key.
PREPARE_VERSION = 4
Variant = Literal["served", "stripped"]
T = TypeVar("T")
R = TypeVar("R")
VARIANTS: tuple[Variant, ...] = ("served", "stripped")
#: Elements renamed to ``div`` in the stripped variant.
SEMANTIC_ELEMENTS = frozenset({"main", "nav", "header", "footer", "aside", "article", "section"})
#: Attributes dropped in the stripped variant (and every ``aria-*`` one).
SEMANTIC_ATTRIBUTES = frozenset({"role", "itemprop", "itemscope", "itemtype"})
TWICE = "python-twice"
#: The host of the copies in ``python-twice``.
COPY_HOST = "docs-python3.12-copy.test"
_PARSER = lxml.html.HTMLParser(encoding="utf-8")
_REFRESH = re.compile(rb"<meta[^>]+http-equiv\s*=\s*[\"']?refresh", re.IGNORECASE)
_REFRESH_TARGET = re.compile(
    rb"<meta[^>]+http-equiv\s*=\s*[\"']?refresh[^>]*content\s*=\s*[\"']?\d*\s*;\s*url=([^\"'>]+)", re.IGNORECASE
)


class CorpusUnavailable(RuntimeError):
    """A package could not be downloaded or unpacked (no apt, no network, no such package)."""


@dataclass(frozen=True)
class Source:
    """Where a corpus comes from: a Debian package and which of its HTML files are the site's pages.

    Attributes:
        name: the corpus name.
        package: the Debian package.
        generator: what made the HTML (``javadoc``, ``sphinx-rtd``, ``sphinx-pydata``, ``rustdoc``, ``doxygen``,
            ``python-docs``); the labeller picks its main-content selectors by it.
        root: the directory inside the package that is the site's root.
        index: the index page (the crawl's start), relative to ``root``.
        include: path prefixes (relative to ``root``) of the pages taken; empty: every ``.html`` file.
        exclude: path prefixes left out.
        menu_script: a script (relative to ``root``) that draws the site's menu on every page (doxygen's
            ``menudata.js``): the pages its ``url:"..."`` entries name count as links of the index page, after
            the index's own, as a browser shows them; without them the crawl would find no page from doxygen's
            index.
    """

    name: str
    package: str
    generator: str
    root: str
    index: str = "index.html"
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    menu_script: str | None = None

    @property
    def host(self) -> str:
        return f"docs-{self.package}.test"

    @property
    def digest(self) -> str:
        """Short hash of the definition: prepared data made from another definition is not reused."""
        return hashlib.blake2b(repr(self).encode(), digest_size=4).hexdigest()


# rustdoc: a few modules of std and of the crates whose items std re-exports (core, alloc), so that each
# re-exported item is documented under two paths (std::mem::swap and core::mem::swap): real near-duplicates.
_RUST_MODULES = ("intrinsics", "mem", "ptr", "fmt", "cell", "hash", "char", "cmp", "sync", "rc", "string", "vec",
                 "boxed", "option", "result")
_RUST_INCLUDE = ("std/index.html", "core/index.html", "alloc/index.html") + tuple(
    f"{crate}/{module}/" for module in _RUST_MODULES for crate in ("std", "core", "alloc")
)

SOURCES: tuple[Source, ...] = (
    # Javadoc 17 (HTML5: <main>); its source listings (src-html/) are left out.
    Source("commons-lang3", "libcommons-lang3-java-doc", "javadoc", "usr/share/doc/libcommons-lang3-java/api",
           exclude=("src-html/",)),
    # Javadoc 11 (<main> holding div.header and div.contentContainer).
    Source("commons-io", "libcommons-io-java-doc", "javadoc", "usr/share/doc/libcommons-io-java/api"),
    # Sphinx, Read-the-Docs theme: the whole table of contents in a sidebar on every page. pydicom has a page per
    # API item (425 of 511 pages); fonttools a page per module, and its highlighted sources (_modules/).
    Source("pydicom", "python-pydicom-doc", "sphinx-rtd", "usr/share/doc/python-pydicom-doc/html",
           exclude=("_static/",)),
    Source("fonttools", "python-fonttools-doc", "sphinx-rtd", "usr/share/doc/fonttools/html", exclude=("_static/",)),
    # Sphinx, PyData theme (0.7): the section's table of contents in a sidebar; the English half of the package.
    Source("groonga", "groonga-doc", "sphinx-pydata", "usr/share/doc/groonga-doc/en/html", exclude=("_static/",)),
    Source("rust-std", "rust-doc", "rustdoc", "usr/share/doc/rust-doc/html", index="std/index.html",
           include=_RUST_INCLUDE),
    Source("log4cplus", "liblog4cplus-doc", "doxygen", "usr/share/doc/liblog4cplus-dev/html",
           menu_script="menudata.js"),
    Source("python", "python3.11-doc", "python-docs", "usr/share/doc/python3.11/html", exclude=("_static/",)),
)
CORPUS_NAMES: tuple[str, ...] = tuple(s.name for s in SOURCES) + (TWICE,)


@dataclass(frozen=True)
class Page:
    """One page of a corpus: its URL (the key), host, path, and both variants' bytes."""

    key: str
    host: str
    path: str
    served: bytes
    stripped: bytes

    def html(self, variant: Variant) -> bytes:
        return self.served if variant == "served" else self.stripped


@dataclass(frozen=True)
class Corpus:
    """A prepared corpus: its pages in crawl order.

    Attributes:
        name: the corpus name (see :data:`CORPUS_NAMES`).
        generator: what made the HTML (see :class:`Source`).
        package, version: the Debian package and version the pages come from.
        hosts: the host names serving the pages.
        pages: the pages, in crawl order.
        reached: how many of them the crawl reaches from the index page (the first ``reached`` in crawl order).
        cache_id: names the prepared data (corpus, package version, :data:`PREPARE_VERSION`).
        cache: the directory where data derived from this corpus (labels) is cached.
    """

    name: str
    generator: str
    package: str
    version: str
    hosts: tuple[str, ...]
    pages: tuple[Page, ...]
    reached: int
    cache_id: str
    cache: Path
    _by_key: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_key", {page.key: i for i, page in enumerate(self.pages)})

    def __len__(self) -> int:
        return len(self.pages)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    @property
    def keys(self) -> list[str]:
        return [page.key for page in self.pages]

    def position(self, key: str) -> int:
        """The page's place in crawl order."""
        return self._by_key[key]

    def page(self, key: str) -> Page:
        return self.pages[self._by_key[key]]

    def html(self, variant: Variant) -> list[tuple[str, bytes]]:
        """``(key, HTML bytes)`` of every page in crawl order: what a method under test is fed."""
        return [(page.key, page.html(variant)) for page in self.pages]

    def html_bytes(self, variant: Variant) -> int:
        return sum(len(page.html(variant)) for page in self.pages)


def cache_dir() -> Path:
    """Where packages and prepared corpora are kept: ``$NEARDUP_CORPUS_DIR``, else the user's cache."""
    configured = os.environ.get("NEARDUP_CORPUS_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "scrapy-neardup" / "corpora"


# -- packages -------------------------------------------------------------------------------------------------


def _run(command: Sequence[str], package: str, cwd: Path | None = None) -> str:
    """Run ``command``; :class:`CorpusUnavailable` naming ``package`` and the command if it cannot."""
    shown = " ".join(command)
    if shutil.which(command[0]) is None:
        raise CorpusUnavailable(f"cannot get Debian package {package}: `{shown}` needs {command[0]}, not found")
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=900, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CorpusUnavailable(f"cannot get Debian package {package}: `{shown}` failed: {exc}") from exc
    if done.returncode != 0:
        raise CorpusUnavailable(
            f"cannot get Debian package {package}: `{shown}` exited with {done.returncode}: "
            f"{(done.stderr or done.stdout).strip()[-600:]}"
            + (" (are the package lists there? `apt-get update`)" if command[0] == "apt-get" else "")
        )
    return done.stdout


_lists_refreshed = False


def _refresh_package_lists(package: str) -> bool:
    """Run ``apt-get update`` once per process, as root only, after a download failed (package lists missing or
    older than the archive, whose old versions are gone); True when it ran."""
    global _lists_refreshed
    if _lists_refreshed or shutil.which("apt-get") is None or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return False
    _lists_refreshed = True
    logger.warning("downloading %s failed: refreshing the package lists (apt-get update) and trying again", package)
    _run(["apt-get", "update", "-qq"], package)
    return True


def fetch_package(package: str, cache: Path | None = None) -> tuple[Path, str]:
    """Download and unpack ``package`` once; returns the unpacked tree and the package's version.

    The ``.deb`` is fetched with ``apt-get download`` (no root needed; as root, a failed download is tried again
    once after ``apt-get update``, for package lists that are missing or stale) and unpacked with ``dpkg-deb -x``.
    Both are cached: ``debs/<package>.json`` names the file and version, so a later call runs no apt command at all.
    """
    cache = cache or cache_dir()
    debs, unpacked = cache / "debs", cache / "unpacked"
    pointer = debs / f"{package}.json"
    if pointer.exists():
        info = json.loads(pointer.read_text())
        tree = unpacked / info["deb"].removesuffix(".deb")
        if tree.is_dir():
            return tree, info["version"]
    debs.mkdir(parents=True, exist_ok=True)
    unpacked.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=debs) as tmp:
        logger.info("downloading %s", package)
        try:
            _run(["apt-get", "download", "-q", package], package, cwd=Path(tmp))
        except CorpusUnavailable:
            if not _refresh_package_lists(package):
                raise
            _run(["apt-get", "download", "-q", package], package, cwd=Path(tmp))
        found = sorted(Path(tmp).glob("*.deb"))
        if len(found) != 1:
            raise CorpusUnavailable(f"`apt-get download {package}` left {len(found)} .deb files, expected 1")
        deb = debs / found[0].name
        found[0].replace(deb)
    version = _run(["dpkg-deb", "-f", str(deb), "Version"], package).strip()
    tree = unpacked / deb.name.removesuffix(".deb")
    partial = tree.with_name(tree.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    _run(["dpkg-deb", "-x", str(deb), str(partial)], package)
    shutil.rmtree(tree, ignore_errors=True)
    partial.replace(tree)
    pointer.write_text(json.dumps({"deb": deb.name, "version": version}))
    return tree, version


def is_redirect(html: bytes) -> bool:
    """A redirect stub (``<meta http-equiv="refresh">`` in its head): a crawler follows it (Scrapy's
    MetaRefreshMiddleware does) and never sees the stub as a page."""
    return _REFRESH.search(html, 0, 4096) is not None


def list_pages(site: Path, source: Source) -> list[str]:
    """The site's page paths (relative, sorted): regular ``.html`` files matching ``include``, not ``exclude``, that
    are not redirect stubs (:func:`is_redirect`: rustdoc makes thousands)."""
    pages = []
    for path in site.rglob("*.html"):
        if path.is_symlink() or not path.is_file():
            continue
        rel = path.relative_to(site).as_posix()
        if source.include and not rel.startswith(source.include):
            continue
        if source.exclude and rel.startswith(source.exclude):
            continue
        if is_redirect(path.read_bytes()):
            continue
        pages.append(rel)
    return sorted(pages)


# -- HTML -----------------------------------------------------------------------------------------------------


def parse(html: bytes) -> lxml.html.HtmlElement:
    """The document's root element (UTF-8 unless the page says otherwise; every corpus page is UTF-8)."""
    return lxml.html.document_fromstring(html, parser=_PARSER)


def serialize(root: lxml.html.HtmlElement) -> bytes:
    """The document as UTF-8 HTML, its doctype kept.

    libxml2's serializer deletes ``<meta http-equiv="Content-Type" ...>``; such a declaration is turned into its
    HTML5 form, ``<meta charset="utf-8">`` (kept), first, so the bytes still say how they are encoded.
    """
    for meta in root.iter("meta"):
        if (meta.get("http-equiv") or "").lower() == "content-type":
            for name in list(meta.attrib):
                del meta.attrib[name]
            meta.set("charset", "utf-8")
    return bytes(lxml.html.tostring(root.getroottree(), encoding="utf-8", method="html"))


@functools.lru_cache(maxsize=1 << 16)
def neutral(value: str, prefix: str) -> str:
    """A name that reveals nothing, the same for the same ``value`` everywhere (``c3f9a02e1`` for a class)."""
    return prefix + hashlib.blake2b(value.encode("utf-8"), digest_size=4).hexdigest()


def strip_semantics(root: lxml.html.HtmlElement) -> None:
    """Remove every semantic hint from a parsed page, in place, leaving its layout and visible text alone.

    ``main``, ``nav``, ``header``, ``footer``, ``aside``, ``article`` and ``section`` become ``div``; ``role``,
    ``itemprop``, ``itemscope``, ``itemtype`` and every ``aria-*`` attribute go; each id and each class name is
    replaced by a neutral token (:func:`neutral`), the same token for the same name, so ``main-content``,
    ``document``, ``sphinxsidebar`` or ``contentContainer`` no longer say what they hold.
    """
    for element in root.iter():
        if not isinstance(element.tag, str):  # comments, processing instructions
            continue
        if element.tag in SEMANTIC_ELEMENTS:
            element.tag = "div"
        attrib = element.attrib
        for name in list(attrib):
            if name in SEMANTIC_ATTRIBUTES or name.startswith("aria-"):
                del attrib[name]
        if "id" in attrib:
            attrib["id"] = neutral(attrib["id"], "i")
        if "class" in attrib:
            attrib["class"] = " ".join(neutral(name, "c") for name in attrib["class"].split())


def link_targets(root: lxml.html.HtmlElement, url: str, host: str) -> list[str]:
    """The paths on ``host`` that the page at ``url`` links to with ``<a href>``, in document order.

    Fragments and queries are ignored; a link to a directory means its ``index.html``.
    """
    found = []
    for anchor in root.iter("a"):
        href = anchor.get("href")
        if not href:
            continue
        try:
            target = urlsplit(urldefrag(urljoin(url, href.strip()))[0])
        except ValueError:  # not a URL (a placeholder such as http://[HOST]:PORT/)
            continue
        if target.scheme != "http" or target.netloc != host:
            continue
        path = unquote(target.path).lstrip("/")
        if path == "" or path.endswith("/"):
            path += "index.html"
        found.append(path)
    return found


def links(root: lxml.html.HtmlElement, url: str, host: str, resolve: Callable[[str], str | None]) -> list[str]:
    """Paths of the corpus pages that the page at ``url`` links to, in document order, once each; ``resolve`` maps
    a path on the host to the corpus page it is or redirects to (``None``: not a page of the corpus)."""
    return _resolved(link_targets(root, url, host), resolve)


def _resolved(paths: Iterable[str], resolve: Callable[[str], str | None]) -> list[str]:
    found: dict[str, None] = {}
    for path in paths:
        page = resolve(path)
        if page is not None:
            found.setdefault(page, None)
    return list(found)


class SiteResolver:
    """Maps a path on a site to the corpus page it is, following redirect stubs as a crawler would."""

    MAX_HOPS = 5

    def __init__(self, site: Path, host: str, pages: frozenset[str]) -> None:
        self.site, self.host, self.pages = site, host, pages
        self._memo: dict[str, str | None] = {}

    def __call__(self, path: str) -> str | None:
        if path not in self._memo:
            self._memo[path] = self._resolve(path)
        return self._memo[path]

    def _resolve(self, path: str) -> str | None:
        for _ in range(self.MAX_HOPS):
            if path in self.pages:
                return path
            file = self.site / path
            if ".." in Path(path).parts or not file.is_file():
                return None
            match = _REFRESH_TARGET.search(file.read_bytes(), 0, 4096)
            if match is None:
                return None
            target = urlsplit(urljoin(page_url(self.host, path), match.group(1).decode("utf-8", "replace").strip()))
            if target.netloc != self.host:
                return None
            path = unquote(target.path).lstrip("/")
        return None


def breadth_first(index: str, outlinks: dict[str, list[str]]) -> list[str]:
    """The pages reached from ``index`` along ``outlinks``, breadth-first, each once."""
    seen = {index}
    order: list[str] = []
    queue = deque([index])
    while queue:
        path = queue.popleft()
        order.append(path)
        for target in outlinks.get(path, ()):
            if target not in seen:
                seen.add(target)
                queue.append(target)
    return order


def crawl_order(index: str, pages: Sequence[str], outlinks: dict[str, list[str]]) -> list[str]:
    """Breadth-first order from ``index`` along ``outlinks``, then the unreached pages in sorted order."""
    order = breadth_first(index, outlinks)
    reached = set(order)
    return order + sorted(p for p in pages if p not in reached)


def page_url(host: str, path: str) -> str:
    return f"http://{host}/{quote(path)}"


# -- the python-twice copies ----------------------------------------------------------------------------------

# In the copy's template: another Python version, another footer.
_VERSION_EDITS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b3\.11\.\d+\b"), "3.12.0"),
    (re.compile(r"\bPython 3\.11\b"), "Python 3.12"),
    (re.compile(r"\b3\.11\b"), "3.12"),
)
_FOOTER_EDITS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b(\d{4})-\d{4}\b"), r"\1-2024"),
    (re.compile(r"Last updated on [A-Z][a-z]+ \d{1,2}, \d{4}"), "Last updated on January 15, 2024"),
    (re.compile(r"\b\d+\.\d+\.\d+\b"), "7.2.6"),
)


def _edit(text: str | None, edits: Iterable[tuple[re.Pattern[str], str]]) -> str | None:
    if not text:
        return text
    for pattern, replacement in edits:
        text = pattern.sub(replacement, text)
    return text


def python_main(root: lxml.html.HtmlElement) -> lxml.html.HtmlElement | None:
    """The main content of a page of Python's documentation (``div.body``, which has ``role="main"``)."""
    found = root.xpath('//div[@role="main"] | //div[contains(concat(" ", @class, " "), " body ")]')
    return found[0] if found else None


def python_copy(root: lxml.html.HtmlElement) -> None:
    """Make a parsed page of Python 3.11's documentation into the copy served by the second host, in place.

    Outside the main content only: version strings name 3.12 (``3.11.2`` becomes ``3.12.0``, ``Python 3.11``
    ``Python 3.12``) in the title, navigation and sidebar; the footer's copyright years, last-updated date and
    Sphinx version change. The main content is left as it is.
    """
    main = python_main(root)
    inside = set(main.iter()) if main is not None else set()
    inside.discard(main)
    footers = root.xpath('//div[contains(concat(" ", @class, " "), " footer ")]')
    in_footer = {element for footer in footers for element in footer.iter()}
    for element in root.iter():
        if element in inside:
            continue
        edits = (_FOOTER_EDITS + _VERSION_EDITS) if element in in_footer else _VERSION_EDITS
        if element is not main:
            element.text = _edit(element.text, edits)
        parent = element.getparent()
        tail_edits = (_FOOTER_EDITS + _VERSION_EDITS) if parent in in_footer else _VERSION_EDITS
        element.tail = _edit(element.tail, tail_edits)


# -- preparing and loading ------------------------------------------------------------------------------------


@dataclass
class _Prepared:
    """What is cached for a corpus: the manifest and the bytes that are not in the unpacked package."""

    manifest: dict[str, object]
    blobs: dict[str, bytes]


def parallel_map(function: Callable[[T], R], items: Sequence[T], chunksize: int = 8) -> list[R]:
    """``[function(item) for item in items]`` on every core (``$NEARDUP_CORPUS_WORKERS`` processes if set; 1: in
    this process). ``function`` must be a module-level function."""
    workers = int(os.environ.get("NEARDUP_CORPUS_WORKERS") or 0) or os.cpu_count() or 1
    if workers <= 1 or len(items) < 4 * chunksize:
        return [function(item) for item in items]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        return list(pool.map(function, items, chunksize=chunksize))


def _strip_page(task: tuple[str, str, str]) -> tuple[bytes, list[str]]:
    """For a page ``(site directory, host, path)``: its stripped variant and the paths it links to."""
    site, host, path = task
    root = parse((Path(site) / path).read_bytes())
    targets = link_targets(root, page_url(host, path), host)
    strip_semantics(root)
    return serialize(root), targets


def _prepare_site(source: Source, site: Path, version: str) -> _Prepared:
    """Read the site's pages, find the crawl order and make the stripped variant."""
    paths = list_pages(site, source)
    if source.index not in paths:
        raise CorpusUnavailable(f"{source.package} {version}: no index page {source.index} under {source.root}")
    resolve = SiteResolver(site, source.host, frozenset(paths))
    done = parallel_map(_strip_page, [(str(site), source.host, path) for path in paths])
    stripped = {path: page for path, (page, _) in zip(paths, done, strict=True)}
    outlinks = {path: _resolved(targets, resolve) for path, (_, targets) in zip(paths, done, strict=True)}
    if source.menu_script:
        menu = _menu_links(site / source.menu_script, page_url(source.host, source.index), source.host, resolve)
        outlinks[source.index] = list(dict.fromkeys(outlinks[source.index] + menu))
    reached = len(breadth_first(source.index, outlinks))
    order = crawl_order(source.index, paths, outlinks)
    logger.info("%s: %d pages, %d reached from %s", source.name, len(paths), reached, source.index)
    blob, offsets = _pack([stripped[p] for p in order])
    return _Prepared({"order": order, "reached": reached, "stripped": offsets}, {"stripped": blob})


def _menu_links(script: Path, url: str, host: str, resolve: Callable[[str], str | None]) -> list[str]:
    """The corpus pages that a doxygen menu script names (``url:"..."``), in its order."""
    anchors = "".join(
        f'<a href="{href}"></a>' for href in re.findall(r'url:"([^"]+)"', script.read_text("utf-8", "replace"))
    )
    return links(parse(f"<html><body>{anchors}</body></html>".encode()), url, host, resolve)


def _copy_page(served: bytes) -> tuple[bytes, bytes]:
    """The second host's copy of a page of Python's documentation, and its stripped variant."""
    root = parse(served)
    python_copy(root)
    copy = serialize(root)
    root = parse(copy)
    strip_semantics(root)
    return copy, serialize(root)


def _prepare_twice(python: Corpus) -> _Prepared:
    """The copies of ``python``'s pages for the second host: served bytes and stripped variant."""
    done = parallel_map(_copy_page, [page.served for page in python.pages])
    copies, stripped = [copy for copy, _ in done], [page for _, page in done]
    copy_blob, copy_offsets = _pack(copies)
    stripped_blob, stripped_offsets = _pack(stripped)
    return _Prepared({"copies": copy_offsets, "stripped": stripped_offsets},
                     {"copies": copy_blob, "stripped": stripped_blob})


def _pack(items: Sequence[bytes]) -> tuple[bytes, list[int]]:
    offsets = [0]
    for item in items:
        offsets.append(offsets[-1] + len(item))
    return b"".join(items), offsets


def _unpack(blob: bytes, offsets: Sequence[int]) -> list[bytes]:
    return [blob[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]


def _cached(directory: Path, make: Callable[[], _Prepared]) -> _Prepared:
    """The prepared data in ``directory``, made and written there first if absent."""
    manifest_file = directory / "manifest.json"
    if manifest_file.exists():
        manifest = json.loads(manifest_file.read_text())
        blobs = {name: (directory / f"{name}.bin").read_bytes() for name in manifest["blobs"]}
        return _Prepared(manifest, blobs)
    prepared = make()
    partial = directory.with_name(directory.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for name, blob in prepared.blobs.items():
        (partial / f"{name}.bin").write_bytes(blob)
    prepared.manifest["blobs"] = sorted(prepared.blobs)
    (partial / "manifest.json").write_text(json.dumps(prepared.manifest))
    shutil.rmtree(directory, ignore_errors=True)
    partial.replace(directory)
    return prepared


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]", "_", name)


def _source(name: str) -> Source:
    for source in SOURCES:
        if source.name == name:
            return source
    raise KeyError(f"no corpus {name!r}; known: {', '.join(CORPUS_NAMES)}")


def load_corpus(name: str, cache: Path | None = None) -> Corpus:
    """The corpus ``name`` (see :data:`CORPUS_NAMES`), fetched and prepared on first use.

    Raises:
        CorpusUnavailable: its package cannot be downloaded or unpacked (apt missing, no network...).
    """
    cache = cache or cache_dir()
    if name == TWICE:
        return _load_twice(cache)
    source = _source(name)
    tree, version = fetch_package(source.package, cache)
    site = tree / source.root
    if not site.is_dir():
        raise CorpusUnavailable(f"{source.package} {version} has no {source.root}")
    cache_id = _safe(f"{name}-{version}-p{PREPARE_VERSION}-{source.digest}")
    directory = cache / "prepared" / cache_id
    prepared = _cached(directory, lambda: _prepare_site(source, site, version))
    order: list[str] = prepared.manifest["order"]  # type: ignore[assignment]
    stripped = _unpack(prepared.blobs["stripped"], prepared.manifest["stripped"])  # type: ignore[arg-type]
    pages = tuple(
        Page(page_url(source.host, path), source.host, path, (site / path).read_bytes(), stripped[i])
        for i, path in enumerate(order)
    )
    reached = int(prepared.manifest["reached"])  # type: ignore[call-overload]
    return Corpus(name, source.generator, source.package, version, (source.host,), pages, reached, cache_id,
                  directory)


def _load_twice(cache: Path) -> Corpus:
    """``python-twice``: Python's pages and their copies on :data:`COPY_HOST`, interleaved in crawl order (each
    page, then its copy: both hosts crawled breadth-first side by side)."""
    python = load_corpus("python", cache)
    cache_id = _safe(f"{TWICE}-{python.cache_id}")
    directory = cache / "prepared" / cache_id
    prepared = _cached(directory, lambda: _prepare_twice(python))
    copies = _unpack(prepared.blobs["copies"], prepared.manifest["copies"])  # type: ignore[arg-type]
    stripped = _unpack(prepared.blobs["stripped"], prepared.manifest["stripped"])  # type: ignore[arg-type]
    pages: list[Page] = []
    for i, page in enumerate(python.pages):
        pages.append(page)
        pages.append(Page(page_url(COPY_HOST, page.path), COPY_HOST, page.path, copies[i], stripped[i]))
    return Corpus(TWICE, python.generator, python.package, python.version, (python.hosts[0], COPY_HOST),
                  tuple(pages), 2 * python.reached, cache_id, directory)


def copy_pairs(corpus: Corpus) -> list[tuple[str, str]]:
    """``(page, its copy)`` keys of ``python-twice``: the pairs known to be near-duplicates by construction."""
    original = {page.path: page.key for page in corpus.pages if page.host != COPY_HOST}
    return [(original[page.path], page.key) for page in corpus.pages if page.host == COPY_HOST]


def load_all(names: Iterable[str] = CORPUS_NAMES, cache: Path | None = None) -> list[Corpus]:
    """Every corpus in ``names``, in that order."""
    return [load_corpus(name, cache) for name in names]
