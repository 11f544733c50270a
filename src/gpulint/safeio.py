"""Reading files a stranger's repository controls, safely.

gpulint runs in CI and pre-commit on code it did not write, so every file it reads (sources,
`.gitignore`, `pyproject.toml`, `levers.toml`, evidence records, its own cache) goes through here:
- only regular files are opened: a FIFO would block the read forever, a device (`/dev/zero`)
  never ends, a socket cannot be read; they are refused after an `lstat`, before any `open`;
- a symbolic link is followed only to a regular file, and only when it resolves inside one of
  the allowed roots (the project root, the folders the user named): a committed `x.py ->
  /etc/shadow` or a link loop is refused, and a path outside the roots that the user named
  themselves is read as given;
- every read is capped before it starts (the size from `fstat`, and at most `limit + 1` bytes
  read, since `/proc`-style files report a size of 0), cached run or not.
A refusal is an `Unreadable` whose message says why; callers turn it into a GPU000 finding on
that file (or a configuration error) and the run goes on.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

MAX_SOURCE_BYTES = 20 * 1024 * 1024  # a source file larger than this is reported, not parsed
MAX_CONFIG_BYTES = 1024 * 1024  # pyproject.toml, levers.toml, .gitignore
MAX_RECORD_BYTES = 4 * 1024 * 1024  # one evidence record file
# The time one file may take (gpulint.supervisor enforces it from outside the worker): a
# pathological file is reported and skipped, never hangs the run.
FILE_TIME_BUDGET_S = 30.0

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class Unreadable(Exception):
    """A file gpulint will not read; the message says why."""


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def check_file(path: Path | str, limit: int, roots: Iterable[Path | str] = ()) -> str:
    """The resolved path of `path` if it may be read, else `Unreadable`. `roots`: where a
    symbolic link may lead (none given: links are followed to any regular file)."""
    path = os.fspath(path)
    try:
        st = os.lstat(path)
    except (OSError, ValueError) as e:
        raise Unreadable(f"cannot read file: {getattr(e, 'strerror', None) or e}") from None
    real = os.path.abspath(path)
    try:
        resolved = os.path.realpath(path, strict=True)
    except (OSError, RuntimeError):
        raise Unreadable("symbolic link loop or dangling link; skipped") from None
    if resolved != real:
        allowed = [os.path.realpath(r) for r in roots]
        if allowed and not any(_inside(resolved, r) for r in allowed):
            raise Unreadable("symbolic link to a file outside the project; skipped")
        try:
            st = os.stat(resolved)
        except OSError as e:
            raise Unreadable(f"cannot read file: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise Unreadable(f"{_kind(st.st_mode)}, not a regular file; skipped")
    if st.st_size > limit:
        raise Unreadable(f"file too large ({st.st_size:,} bytes); skipped")
    return resolved


def read_bytes(path: Path | str, limit: int, roots: Iterable[Path | str] = ()) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (see the module docstring)."""
    return _read_opened(check_file(path, limit, roots), limit)


def _read_opened(resolved: str, limit: int) -> bytes:
    """The bytes of the file at `resolved` (not a link: opened with O_NOFOLLOW)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    flags |= getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(resolved, flags)
    except OSError as e:
        raise Unreadable(f"cannot read file: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)  # what was opened, not what was looked at: no swap in between
        if not stat.S_ISREG(st.st_mode):
            raise Unreadable(f"{_kind(st.st_mode)}, not a regular file; skipped")
        if st.st_size > limit:
            raise Unreadable(f"file too large ({st.st_size:,} bytes); skipped")
        chunks = []
        left = limit + 1
        # The first read asks for the size fstat gave (+1 to see the end): a fixed 1 MB
        # request per file is a 1 MB allocation shrunk after, and over thousands of small
        # files the heap it fragments stayed with the process (harness_built: +68 MB at 4x).
        want = st.st_size + 1
        while left > 0:
            chunk = os.read(fd, min(left, want))
            want = 1 << 16
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as e:
        raise Unreadable(f"cannot read file: {e.strerror or e}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise Unreadable(f"file too large (over {limit:,} bytes); skipped")
    return data


def read_text(
    path: Path | str, limit: int, roots: Iterable[Path | str] = (), errors: str = "strict"
) -> str:
    """`read_bytes` decoded as UTF-8; undecodable text is `Unreadable` unless `errors` says."""
    data = read_bytes(path, limit, roots)
    try:
        return data.decode("utf-8", errors)
    except UnicodeDecodeError as e:
        raise Unreadable(f"not UTF-8 text: {e.reason} at byte {e.start}") from None


def read_side(path: Path | str, limit: int) -> bytes | None:
    """A file read for context, not linted (a setup.py, a loader script beside an extension):
    its bytes when it is a regular file of at most `limit` bytes and not a link, else None.
    Never blocks: a FIFO or device named `*.py` is passed over like a missing file."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        # Not a link itself, and links anywhere are allowed here (no roots): `check_file`'s
        # realpath (an lstat per component) would change nothing, and the open and fstat
        # still refuse what is not a regular file of at most `limit` bytes. The CUDA
        # project reads every Python file of the tree this way, before workers start.
        return _read_opened(os.fspath(path), limit)
    except (OSError, ValueError, Unreadable):
        return None


def is_regular(path: Path | str, roots: Iterable[Path | str] = ()) -> bool:
    """Whether `path` is a regular file `read_bytes` would open (size aside)."""
    try:
        check_file(path, 1 << 62, roots)
    except Unreadable:
        return False
    return True


# Control characters (C0, DEL, C1), bidirectional overrides (the "Trojan Source" reorderings)
# and lone surrogates (a file name that is not UTF-8): what must not reach a terminal raw.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def escape(text: str) -> str:
    """`text` with every unprintable character written as its Python escape (`\\x1b`, `\\n`,
    `\\u202e`, `\\udcff`): what text and GitHub output print. JSON and SARIF keep the true
    value (their encoders escape it themselves)."""
    if not _UNPRINTABLE.search(text):
        return text
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
