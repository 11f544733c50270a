"""Checks compiled only into debug builds: the text a release build keeps (`#ifdef
DEBUG` branches and `if (getenv(...))` blocks dropped), and the checks found only outside it."""

from __future__ import annotations

import re

from gpulint.frontends.cuda.checknames import last_error_checks
from gpulint.frontends.cuda.syntax import braced, closing_paren

# -- checks compiled only into debug builds -------------------------------------------------------
_PREPROC_LINE = re.compile(rb"(?m)^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif)\b([^\n]*)")
_DEBUG_WORD = re.compile(rb"\b\w*DEBUG\w*\b")
_GETENV_NAME = re.compile(rb"\b([A-Za-z_]\w*)\s*=\s*(?:std\s*::\s*)?(?:secure_)?getenv\s*\(")
_IF_HEAD = re.compile(rb"\bif\s*\(")


def _debug_branch(kind: bytes, condition: bytes) -> bool | None:
    """Whether the first branch of `#<kind> <condition>` is compiled only into debug builds
    (True), only into release builds (False), or neither (None)."""
    words = _DEBUG_WORD.findall(condition)
    if not words:
        return None
    release = all(w == b"NDEBUG" for w in words)  # NDEBUG set = a release build
    negated = kind == b"ifndef" or b"!" in condition
    debug = (not negated) if not release else negated
    return debug


def release_text(data: bytes) -> bytes:
    """`data` with what only a debug build runs blanked (same length, newlines kept): the
    branches of `#ifndef NDEBUG`, `#ifdef DEBUG`, `#if defined(_DEBUG)`..., and the `if` blocks
    whose condition reads a variable set from `getenv` (`level = getenv("X_DEBUG_LEVEL")`):
    a release build run without that variable set never executes them."""
    out = bytearray(data)

    def blank(start: int, end: int) -> None:
        for i in range(start, end):
            if out[i] != 0x0A:
                out[i] = 0x20

    stack: list[tuple[bool | None, int]] = []  # (branch is debug-only, where the branch starts)
    for m in _PREPROC_LINE.finditer(data):
        kind, condition = m.group(1), m.group(2)
        if kind in (b"if", b"ifdef", b"ifndef"):
            stack.append((_debug_branch(kind, condition), m.end()))
        elif not stack:
            continue
        elif kind in (b"else", b"elif"):
            debug, start = stack.pop()
            if debug:
                blank(start, m.start())
            stack.append((None if debug is None or kind == b"elif" else not debug, m.end()))
        else:  # endif
            debug, start = stack.pop()
            if debug:
                blank(start, m.start())
    if b"getenv" in data:
        names = {m.group(1) for m in _GETENV_NAME.finditer(data)}
        # (one step on: `level = std::string(level_name)`)
        for m in re.finditer(rb"\b([A-Za-z_]\w*)\s*(?:=|\()\s*[^;]*?\b(\w+)\b[^;]*;", data):
            if m.group(2) in names:
                names.add(m.group(1))
        if names:
            gate = re.compile(rb"\b(?:" + b"|".join(re.escape(n) for n in names) + rb")\b")
            for m in _IF_HEAD.finditer(data):
                close = closing_paren(data, m.end() - 1)
                if close is None or not gate.search(data[m.end() : close]):
                    continue
                brace = data.find(b"{", close)
                if brace < 0 or data[close + 1 : brace].strip():
                    continue
                body = braced(data, brace)
                if body is not None:
                    blank(brace, brace + len(body))
    return bytes(out)


def debug_only_checks(data: bytes) -> frozenset[str]:
    """The last-error checks defined in `data` (`last_error_checks`) that read the error only in
    a debug build: every read sits under `#ifndef NDEBUG`/`#ifdef DEBUG`... or in an `if` gated
    by an environment variable, or they call only such checks (`#define sync_check()
    syncAndCheck(...)`). They cover a launch when enabled, but a project whose launches only
    they check has no release convention (GPU802/GPU812)."""
    found = last_error_checks(data)
    if not found:
        return frozenset()
    return found - last_error_checks(release_text(data))
