"""The result cache: findings per file, keyed by the file's content hash and everything else that
can change them (gpulint version, effective configuration, enabled rules, evidence).

One JSON file per configuration fingerprint under `.gpulint_cache/`. It is read once per run and
replaced atomically (temp file + rename) at the end, so two runs at once never see a torn file:
the worst case is that one run's additions are lost, never that wrong findings are served.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from gpulint import __version__
from gpulint.diagnostics import Finding

CACHE_FORMAT = 1


class ResultCache:
    def __init__(self, directory: Path, fingerprint: str):
        self.directory = directory
        self.path = directory / f"results-{fingerprint[:32]}.json"
        self.fingerprint = fingerprint
        self.entries: dict[str, dict] = {}
        self.dirty = False
        self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
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
        if not entry or entry.get("digest") != digest:
            return None
        try:
            return [Finding.from_dict({**f, "path": shown}) for f in entry["findings"]]
        except (KeyError, TypeError, ValueError):
            return None

    def put(
        self, relpath: str, digest: str, findings: list[Finding], deps: dict[str, str] | None = None
    ) -> None:
        self.entries[relpath] = {
            "digest": digest,
            "findings": [{k: v for k, v in f.to_dict().items() if k != "path"} for f in findings],
        }
        if deps:
            # Other files whose function summaries these findings used (gpulint.project).
            self.entries[relpath]["deps"] = deps
        self.dirty = True

    def deps(self, relpath: str) -> dict[str, str]:
        """relpath -> sha256 of each other file the cached findings depend on."""
        found = (self.entries.get(relpath) or {}).get("deps")
        return found if isinstance(found, dict) else {}

    def save(self) -> None:
        if not self.dirty:
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
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".results-", suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(payload, out, separators=(",", ":"))
            os.replace(tmp, self.path)
        except OSError:
            pass  # a cache that cannot be written is only a slower next run
