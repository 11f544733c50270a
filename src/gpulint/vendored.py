"""Vendored code: someone else's files copied into a project, recognised where no folder name
(`third_party/`, `vendor/`: `config.DEFAULT_EXCLUDE`) says so. Their maintainers do not patch
them, so gpulint leaves them alone by default (`skip-vendored = false`, `--no-skip-vendored`
checks them), as build tools and formatters leave vendored trees alone.

Two facts, both conservative: a project's own file is never skipped for carrying the project's
own notice, and where the project's identity is unknown nothing is skipped on a header.

- A **copied file**: its header (the leading comment block or module docstring) carries a
  copyright notice whose holder is none of the project's (its LICENSE, COPYING or NOTICE at the
  configuration root or above it, up to the repository's top, and its `pyproject.toml` authors),
  and either names another licence than the project's (an Apache header in an MIT project) or
  says it is a copy of another repository (`copied from https://github.com/...`). A foreign
  holder under the project's own licence is a contributor's notice, not a copy; a "copy from
  <url>" line with no foreign notice is the project's own derivative (often much modified),
  not a copy. A Python file that imports the project's own packages is part of it.
- A **copied package**: a folder below the root with its own licence file whose holder or
  licence differs from the project's, or a nested git checkout (a submodule). A folder whose
  `pyproject.toml` configures gpulint is a part of the project, never a copy; so is one whose
  licence text is the project's.

`Identity` is read once per root; the verdicts are strings saying why ("its header: Copyright
(c) 2017 Facebook, Inc. (Apache-2.0); this project: MIT, Jane Doe"), reported as notes.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

_HEAD_BYTES = 4096
_LICENCE_BYTES = 256 * 1024
_LICENCE_PREFIXES = ("license", "licence", "copying")
_NOTICE_PREFIXES = ("notice",)
# A year or a copyright sign must follow "copyright" (not "the above copyright notice").
_COPYRIGHT = re.compile(
    r"copyright\s*(?:\(c\)|©)\s*(?P<a>.*)|copyright\s+(?P<b>(?:\d{4}|\(c\)|©).*)", re.IGNORECASE
)
_YEARS = re.compile(r"^(?:(?:\(c\)|©|\d{4}(?:\s*[-–,]\s*(?:\d{4}|present))*)[\s,]*)+", re.I)
_HOLDER_END = re.compile(
    r"\ball rights reserved\b|\blicen[cs]ed\b|<[^>]*@|\(?https?://|\s-\s|\.\s|\.$", re.I
)
_WORDS = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "inc ltd llc corp corporation co company the and its affiliates affiliate all rights "
    "reserved authors author contributors contributor team gmbh limited copyright by of or "
    "org com www http https software foundation".split()
)
_PLACEHOLDER = re.compile(r"^\s*[\[<{]|^\s*(?:yyyy|year|name of|holder|owner|notice)", re.I)
_SPDX = re.compile(r"SPDX-License-Identifier:\s*([\w.+-]+)", re.IGNORECASE)
_FAMILIES = (  # (text, family): the first that occurs names the licence
    ("apache license", "Apache-2.0"),
    ("gnu lesser general public", "LGPL"),
    ("gnu affero general public", "AGPL"),
    ("gnu general public", "GPL"),
    ("mozilla public license", "MPL"),
    ("boost software license", "BSL"),
    ("permission is hereby granted, free of charge", "MIT"),
    ("mit license", "MIT"),
    ("redistribution and use in source and binary forms", "BSD"),
)
_COPIED = re.compile(
    r"\b(?:copied|taken|borrowed|vendored|copy)\s+(?:verbatim\s+)?from\b[^\n]*?"
    r"(?:https?://)?(?:www\.)?(?:github|gitlab|bitbucket)\.(?:com|org)/([\w.-]+/[\w.-]+)",
    re.IGNORECASE,
)
_REMOTE = re.compile(r"url\s*=\s*\S*?(?:github|gitlab|bitbucket)\.(?:com|org)[:/]([\w.-]+/[\w.-]+)")
_PACKAGE_FILES = frozenset({"setup.py", "pyproject.toml", "setup.cfg", "cmakelists.txt"})


@dataclass(frozen=True)
class Identity:
    """Who a project is, from its own files: copyright holders, licence, repositories."""

    holders: tuple[tuple[str, frozenset[str]], ...]  # (as written, significant words)
    licence: str | None
    licence_digest: str | None  # of the licence text, whitespace and case folded
    repos: frozenset[str]  # owner/name of its remotes, lower case
    packages: frozenset[str] = frozenset()  # its top-level Python packages

    def owns(self, shown: str, words: frozenset[str]) -> bool:
        """Whether the holder `shown` (its significant `words`) is one of the project's: a
        word in common, or the same letters run together ("Hugging Face", "HuggingFace")."""
        joined = _joined(shown)
        for mine, own in self.holders:
            if words & own:
                return True
            theirs = _joined(mine)
            if joined and theirs and (joined in theirs or theirs in joined):
                return True
        return False

    def describe(self) -> str:
        parts = [self.licence or "licence unknown"]
        parts += [shown for shown, _ in self.holders[:2]]
        return ", ".join(parts)


def _joined(holder: str) -> str:
    return "".join(w for w in _WORDS.findall(holder.lower()) if w not in _STOP)


def _fold(text: str) -> str:
    return " ".join(text.lower().split())


def licence_family(text: str) -> str | None:
    m = _SPDX.search(text)
    if m:
        spdx = m.group(1).upper()
        for prefix, family in (("APACHE", "Apache-2.0"), ("LGPL", "LGPL"), ("AGPL", "AGPL")):
            if spdx.startswith(prefix):
                return family
        for prefix in ("GPL", "MIT", "BSD", "MPL", "BSL"):
            if spdx.startswith(prefix):
                return prefix
        return spdx
    folded = _fold(text)
    return next((family for needle, family in _FAMILIES if needle in folded), None)


def holders(text: str) -> list[tuple[str, frozenset[str]]]:
    """The copyright holders a text names: (as written, significant words)."""
    out = []
    for line in text.splitlines():
        m = _COPYRIGHT.search(line)
        if not m:
            continue
        rest = _YEARS.sub("", (m.group("a") or m.group("b") or "").strip()).strip()
        rest = re.sub(r"^by\s+", "", rest, flags=re.I)
        end = _HOLDER_END.search(rest)
        holder = rest[: end.start()] if end else rest
        holder = holder.strip(" ,;:*#/\"'").strip()[:80]
        if not holder or _PLACEHOLDER.search(holder):
            continue
        words = frozenset(w for w in _WORDS.findall(holder.lower()) if w not in _STOP)
        words = frozenset(w for w in words if not w.isdigit())
        if words:
            out.append((holder, words))
    return out


def _read(path: str, limit: int) -> str | None:
    from gpulint.safeio import Unreadable, read_bytes

    try:
        return read_bytes(path, limit, [os.path.dirname(path)]).decode("utf-8", "replace")
    except (Unreadable, OSError):
        return None


def _named(directory: str, prefixes: tuple[str, ...]) -> list[str]:
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    return [os.path.join(directory, n) for n in names if n.lower().startswith(prefixes)]


@functools.cache
def identity(root: str) -> Identity:
    """The identity of the project at `root`: the first folder from `root` up to the
    repository's top that holds a licence file gives the licence; holders come from it, a
    NOTICE beside it and the `pyproject.toml` authors at `root`."""
    from gpulint.pathutil import repository_root

    top = repository_root(Path(root))
    found: list[tuple[str, frozenset[str]]] = []
    licence = digest = None
    directory = os.path.abspath(root)
    while True:
        texts = [t for p in _named(directory, _LICENCE_PREFIXES) if (t := _read(p, _LICENCE_BYTES))]
        if texts:
            licence = next((f for t in texts if (f := licence_family(t))), None)
            digest = hashlib.sha256(_fold(texts[0]).encode()).hexdigest()
            for text in texts:
                found += holders(text)
            for path in _named(directory, _NOTICE_PREFIXES):
                found += holders(_read(path, _LICENCE_BYTES) or "")
            break
        parent = os.path.dirname(directory)
        if top is None or directory == str(top) or parent == directory:
            break
        directory = parent
    pyproject = _read(os.path.join(root, "pyproject.toml"), _LICENCE_BYTES)
    if pyproject:
        for name in re.findall(r"""\bname\s*=\s*["']([^"']+)["']""", pyproject):
            words = frozenset(w for w in _WORDS.findall(name.lower()) if w not in _STOP)
            if words:
                found.append((name, words))
    repos: set[str] = set()
    if top is not None:
        config = _read(os.path.join(top, ".git", "config"), _LICENCE_BYTES) or ""
        repos = {r.lower().removesuffix(".git") for r in _REMOTE.findall(config)}
        repos.add(f"*/{top.name.lower()}")
    packages = set()
    for base in (root, os.path.join(root, "src")):
        try:
            names = os.listdir(base)
        except OSError:
            continue
        packages |= {n for n in names if _is_package(os.path.join(base, n))}
    return Identity(tuple(found), licence, digest, frozenset(repos), frozenset(packages))


def _is_package(path: str) -> bool:
    """A folder Python imports by name: one with `__init__.py`, or a namespace package (a
    folder of modules)."""
    try:
        return os.path.isdir(path) and any(n.endswith(".py") for n in os.listdir(path))
    except OSError:
        return False


def header(text: str) -> str:
    """The leading comment block or module docstring of a source file."""
    lines: list[str] = []
    quote: str | None = None
    block = False
    for raw in text.splitlines()[:80]:
        line = raw.strip()
        if quote is not None:
            lines.append(line)
            if quote in line:
                quote = None
            continue
        if block:
            lines.append(line)
            if "*/" in line:
                block = False
            continue
        if not line or line.startswith(("#", "//", "*")):
            lines.append(line)
        elif line.startswith("/*"):
            lines.append(line)
            block = "*/" not in line
        elif line[:3] in ('"""', "'''") or line[:4].lower() in ('r"""', "r'''"):
            opener = line[:3] if line[:3] in ('"""', "'''") else line[1:4]
            lines.append(line)
            quote = None if opener in line[line.index(opener) + 3 :] else opener
        else:
            break
    return "\n".join(lines)


