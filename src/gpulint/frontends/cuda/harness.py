"""Which CUDA code belongs to a harness rather than the library: headers included only by
standalone programs (files defining `main`), sources built only by a script beside them, and
extensions whose every Python user in the checked tree is a script (a benchmark or experiment).
Python files are read as text, never run."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from gpulint.safeio import read_side
from gpulint.source import is_driver_path


def _basename(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


_STREAMS = re.compile(
    rb"(?i)stream|(?<!no-)cudagraph|cuda\.graph\b|graphed_callables|reduce-overhead"
    rb"|max-autotune(?!-no-cudagraphs)"
)
_LOADS = re.compile(rb"\bload\s*\(")


def script_built(paths: Iterable[str]) -> frozenset[str]:
    """CUDA sources compiled only by a Python script in their own folder, with
    `torch.utils.cpp_extension.load(sources=["x.cu"])`, where no Python file of the folder
    mentions a stream or a CUDA graph and no `setup.py` there or one folder up packages the
    source: every caller of their ops is in sight and runs on the default stream. The scripts
    are read as text, never run."""
    import os

    by_folder: dict[str, list[str]] = {}
    for path in paths:
        if path.endswith((".cu", ".cpp", ".cc", ".cxx")):
            folder, _, base = path.replace("\\", "/").rpartition("/")
            by_folder.setdefault(folder, []).append(base)
    out = set()
    for folder, bases in by_folder.items():
        texts = []
        try:
            with os.scandir(folder or ".") as entries:
                for entry in entries:
                    if entry.name.endswith(".py") and entry.is_file(follow_symlinks=False):
                        text = read_side(entry.path, (1 << 20) - 1)
                        if text is not None:
                            texts.append((entry.name, text))
        except OSError:
            continue
        loaders = [t for n, t in texts if b"cpp_extension" in t and _LOADS.search(t)]
        if not loaders or any(_STREAMS.search(t) for _, t in texts):
            continue
        packaging = b"".join(t for n, t in texts if n == "setup.py")
        parent = folder.rpartition("/")[0] if "/" in folder else ""
        packaging += read_side(os.path.join(parent or ".", "setup.py"), 1 << 20) or b""
        for base in bases:
            quoted = (b'"' + base.encode() + b'"', b"'" + base.encode() + b"'")
            named = any(q in t or b"/" + q[1:] in t for t in loaders for q in quoted)
            if named and base.encode() not in packaging:
                out.add(f"{folder}/{base}" if folder else base)
    return frozenset(out)


MAIN_BYTES = re.compile(rb"(?m)^\s*(?:int|void|auto)\s+main\s*\(")


def harness_headers(
    facts_by_path: dict[str, dict[str, Any]], paths: list[str], drivers: Iterable[str] = ()
) -> frozenset[str]:
    """Headers `#include`d only from standalone programs' code: each `#include "x/y.h"` is
    resolved to the checked file ending in `x/y.h` nearest the including file (two
    `utils.h` in different folders are different headers)."""
    by_name: dict[str, list[str]] = {}
    for path in paths:
        by_name.setdefault(_basename(path), []).append(path.replace("\\", "/"))
    from_program: set[str] = set()
    from_library: set[str] = set()
    # a file that `#include`s a program's source (`#include "launch.cu"`, the driver holding
    # `main` that runs and checks it) is compiled into that program: its code is the program's
    driven: set[str] = set()
    for includer, facts in facts_by_path.items():
        here = includer.replace("\\", "/").split("/")[:-1]
        for entry in facts.get("includes", ()):
            if not (isinstance(entry, list | tuple) and len(entry) == 2):
                continue
            name = str(entry[0])
            found = [p for p in by_name.get(_basename(name), ()) if ("/" + p).endswith("/" + name)]
            if not found:
                continue
            nearest = max(found, key=lambda p: _shared_prefix(here, p.split("/")[:-1]))
            (from_program if entry[1] else from_library).add(nearest)
            if nearest in drivers:
                driven.add(includer.replace("\\", "/"))
    return frozenset(from_program - from_library) | frozenset(driven)


def _shared_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def include_name(written: str) -> str:
    """`"../utils/utils.h"` as the path tail it names: `utils/utils.h`."""
    parts = [p for p in written.strip().strip('"').replace("\\", "/").split("/")]
    return "/".join(p for p in parts if p not in ("", ".", ".."))


_EXTENSION_NAME = re.compile(
    rb"(?:CUDAExtension|CppExtension)\s*\((?:\s*#[^\n]*)*\s*(?:name\s*=\s*)?[\"']([\w.]+)[\"']"
)
_SETUP_BUILDS = re.compile(rb"\b(?:CUDAExtension|CppExtension)\s*\(")
_MAIN_GUARD = re.compile(rb"(?m)^if\s+__name__\s*==\s*[\"']__main__[\"']")
# argparse, a loop or a print at module level (a script's work, not a definition)
_TOP_LEVEL_RUN = re.compile(
    rb"(?m)^(?:\w+\s*=\s*)?(?:argparse\.)?ArgumentParser\(|^(?:for|while)\s|^print\("
)
_MAX_PY_FILES = 4000


def _imports(name: str) -> re.Pattern[bytes]:
    """`import a.name`, `from a.name import x`, `from a import name` (and `... as`)."""
    n = re.escape(name.encode())
    return re.compile(
        rb"(?m)^[ \t]*(?:import[ \t]+[\w., \t]*\b" + n + rb"\b"
        rb"|from[ \t]+[\w.]*\b" + n + rb"\b[ \t]+import"
        rb"|from[ \t]+[\w.]+[ \t]+import[ \t]+[^\n]*\b" + n + rb"\b)"
    )


class _PyTree:
    """The Python files under a folder, read once as text (never run). Only what the harness
    questions need is kept: the loaders' whole text (files naming `cpp_extension`, the only
    possible users by `load(...)`) and every file's lines that say `import` (all an `_imports`
    pattern can match: it never crosses a line). Any other file's text is read again when a
    user's is needed; holding every file's bytes cost the main process the tree's size."""

    def __init__(self) -> None:
        self.scopes: dict[str, _PyScope] = {}

    def under(self, root: str) -> _PyScope:
        import os

        found = self.scopes.get(root)
        if found is not None:
            return found
        found = self.scopes[root] = _PyScope()
        for here, dirs, names in os.walk(root or "."):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d != "node_modules"]
            for name in names:
                if not name.endswith(".py") or len(found.imports) >= _MAX_PY_FILES:
                    continue
                path = os.path.join(here, name)
                text = read_side(path, (1 << 20) - 1)  # a FIFO named *.py must not block
                if text is None:
                    continue
                path = os.path.normpath(path).replace("\\", "/")
                found.imports[path] = _import_lines(text)
                if b"cpp_extension" in text:
                    found.loaders[path] = text
        return found


