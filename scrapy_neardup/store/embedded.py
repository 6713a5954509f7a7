"""The embedded backend: an in-process :class:`~scrapy_neardup.core.index.SketchIndex`, optionally persisted.

Design notes: docs/architecture.md#scrapy_neardupstoreembedded
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.atomic_files import lock_directory
from ..core.index import SketchIndex
from ..core.match import Match
from ..errors import DirectoryLocked, StateError
from .backend import Backend, Decision
from .config import crawl_identity, job_state_dir, read_str, setting_bool
from .journal import JOURNAL_FORMAT, Journal
from .template_log import TemplateLog

if TYPE_CHECKING:
    from ..core.host_template import HostTemplate
    from ..core.params import SketchParams
    from ..core.sketch import Sketch
    from .config import SettingsLike

logger = logging.getLogger(__name__)

STATE_FILE = "neardup-index.bin"
JOURNAL_FILE = "neardup-journal.bin"
TEMPLATES_FILE = "neardup-templates.bin"
#: Directory under JOBDIR that holds the embedded store.
JOBDIR_SUBDIR = "neardup"


def state_settings(settings: SettingsLike) -> tuple[str | None, bool]:
    """Where the embedded state lives and whether to discard it: ``NEARDUP_STATE_DIR`` (default
    ``<JOBDIR>/neardup``; none without ``JOBDIR``) and ``NEARDUP_RESET``. Everything saved with the embedded
    store (the index, its journal, the mirror table) follows these two settings."""
    state_dir = read_str(settings, "NEARDUP_STATE_DIR") or job_state_dir(settings, JOBDIR_SUBDIR)
    return state_dir, setting_bool(settings, "NEARDUP_RESET")


class EmbeddedBackend(Backend):
    """An in-process :class:`SketchIndex`, persisted to ``state_dir`` (when one is given) as a snapshot written
    on close plus a journal of the pages kept since (see the module doc for the guarantees).

    ``check_and_add`` never awaits, so on Scrapy's single reactor thread concurrent items cannot interleave
    between the check and the insert; its only I/O is one small unbuffered write per kept page.

    Args:
        num_perm, min_shared, tag: the index parameters (see :class:`SketchIndex`).
        state_dir: directory for ``neardup-index.bin`` and ``neardup-journal.bin``; ``None`` keeps nothing
            after the crawl.
        reset: discard saved state instead of loading it.
        crawl_id: the identity of this crawl (see the module doc, repeats); ``None``: a new random one.

    Attributes:
        open_stats: what opening found, for the crawl's stats: ``state_loaded`` (pages in the snapshot),
            ``journal_replayed`` (changes recovered from the journal), ``journal_torn`` (torn records ignored:
            at most one after ``kill -9``), ``journal_torn_bytes``. Zero counts are left out.
    """

    #: ``check_and_add`` never awaits (see the class doc): the pipeline needs no lock around it.
    never_suspends = True

    def __init__(
        self, num_perm: int, min_shared: int, tag: str, state_dir: str | os.PathLike[str] | None = None,
        reset: bool = False, crawl_id: str | None = None,
    ) -> None:
        self.crawl_id = crawl_id or uuid.uuid4().hex
        self.num_perm = num_perm
        self.min_shared = min_shared
        self.tag = tag
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self.state_path = self.state_dir / STATE_FILE if self.state_dir is not None else None
        self.journal_path = self.state_dir / JOURNAL_FILE if self.state_dir is not None else None
        self.reset = reset
        self.index = SketchIndex(num_perm, min_shared, tag)
        self.open_stats: dict[str, int] = {}
        self.journal: Journal | None = None
        self.template_log: TemplateLog | None = None
        if self.state_dir is not None and self.state_path is not None and self.journal_path is not None:
            self.journal = Journal(self.journal_path, num_perm, min_shared, tag, snapshot=self.state_path,
                                   crawl=self.crawl_id)
            self.template_log = TemplateLog(self.state_dir / TEMPLATES_FILE, tag)
        self.templates: dict[str, HostTemplate] = {}
        self._lock_fd: int | None = None

    @classmethod
    def from_settings(cls, settings: SettingsLike, params: SketchParams) -> EmbeddedBackend:
        """``NEARDUP_STATE_DIR`` (default ``<JOBDIR>/neardup``, creating ``JOBDIR`` as Scrapy does; none
        without ``JOBDIR``), ``NEARDUP_RESET``, and the crawl's identity (:func:`crawl_identity`)."""
        state_dir, reset = state_settings(settings)
        return cls(params.num_perm, params.min_shared, params.tag, state_dir=state_dir, reset=reset,
                   crawl_id=crawl_identity(settings))

    def stats(self) -> Mapping[str, int]:
        return dict(self.open_stats)

    async def open(self) -> None:
        self.load()

    def load(self) -> None:
        """Lock the state directory, load the snapshot, replay the journal and open it for appending.

        Nothing is written when this raises: damaged state is left as it was found.

        Raises:
            StateError: the state is damaged, made with other parameters, or in use by another process.
        """
        if self.state_dir is None:
            return
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._lock()
        try:
            self._remove_temporary_files()
            if self.reset:
                self._discard()
            else:
                self._recover()
            self._open_journal()
            self._open_templates()
        except BaseException:
            self._release()
            raise

    def read(self) -> SketchIndex:
        """The stored pages (snapshot plus journal), read without writing anything: for reports and
        ``neardup explain`` of stored keys. The directory is locked while it is read.

        Raises:
            StateError: no state directory, no store in it, damaged state, other parameters, or in use by a crawl.
        """
        if self.state_dir is None or self.state_path is None or self.journal_path is None or self.journal is None:
            raise StateError("no state directory to read")
        if not (self.state_path.exists() or self.journal_path.exists()):
            raise StateError(f"{self.state_dir} holds no near-duplicate store ({STATE_FILE} or {JOURNAL_FILE})")
        self._lock()
        try:
            index = SketchIndex(self.num_perm, self.min_shared, self.tag)
            if self.state_path.exists():
                index = SketchIndex.load(self.state_path, self.num_perm, self.min_shared, self.tag)
            if self.journal_path.exists():
                self.journal.replay(index)
            return index
        finally:
            self._release()

    async def check_and_add(self, key: str, sketch: Sketch) -> Match | None:
        """The duplicate's kept match, else ``None`` (kept, or a revisit: see :meth:`decide`)."""
        return self.decide(key, sketch).match

    async def check_and_add_many(self, pages: Sequence[tuple[str, Sketch]]) -> list[Decision]:
        return [self.decide(key, sketch) for key, sketch in pages]

    def decide(self, key: str, sketch: Sketch) -> Decision:
        """Apply the recrawl rule (:meth:`SketchIndex.check_key`) and journal what changed the store: a kept
        page or a changed revisit (a *put*), a stored key that now duplicates another page (a *delete*), an
        unchanged revisit (a *seen*: the crawl met the key, so that after a resume the page is a repeat).

        Raises:
            JournalWriteError: the change holds for this run but could not be journaled.
        """
        decision = self.index.check_key(key, sketch)
        journal = self.journal if self.journal is not None and self.journal.is_open else None
        if journal is not None:
            if decision.removed:
                journal.append_delete(key)
            elif decision.outcome == "kept" or decision.changed:
                journal.append(key, sketch)
            elif decision.outcome == "revisit":
                journal.append_seen(key)
        return decision

    async def load_template(self, host: str) -> HostTemplate | None:
        return self.templates.get(host)

    async def save_template(self, host: str, template: HostTemplate) -> HostTemplate:
        """Keep ``host``'s template (first wins) and, with a state directory, append it to the template file
        before returning (see the module doc).

        Raises:
            TemplateWriteError: it could not be written; it is not kept.
        """
        saved = self.templates.get(host)
        if saved is not None:
            return saved
        if self.template_log is not None and self.journal is not None and self.journal.is_open:
            self.template_log.append(host, template)
        self.templates[host] = template
        return template

    async def close(self) -> None:
        self.save()

    def save(self) -> None:
        """Write the snapshot atomically, start an empty journal, release the state directory.

        A no-op without a state directory, or when the backend is not open.
        """
        if self.state_path is None or self.journal is None or not self.journal.is_open:
            return
        try:
            self._checkpoint()
            logger.info("saved %d kept sketches to %s", len(self.index), self.state_path)
        finally:
            self._release()

    # -- opening ---------------------------------------------------------------------------------------------

    def _remove_temporary_files(self) -> None:
        """Temporary files of a save interrupted by a crash (never renamed into place, so never used)."""
        assert self.state_dir is not None
        for name in (STATE_FILE, JOURNAL_FILE, TEMPLATES_FILE):
            for tmp in self.state_dir.glob(f"{name}.*.tmp"):
                logger.debug("removing %s, left by an interrupted save", tmp)
                tmp.unlink(missing_ok=True)

    def _discard(self) -> None:
        assert self.template_log is not None
        for path in (self.state_path, self.journal_path, self.template_log.path):
            assert path is not None
            if path.exists():
                logger.info("discarding near-duplicate state %s (reset)", path)
                path.unlink()

    def _recover(self) -> None:
        """Snapshot plus journal into ``self.index``; compacts them when the journal held anything new."""
        assert self.state_path is not None and self.journal_path is not None and self.journal is not None
        index = SketchIndex(self.num_perm, self.min_shared, self.tag)
        if self.state_path.exists():
            try:
                index = SketchIndex.load(self.state_path, self.num_perm, self.min_shared, self.tag)
            except StateError as exc:
                if "reset" in str(exc):
                    raise
                raise StateError(f"{exc}; use another state directory or reset it (NEARDUP_RESET=True)") from exc
            logger.info("loaded %d kept sketches from %s", len(index), self.state_path)
            self._count("state_loaded", len(index))
            if index.meta.get("crawl") != self.crawl_id:
                index.forget_seen()  # the flags of another crawl: this one has met none of its pages yet
        legacy_snapshot = self.state_path.exists() and "id" not in index.meta
        if not self.journal_path.exists():
            self.index = index
            if legacy_snapshot:
                self._checkpoint()  # give it an identity for the journal to continue
            return
        replay = self.journal.replay(index)
        # Only now, with the whole journal read and checked, does the recovered index replace the empty one.
        self.index = index
        if replay.torn:
            self._count("journal_torn", 1)
            self._count("journal_torn_bytes", replay.torn)
            logger.warning(
                "near-duplicate journal %s ends with a torn record (%d bytes: the page in flight when the "
                "process died); ignored", self.journal_path, replay.torn,
            )
        if replay.replayed:
            self._count("journal_replayed", replay.replayed)
            logger.info("replayed %d changes from %s", replay.replayed, self.journal_path)
        if replay.seen:
            logger.info("resumed crawl: %d pages it kept or revisited before are repeats when met again", replay.seen)
        if replay.replayed or replay.seen or replay.legacy or legacy_snapshot:
            # Compact now, so that a crash later in this run replays only this run's changes (and a store of
            # an older version is rewritten in the current formats).
            self._checkpoint()
        elif replay.torn or replay.absorbed or replay.crawl != self.crawl_id or replay.format != JOURNAL_FORMAT:
            # A new journal continuing the current snapshot: new records must follow intact ones only, a
            # journal already in the snapshot must not be continued, and the journal names this crawl (it
            # holds no change then: every put and delete is replayed, and a checkpoint follows); a journal of an
            # older format is not continued in the current one.
            self.journal.write_new(len(self.index), self.index.meta.get("id"))

    def _open_journal(self) -> None:
        """Open the journal for appending, creating it (with an fsynced header) when there is none."""
        assert self.journal is not None
        if not self.journal.path.exists():
            # An empty store gets an identity too, so that the first snapshot can name it as its predecessor.
            self.index.meta.setdefault("id", uuid.uuid4().hex)
            self.journal.write_new(len(self.index), self.index.meta["id"])
        self.journal.open_for_append()

    def _open_templates(self) -> None:
        """Load the hosts' templates (a torn last record is cut off: that host is learned again)."""
        assert self.template_log is not None
        self.templates, torn = self.template_log.load()
        if torn:
            logger.warning("near-duplicate template file %s ends with a torn record (%d bytes); ignored",
                           self.template_log.path, torn)
        if self.templates:
            logger.info("loaded the templates of %d hosts from %s", len(self.templates), self.template_log.path)
        self.template_log.open_for_append(torn)

    def _checkpoint(self) -> None:
        """Snapshot first, then an empty journal: a crash in between leaves a journal the snapshot covers
        (and names as its predecessor)."""
        assert self.journal is not None
        self._write_snapshot()
        self.journal.write_new(len(self.index), self.index.meta["id"])

    def _write_snapshot(self) -> None:
        """The first half of a checkpoint: a compacted snapshot with a new identity naming the previous one."""
        assert self.state_path is not None
        previous = self.index.meta.get("id")
        self.index.save(self.state_path, meta={"id": uuid.uuid4().hex, "previous": previous, "crawl": self.crawl_id})

    # -- the lock --------------------------------------------------------------------------------------------

    def _lock(self) -> None:
        assert self.state_dir is not None
        try:
            self._lock_fd = lock_directory(self.state_dir)
        except DirectoryLocked as exc:
            raise StateError(
                f"near-duplicate state directory {self.state_dir} is in use by another crawl; two crawls "
                "cannot share one (give each its own JOBDIR or NEARDUP_STATE_DIR)"
            ) from exc

    def _release(self) -> None:
        if self.journal is not None:
            self.journal.close()
        if self.template_log is not None:
            self.template_log.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    def _count(self, name: str, value: int) -> None:
        if value:
            self.open_stats[name] = self.open_stats.get(name, 0) + value