def _own_repo(slug: str, ident: Identity) -> bool:
    slug = slug.lower().removesuffix(".git")
    name = slug.split("/")[-1]
    return slug in ident.repos or f"*/{name}" in ident.repos


def header_copy(data: bytes, ident: Identity) -> str | None:
    """Why a file whose bytes start with `data` is a copy of another project's, or None."""
    first = data[:_HEAD_BYTES]
    if b"opyright" not in first and b"OPYRIGHT" not in first:
        return None  # no notice at all (most files): nothing to read further
    head = header(first.decode("utf-8", "replace"))
    named = holders(head)
    if not named or any(ident.owns(shown, words) for shown, words in named):
        return None  # no notice, or the project's own (a contributor's beside it, at most)
    if not ident.holders or ident.licence_digest is None:
        return None  # who the project is is unknown (no licence file): nothing is foreign
    holder = named[0][0]
    copied = next((s for s in _COPIED.findall(head) if not _own_repo(s, ident)), None)
    family = licence_family(head)
    if not copied and (family is None or ident.licence is None or family == ident.licence):
        return None  # a foreign notice under the project's licence: a contributor's
    if _derivative(head):
        return None  # "Modified from X" above X's notice: the project's own reworking of it
    if _imports_project(data, ident):
        return None  # started as a copy, now wired into the project: its maintainers keep it
    if copied:
        return (
            f"its header: Copyright {holder}, a copy of {copied}; this project: {ident.describe()}"
        )
    return f"its header: Copyright {holder} ({family}); this project: {ident.describe()}"


