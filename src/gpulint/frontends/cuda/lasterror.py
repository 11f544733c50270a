"""Whether the error a launch left behind is read after it: a later unconditional
check of the last error in the function, and the functions that launch and then check
(launch helpers)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tree_sitter import Node

from gpulint.frontends import MemoKey
from gpulint.frontends.cuda.checknames import (
    CHECK_WORDS,
    LAST_ERROR_CHECKS,
    is_check_name,
    last_error_checks,
)
from gpulint.frontends.cuda.syntax import CALLED, function_name

if TYPE_CHECKING:
    from gpulint.frontends.cuda.file import CudaFile


_LAUNCH_HELPERS: MemoKey[tuple[set[str], set[str]]] = MemoKey("cuda.launch_helpers")


# (names, their pattern, where the file's last mention of one starts)
_LAST_ERROR_NAMES: MemoKey[tuple[frozenset[str], re.Pattern[bytes] | None, int]] = MemoKey(
    "cuda.last_error_names"
)
# Where a check that sits later in the function may not run.
_CONDITIONAL = frozenset(
    {
        "switch_statement",
        "case_statement",
        "conditional_expression",
        "lambda_expression",
        "catch_clause",
        "preproc_if",
        "preproc_ifdef",
        "preproc_else",
        "preproc_elif",
    }
)


def _last_error_names(file: CudaFile) -> tuple[frozenset[str], re.Pattern[bytes] | None, int]:
    def compute():
        names = LAST_ERROR_CHECKS | last_error_checks(file.data) | file.project.last_error_checks
        pattern = re.compile(
            rb"\b(" + b"|".join(re.escape(n.encode()) for n in sorted(names)) + rb")\b"
        )
        last = -1
        for m in pattern.finditer(file.data):
            last = m.start()
        return names, pattern, last

    return file.memo.get(_LAST_ERROR_NAMES, compute)


def last_error_checked_after(file: CudaFile, call, function) -> bool:
    """A check of the last error (`cudaGetLastError`, `C10_CUDA_KERNEL_LAUNCH_CHECK`, the
    project's own, see `last_error_checks`) runs after `call` on the same straight-line path
    of `function`: in a later statement of a block that holds the call, not inside a branch
    (`if`, `switch`, `#ifdef`) of its own. Loops around either are accepted."""
    _, pattern, last = _last_error_names(file)
    if pattern is None or last < call.end_byte:
        return False  # no check after it in the whole file
    blocks = file.memo.get(_CHECKED_BLOCKS, dict)
    node = call
    while node is not None and node != function:
        parent = node.parent
        if parent is None or parent.type == "lambda_expression":
            return False
        if parent.type == "compound_statement":
            # Once per block: where each statement starts, and the last that checks.
            found = blocks.get(parent.start_byte)
            if found is None:
                children = parent.named_children
                last = -1
                for i in range(len(children) - 1, -1, -1):
                    if children[i].type == "comment":
                        continue  # `// CHECK(cudaGetLastError());` commented out checks nothing
                    if _unconditional_check_in(file, children[i], pattern):
                        last = children[i].start_byte
                        break
                found = blocks[parent.start_byte] = last
            if found > node.start_byte:
                return True
        node = parent
    return False


_CHECKED_BLOCKS: MemoKey[dict[int, int]] = MemoKey("cuda.blocks_checked_last_error")


def _unconditional_check_in(file: CudaFile, statement, pattern: re.Pattern[bytes]) -> bool:
    text = file.data[statement.start_byte : statement.end_byte]
    for m in pattern.finditer(text):
        start = statement.start_byte + m.start()
        node = file.root.descendant_for_byte_range(start, statement.start_byte + m.end())
        if node is None:
            continue
        ok = True
        child = node
        for a in file.ancestors(node):
            if (
                a.type == "expression_statement"
                and m.group(1)
                in (
                    b"cudaGetLastError",
                    b"cudaPeekAtLastError",
                )
                and child.type == "call_expression"
                and child.parent == a
                and child.start_byte == start  # the bare call, not `CHECK(cudaGetLastError())`
            ):
                ok = False  # `cudaGetLastError();` clears the error, reports nothing
                break
            if a.type in _CONDITIONAL:
                ok = False
                break
            if a.type == "if_statement" and child != a.child_by_field_name("condition"):
                ok = False
                break
            if a == statement:
                break
            child = a
        if ok:
            return True
    return False


def checking_launchers(file: CudaFile, own: frozenset[str] | set[str] = frozenset()) -> set[str]:
    """Host functions of `file` that launch and then check (`launch_gemm(...)` whose body ends
    `CUDA_CHECK(cudaGetLastError())`): a call to one after an unchecked launch checks it too,
    since `cudaGetLastError` reports the last error of any earlier launch. Functions only,
    named once in the file (methods and overloads share names: not matched by name).
    `own`: the file's checking macros and helpers (`file_checks`)."""
    return launch_helpers(file, own)[0]


def launch_helpers(
    file: CudaFile, own: frozenset[str] | set[str] = frozenset()
) -> tuple[set[str], set[str]]:
    """(checking, checked): `checking_launchers`, and the functions whose own launch is
    checked in any way, also by its status (`CUDACHECK(cudaLaunchKernelEx(...))`). Once per
    file (with the `own` of the first call)."""
    return file.memo.get(_LAUNCH_HELPERS, lambda: _launch_helpers(file, own))


def _launch_helpers(file: CudaFile, own: frozenset[str] | set[str]) -> tuple[set[str], set[str]]:
    last: dict[int, Node] = {}  # function start -> its last launch
    status_checked: set[int] = set()
    functions = {}
    candidates = list(file.launches)
    if b"cudaLaunch" in file.data:  # (asking every call its name costs; most files have none)
        for call in file.all_calls:
            if (file.call_name(call) or "").startswith("cudaLaunch"):
                candidates.append(call)
    if not candidates:
        return set(), set()
    for launch in candidates:
        fn = file.enclosing_function(launch)
        if fn is None or file.is_device_function(fn) or file.macro_name(fn) is not None:
            continue
        if fn.start_byte not in last or last[fn.start_byte].end_byte < launch.end_byte:
            last[fn.start_byte] = launch
        functions[fn.start_byte] = fn
        if launch.parent is not None and launch.parent.type == "argument_list":
            outer = launch.parent.parent
            wrapper = file.call_name(outer) if outer is not None else None
            if is_check_name(wrapper) or wrapper in own:
                status_checked.add(fn.start_byte)
    checking, checked = set(), set()
    for start, launch in last.items():
        fn = functions[start]
        name = function_name(file, fn)
        if (
            not name
            or name == "main"
            or any(a.type == "field_declaration_list" for a in file.ancestors(fn))
        ):
            continue
        declarator = file.function_name_node(fn)
        inner = declarator.child_by_field_name("declarator") if declarator is not None else None
        if inner is None or inner.type not in ("identifier", "template_function"):
            continue  # `Cls::run` out of line: a method
        rest = file.data[launch.end_byte : fn.end_byte].decode("utf-8", "replace")
        if CHECK_WORDS.search(rest) or any(
            is_check_name(n) or n in own for n in CALLED.findall(rest)
        ):
            checking.add(name)
            checked.add(name)
        elif start in status_checked:
            checked.add(name)
    names: dict[str, int] = {}
    for fn in file.nodes("function_definition"):
        name = function_name(file, fn)
        if name in checked:
            names[name] = names.get(name, 0) + 1
    once = {n for n in checked if names.get(n, 0) <= 1}
    return {n for n in checking if n in once}, once
