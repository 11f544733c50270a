"""Shapes of CUDA source the fact modules share: a function's name, code after a call on
every path, the `#if`/`#else` chain a branch belongs to, text with strings and comments blanked,
braced and parenthesised spans, the calls a text makes, and the folders above a path."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpulint.frontends.cuda.file import CudaFile


CALLED_TEXT = re.compile(rb"\b([A-Za-z_]\w*)\s*\(")


def braced(data: bytes, start: int, limit: int = 4000, max_lines: int | None = 40) -> bytes | None:
    """The `{...}` block opening at `start`; None past `limit` bytes or `max_lines` lines (by
    default a small helper: a long function that reads the error somewhere is not a check)."""
    depth = 0
    end = min(len(data), start + limit)
    for i in range(start, end):
        c = data[i]
        if c == 0x7B:
            depth += 1
        elif c == 0x7D:
            depth -= 1
            if depth == 0:
                body = data[start : i + 1]
                if max_lines is not None and body.count(b"\n") > max_lines:
                    return None
                return body
    return None


def function_name(file: CudaFile, function) -> str | None:
    """The unqualified name of a function definition (`ns::Cls::run` -> `run`, `~Buf` kept)."""
    macro = file.macro_name(function)
    if macro is not None:
        return macro
    declarator = file.function_name_node(function)
    inner = declarator.child_by_field_name("declarator") if declarator is not None else None
    if inner is None:
        return None
    return file.node_text(inner).split("::")[-1].strip() or None


CALLED = re.compile(r"\b([A-Za-z_]\w*)\s*\(")


def closing_paren(data: bytes, start: int, limit: int = 600) -> int | None:
    depth = 0
    for i in range(start, min(len(data), start + limit)):
        if data[i] == 0x28:
            depth += 1
        elif data[i] == 0x29:
            depth -= 1
            if depth == 0:
                return i
    return None


STRINGS_AND_COMMENTS = re.compile(
    rb'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/', re.S
)


def blank_strings_and_comments(data: bytes) -> bytes:
    """`data` with its string and character literals and comments blanked: same length, the
    newlines kept (a commented-out `// CHECK(cudaGetLastError());` is no call)."""
    return STRINGS_AND_COMMENTS.sub(lambda m: re.sub(rb"[^\n]", b" ", m.group(0)), data)


PREPROC_BRANCHES = ("preproc_if", "preproc_ifdef", "preproc_elif", "preproc_else")


def on_path_after(file: CudaFile, call, later, branches, variant=lambda a: False) -> bool:
    """`later` runs whenever `call` has run: it sits in a statement after the one holding
    `call` in a block around `call`, not inside a node of `branches` of its own (loops are
    accepted), unless `variant` says that branch runs anyway."""
    around = {}
    node = call
    for a in file.ancestors(call):
        if a.type == "compound_statement":
            around[a.start_byte, a.end_byte] = node.start_byte
        if a.type == "function_definition":
            break
        node = a
    node = later
    for a in file.ancestors(later):
        if a.type in branches and not variant(a):
            return False
        key = (a.start_byte, a.end_byte)
        if a.type == "compound_statement" and key in around:
            return node.start_byte > around[key]
        if a.type == "function_definition":
            return False
        node = a
    return False


def preproc_chain_top(branch):
    """The `#if`/`#ifdef` that opens the chain `branch` (an `#elif`/`#else`) belongs to."""
    top = branch
    while (
        top.parent is not None
        and top.parent.type in PREPROC_BRANCHES
        and (top.parent.child_by_field_name("alternative") == top)
    ):
        top = top.parent
    return top


def folders_of(path: str) -> list[str]:
    """The folders above `path`, nearest first, up to the top one of the tree (not "")."""
    parts = path.replace("\\", "/").split("/")[:-1]
    return ["/".join(parts[:i]) for i in range(len(parts), 0, -1)]