_DERIVED = re.compile(
    r"\b(?:modified|adapted|derived|ported|rewritten|reworked)\s+(?:\w+\s+)?from\b|\bbased\s+on\b",
    re.IGNORECASE,
)


def _derivative(head: str) -> bool:
    """The header says the file was reworked from another project's: before the first
    copyright notice (the reworking's author wrote that line, not the original's), or anywhere
    with the source's address after it ("modified from" and a URL). Not the original's own
    history ("It has been modified from its original forms" of a copied model file)."""
    m = _COPYRIGHT.search(head)
    for d in _DERIVED.finditer(head):
        if m is None or d.start() < m.start() or _SOURCE_URL.match(head, d.end()):
            return True
    return False


# The address of the source a "modified from" names, right after it (not a licence's address).
_SOURCE_URL = re.compile(
    r"[^\n]{0,40}?\n?[#/*\s]{0,8}https?://(?!(?:www\.)?(?:apache\.org|opensource\.org|gnu\.org))",
    re.IGNORECASE,
)


_IMPORT = re.compile(rb"^[ \t]*(?:from|import)[ \t]+([A-Za-z_]\w*)", re.MULTILINE)


def _imports_project(data: bytes, ident: Identity) -> bool:
    """A Python file that imports the project's own packages is part of it, whatever its header
    says (a model file adapted to the project's kernels)."""
    if not ident.packages:
        return False
    return any(m.decode() in ident.packages for m in _IMPORT.findall(data))


def package_copy(directory: str, names: list[str], ident: Identity) -> str | None:
    """Why the folder `directory` (whose entries are `names`) is a copied package, or None."""
    lowered = {n.lower() for n in names}
    if ".git" in lowered:
        return "a nested git repository (a submodule): another project's checkout"
    licences = [n for n in names if n.lower().startswith(_LICENCE_PREFIXES)]
    if not licences or ident.licence_digest is None:
        return None  # no licence of its own, or the project has none to tell it from
    if "pyproject.toml" in lowered:
        config = _read(os.path.join(directory, "pyproject.toml"), _LICENCE_BYTES) or ""
        if re.search(r"^\s*\[tool\.gpulint[\].]", config, re.MULTILINE):
            return None  # a part of the project with its own gpulint configuration
    text = _read(os.path.join(directory, licences[0]), _LICENCE_BYTES)
    if not text:
        return None
    if ident.licence_digest == hashlib.sha256(_fold(text).encode()).hexdigest():
        return None  # the project's own licence, repeated
    named = holders(text)
    if any(ident.owns(shown, words) for shown, words in named):
        return None
    packaged = " and a package file" if lowered & _PACKAGE_FILES else ""
    if named and ident.holders:
        return (
            f"its own {licences[0]}{packaged} (Copyright {named[0][0]}); "
            f"this project: {ident.describe()}"
        )
    family = licence_family(text)
    if family and ident.licence and family != ident.licence:
        return f"its own {licences[0]}{packaged} ({family}); this project: {ident.describe()}"
    return None