def python_reads(paths: Iterable[str]) -> list[str]:
    """The folders in which `harness_built` and `script_built` may read for these sources (their
    Python files, `setup.py` files, `__init__.py` presence, listings): each source's topmost
    folder that `harness_built` looks in; every folder either reads is at or below one. The
    stored project (gpulint.projectcache) is trusted only while the `.py` files and listings
    below them are unchanged: keep this a superset of what the two read."""
    import os

    tops = set()
    for path in paths:
        if not path.endswith((".cu", ".cpp", ".cc", ".cxx")):
            continue
        folder = path.replace("\\", "/").rpartition("/")[0]
        ancestors = [folder]
        while len(ancestors) < 4 and "/" in ancestors[-1]:
            ancestors.append(ancestors[-1].rpartition("/")[0])
        if len(ancestors) < 4 and ancestors[-1] and not os.path.isabs(ancestors[-1]):
            ancestors.append("")
        tops.add(ancestors[-1])
    return sorted(tops)


class _PyScope:
    def __init__(self) -> None:
        self.imports: dict[str, bytes] = {}  # path -> its lines holding `import`
        self.loaders: dict[str, bytes] = {}  # path -> text, for the files naming cpp_extension

    def text(self, path: str) -> bytes:
        found = self.loaders.get(path)
        if found is not None:
            return found
        return read_side(path, 1 << 20) or b""

    def importing(self, name: str) -> set[str]:
        """The files, other than a `setup.py`, with an import of `name` (see `_imports`)."""
        needle = name.encode()
        pattern = _imports(name)
        return {
            p
            for p, lines in self.imports.items()
            if needle in lines and not p.endswith("setup.py") and pattern.search(lines)
        }


