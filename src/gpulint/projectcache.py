"""A front-end's project (the CUDA front-end's `CudaProject`) kept between runs, with a record of
everything it was built from, so a warm run that changed none of it neither reads those files
nor builds it again.

What a project is built from: the checked files of its language, the Python files and folder
listings below the folders its front-end names (`index_reads`: the CUDA project reads the
scripts and `setup.py` files that build an extension), the configuration, rules and gpulint's
own code (the result cache's fingerprint, in the file's name), and the working folder (paths
are shown relative to it). A stored project is used only when all of these are as recorded:
the same checked files in the same order, the same listings, and each file with the stamp it
had (size, mtimes, inode: `cache.file_stamp`) or, where it was recorded by its content hash,
with that hash. Everything is stamped before the project is built, so an edit made while it
is built leaves a stamp the next run finds moved. A file modified within `RACY_NS` of the run
is recorded by its hash, not its stamp (an edit within the file system's timestamp
granularity would leave the stamp as it was). Anything unreadable, foreign or too large
means: build it as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from pathlib import Path

from gpulint.cache import RESTAMPS_WRITTEN, file_stamp, write_atomic
from gpulint.safeio import Unreadable, read_bytes

FORMAT = 3  # 2: CudaProject.torch_by_header, CudaProject.launching; 3: reads_last_error
MAX_BYTES = 64 * 1024 * 1024
MAX_ENTRIES = 20_000  # files and folders below the read folders; more: not kept
RACY_NS = 2_000_000_000  # as parallel.RACY_NS
_SKIPPED = ("node_modules",)  # and hidden folders: as the CUDA project's own walk


class ProjectCache:
    """One front-end's stored project in the result cache's folder."""

    def __init__(self, directory: Path, language: str, fingerprint: str) -> None:
        self.directory = directory
        self.path = directory / f"project-{language}-{fingerprint[:24]}.json"
        self.started = time.time_ns()
        self._record: dict | None = None  # what the project about to be built is built from

    def load(self, shown: list[str]) -> dict | None:
        """{"project": its JSON form, "salts": each checked file's cache salt} as stored, when
        everything it was built from is as recorded; else None. The folders read beyond the
        checked files are the stored ones: they follow from the files' paths and gpulint's
        code, both part of the match."""
        from gpulint.safeio import Unreadable, read_text

        try:
            stored = json.loads(read_text(self.path, MAX_BYTES, [self.directory]))
        except (Unreadable, ValueError, RecursionError):
            return None
        if not (
            isinstance(stored, dict)
            and stored.get("format") == FORMAT
            and stored.get("shown") == shown
            and isinstance(stored.get("tops"), list)
            and all(isinstance(t, str) for t in stored["tops"])
        ):
            return None
        record = self.snapshot(shown, stored["tops"])
        if not (
            record is not None
            and {k: stored.get(k) for k in ("cwd", "listings")}
            == {k: record[k] for k in ("cwd", "listings")}
            and isinstance(stored.get("items"), list)
            and isinstance(stored.get("stamps"), dict)
            and stored["stamps"].keys() == record["stamps"].keys()
            and isinstance(stored.get("project"), dict)
            and isinstance(stored.get("salts"), dict)
            and all(isinstance(stored["salts"].get(p), str) for p in shown)
        ):
            return None
        try:
            if not self._same(shown, record["items"], stored["items"]):
                return None
            for folder, names in record["listings"].items():
                if not self._same(
                    [os.path.join(folder, n) for n in names if not n.endswith("/")],
                    record["stamps"][folder],
                    stored["stamps"][folder],
                ):
                    return None
        except (OSError, ValueError, TypeError):
            return None
        found = {"project": stored["project"], "salts": stored["salts"]}
        moved = sum(a != b for a, b in zip(record["items"], stored["items"], strict=True))
        for folder, stamps in record["stamps"].items():
            if stamps != stored["stamps"][folder]:
                moved += sum(a != b for a, b in zip(stamps, stored["stamps"][folder], strict=True))
        if moved > RESTAMPS_WRITTEN:  # as the result cache: a few are hashed again next run
            self._write({**record, **found})
        return found

    @staticmethod
    def _same(paths: list[str], now: list[str], recorded: object) -> bool:
        """Whether the files are as recorded: the same stamp, or the same bytes where a hash
        was recorded (a racy file then; `now` keeps its new stamp for the next run)."""
        if not (isinstance(recorded, list) and len(recorded) == len(now)):
            return False
        for path, mine, theirs in zip(paths, now, recorded, strict=True):
            if mine == theirs:
                continue
            if not (isinstance(theirs, str) and theirs.startswith("#")):
                return False  # recorded by its stamp, and the stamp moved
            if (mine if mine.startswith("#") else "#" + _sha(path)) != theirs:
                return False
        return True

    def save(self, project: dict, salts: dict[str, str]) -> None:
        """Record the project just built, with what `snapshot` found before it was built."""
        if self._record is not None:
            self._write({**self._record, "project": project, "salts": salts})

    def snapshot(self, shown: list[str], tops: list[str]) -> dict | None:
        """What a project of `shown` is built from, now: taken before it is built. None (and
        nothing will be saved) past MAX_ENTRIES or where something cannot be read."""
        if self._record is None or self._record["tops"] != tops:
            try:
                self._record = self._take(shown, tops)
            except (OSError, ValueError):
                self._record = None
        return self._record

    def _take(self, shown: list[str], tops: list[str]) -> dict | None:
        listings: dict[str, list[str]] = {}
        stamps: dict[str, list[str]] = {}
        count = 0
        kept = sorted(set(tops))
        # a folder below another read folder is walked with it
        stack = [t or "." for t in reversed(kept) if not any(_below(t, o) for o in kept if o != t)]
        # as os.walk (top down, links to folders listed and not entered), with one scandir
        # and no path joins per file
        while stack:
            here = stack.pop()
            py: list[os.DirEntry] = []
            dirs: list[tuple[str, bool]] = []
            with os.scandir(here) as entries:
                for entry in entries:
                    name = entry.name
                    if entry.is_dir():
                        if not name.startswith(".") and name not in _SKIPPED:
                            dirs.append((name, entry.is_symlink()))
                    elif name.endswith(".py"):
                        py.append(entry)
            py.sort(key=lambda e: e.name)
            dirs.sort()
            listings[here] = [e.name for e in py] + [d + "/" for d, _ in dirs]
            stamps[here] = [self._stamp(e.path, e.stat()) for e in py]
            count += 1 + len(py)
            if count > MAX_ENTRIES:
                return None
            stack += [os.path.join(here, d) for d, link in reversed(dirs) if not link]
        return {
            "format": FORMAT,
            "cwd": os.getcwd(),
            "shown": shown,
            "tops": tops,
            "items": [self._stamp(p) for p in shown],
            "listings": listings,
            "stamps": stamps,
        }

    def _stamp(self, path: str, st: os.stat_result | None = None) -> str:
        """The file's stamp ("size:mtime:ctime:inode"), or "#" and the hash of its bytes where
        it was modified within RACY_NS of the run's start. ValueError: not a regular file."""
        if st is None:
            st = os.stat(path)  # links followed: the readers open what they lead to
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(path)
        if st.st_mtime_ns > self.started - RACY_NS:
            return "#" + _sha(path)
        return ":".join(map(str, file_stamp(st)))

    def _write(self, payload: dict) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, payload, ".project-")
        except OSError:
            pass  # a store that cannot be written is only a slower next run


def _sha(path: str) -> str:
    try:  # read_bytes: a FIFO or device swapped in after the stat must not block
        return hashlib.sha256(read_bytes(path, 1 << 30)).hexdigest()
    except Unreadable as e:
        raise OSError(str(e)) from None


def _below(path: str, top: str) -> bool:
    if top == "":
        return not os.path.isabs(path)
    return path.startswith(top.rstrip("/") + "/")
