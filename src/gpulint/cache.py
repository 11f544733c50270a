"""The result cache: findings per file, keyed by the file's content hash and everything else that
can change them (gpulint version, effective configuration, enabled rules, evidence).

One JSON file per configuration fingerprint under `.gpulint_cache/`. It is read once per run and
replaced atomically (temp file + rename) at the end, so two runs at once never see a torn file:
the worst case is that one run's additions are lost, never that wrong findings are served.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from gpulint import __version__
from gpulint.diagnostics import Finding

CACHE_FORMAT = 2  # 2: related locations carry their end
MAX_CACHE_BYTES = 512 * 1024 * 1024
RESTAMPS_WRITTEN = 16  # see ResultCache.save


def evidence_stamp(path: str) -> list | None:
    """What a cached result assumed about an evidence path: its size and modification time (a
    folder: its own modification time, which an added or removed entry changes, and those of its
    records), or None where there was nothing."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if os.path.isdir(path):
        try:
            names = sorted(n for n in os.listdir(path) if n.endswith(".json"))[-2000:]
        except OSError:
            return None
        return [
            st.st_mtime_ns,
            *([n, *(evidence_stamp(os.path.join(path, n)) or [])] for n in names),
        ]
    return [st.st_size, st.st_mtime_ns]


def file_stamp(st: os.stat_result) -> list[int]:
    """What says a file is unchanged without reading it, as git's index and ruff's cache do:
    size, modification and change times, inode. An edit, a rename over it, a `touch` or a
    checkout changes one of them."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


class ResultCache:
    def __init__(self, directory: Path, fingerprint: str):
        self.directory = directory
        self.path = directory / f"results-{fingerprint[:32]}.json"
        self.fingerprint = fingerprint
        self.entries: dict[str, dict] = {}
        self.dirty = False  # an entry added or replaced: the file is written at the end
        self.restamped = 0  # entries that only took a new stamp
        self._load()

    def _load(self) -> None:
        from gpulint.safeio import Unreadable, read_text

        try:  # the cache folder may sit in a stranger's checkout: read it like their files
            data = json.loads(read_text(self.path, MAX_CACHE_BYTES, [self.directory]))
        except (Unreadable, ValueError, RecursionError):
            return
        if (
            isinstance(data, dict)
            and data.get("format") == CACHE_FORMAT
            and data.get("version") == __version__
            and data.get("fingerprint") == self.fingerprint
            and isinstance(data.get("files"), dict)
        ):
            self.entries = data["files"]

    def get(self, relpath: str, digest: str, shown: str) -> list[Finding] | None:
        entry = self.entries.get(relpath)
        if not isinstance(entry, dict) or entry.get("digest") != digest:
            return None
        deps = entry.get("evidence") or {}
        # The evidence records the findings cited (or looked for and missed) must be as they
        # were: an edited, deleted or created record changes what the file's claims are judged by.
        if not isinstance(deps, dict) or any(evidence_stamp(p) != s for p, s in deps.items()):
            return None
        try:
            return [Finding.from_dict({**f, "path": shown}) for f in entry["findings"]]
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    def put(
        self,
        relpath: str,
        digest: str,
        findings: list[Finding],
        deps: dict[str, str] | None = None,
        evidence: dict | None = None,
        stamp: list[int] | None = None,
    ) -> None:
        self.entries[relpath] = {
            "digest": digest,
            "findings": [{k: v for k, v in f.to_dict().items() if k != "path"} for f in findings],
        }
        if stamp:
            self.entries[relpath]["stat"] = stamp
        if deps:
            # Other files whose function summaries these findings used (gpulint.project).
            self.entries[relpath]["deps"] = deps
        if evidence:
            self.entries[relpath]["evidence"] = evidence
        self.dirty = True

    def stamped(self, relpath: str, stamp: list[int]) -> str | None:
        """The digest the cached entry was made from, when the file's stamp is the one recorded
        with it (the bytes need not be read and hashed again); else None."""
        entry = self.entries.get(relpath)
        if isinstance(entry, dict) and entry.get("stat") == stamp:
            digest = entry.get("digest")
            return digest if isinstance(digest, str) else None
        return None

    def restamp(self, relpath: str, stamp: list[int]) -> None:
        """Record a stamp for an entry whose bytes were just hashed and found unchanged."""
        entry = self.entries.get(relpath)
        if isinstance(entry, dict) and entry.get("stat") != stamp:
            entry["stat"] = stamp
            self.restamped += 1

    def deps(self, relpath: str) -> dict[str, str]:
        """relpath -> sha256 of each other file the cached findings depend on."""
        entry = self.entries.get(relpath)
        found = entry.get("deps") if isinstance(entry, dict) else None
        return found if isinstance(found, dict) else {}

    def save(self) -> None:
        # New stamps alone are written only when there are more than a few: a few files
        # hashed again next run (a file saved just before the last run, within the racy
        # window) cost less than rewriting the cache of every file (a checkout: write).
        if not self.dirty and self.restamped <= RESTAMPS_WRITTEN:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            gitignore = self.directory / ".gitignore"
            if not gitignore.exists():
                gitignore.write_text("# created by gpulint\n*\n")
            payload = {
                "format": CACHE_FORMAT,
                "version": __version__,
                "fingerprint": self.fingerprint,
                "files": self.entries,
            }
            write_atomic(self.path, payload, ".results-")
        except OSError:
            pass  # a cache that cannot be written is only a slower next run


def write_atomic(path: Path, payload: object, prefix: str) -> None:
    """`payload` as compact JSON, written to a new file beside `path` and renamed over it: a
    reader sees the old file or the new one, never a torn one. (One string and one write:
    `json.dump` writes piece by piece, twice as slow on a cache of thousands of files; and the
    name is made here, as `tempfile` would, without its import.)"""
    text = json.dumps(payload, separators=(",", ":"))
    for attempt in range(100):
        tmp = path.parent / f"{prefix}{os.getpid()}-{time.time_ns()}-{attempt}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return
    raise FileExistsError(path)