def _import_lines(text: bytes) -> bytes:
    """The lines of `text` that contain `import`, whole, joined by newlines: a line start
    there is one in `text`, so a pattern that stays on one line and needs `import` matches
    one exactly when it matches the other."""
    find = text.find
    at = find(b"import")
    if at < 0:
        return b""
    lines = []
    while at >= 0:
        end = find(b"\n", at)
        if end < 0:
            end = len(text)
        lines.append(text[text.rfind(b"\n", 0, at) + 1 : end])
        at = find(b"import", end)
    return b"\n".join(lines)


def _is_script(path: str, text: bytes) -> bool:
    """A file run as a program: a `__main__` guard, or argparse or a loop at module level in a
    file that is no package's module; or a test, benchmark or example by its name or folder."""
    if is_driver_path(path) or _MAIN_GUARD.search(text):
        return True
    return not _in_package(path) and bool(_TOP_LEVEL_RUN.search(text))


def _in_package(path: str) -> bool:
    import os

    return os.path.exists(os.path.join(os.path.dirname(path) or ".", "__init__.py"))


def harness_built(paths: Iterable[str]) -> tuple[frozenset[str], frozenset[str]]:
    """CUDA sources of a PyTorch extension whose every Python user in the checked tree is a
    script (see `_is_script`): their ops are called only by a benchmark or experiment that
    checks their outputs itself. A source's builders are the `setup.py` (with a
    `CUDAExtension`) of its folder or one above (up to three levels), and the Python files
    there that `load(...)` it by name; its users are the loading files and the files importing
    a module the `setup.py` names (a packaged module nothing in the tree imports is for users
    out of sight: not a harness). A user that is a plain module outside any package (a
    `tools/utils.py` helper) stands for the files importing it. No builder or no user found:
    not a harness. Returns (harness sources, those whose users never mention a stream)."""
    import os

    tree = _PyTree()
    out: set[str] = set()
    streamless: set[str] = set()
    for path in paths:
        if not path.endswith((".cu", ".cpp", ".cc", ".cxx")):
            continue
        path = path.replace("\\", "/")
        folder, _, base = path.rpartition("/")
        ancestors = [folder]
        while len(ancestors) < 4 and "/" in ancestors[-1]:
            ancestors.append(ancestors[-1].rpartition("/")[0])
        if len(ancestors) < 4 and ancestors[-1] and not os.path.isabs(ancestors[-1]):
            ancestors.append("")
        names: list[str] = []
        root = None
        for up in ancestors:
            setup = read_side(os.path.join(up or ".", "setup.py"), 1 << 20)
            if setup is None:
                continue
            if _SETUP_BUILDS.search(setup):
                names = [m.decode().rpartition(".")[2] for m in _EXTENSION_NAME.findall(setup)]
                root = up
                if not names:
                    root = None  # a name the text does not show: its users cannot be found
                    names = ["\0"]
                break
        if names == ["\0"]:
            continue
        # the loading scripts are beside the source or up to two folders above it
        scope = root if root is not None else ancestors[min(2, len(ancestors) - 1)]
        py = tree.under(scope)
        quoted = [q + base.encode() + q for q in (b'"', b"'")] + [b"/" + base.encode()]
        users = {
            p for p, t in py.loaders.items() if _LOADS.search(t) and any(q in t for q in quoted)
        }
        importers: set[str] = set()
        for name in names:
            importers |= py.importing(name)
        users |= importers
        if not users or (root is not None and not importers):
            # (a packaged module nothing in the tree imports is for users out of sight)
            continue
        # a helper module outside any package stands for the files importing it
        shown: set[str] = set()
        for user in users:
            if _is_script(user, py.text(user)) or _in_package(user):
                shown.add(user)
                continue
            stem = user.rpartition("/")[2][: -len(".py")]
            shown |= (py.importing(stem) - {user}) or {user}
        if all(_is_script(u, py.text(u)) and not _library_module(u) for u in shown):
            out.add(path)
            if not any(_STREAMS.search(py.text(u)) for u in shown | users):
                streamless.add(path)
    return frozenset(out), frozenset(streamless)


def _library_module(path: str) -> bool:
    """A package's module that is no test or example (its `__main__` guard is a demo)."""
    return _in_package(path) and not is_driver_path(path)
