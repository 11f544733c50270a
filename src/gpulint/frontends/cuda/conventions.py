"""How a CUDA tree checks errors: where a function's last launch check ends, which checks follow
a launch or call, the checking macros the tree defines, and the counts of its convention
(library launches checked and not, runtime calls whose status is used or discarded, per kind
and per folder). Counts only: what makes a convention is judged in rules/_cuda_conventions.py."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from gpulint.frontends import MemoKey
from gpulint.frontends.cuda.callgraph import CALLED_BYTES
from gpulint.frontends.cuda.checknames import (
    checks_library_status,
    is_check_name,
    last_error_checks,
)
from gpulint.frontends.cuda.discarded import api_kind
from gpulint.frontends.cuda.harness import MAIN_BYTES
from gpulint.frontends.cuda.syntax import folders_of
from gpulint.source import is_driver_path

if TYPE_CHECKING:
    from tree_sitter import Node

    from gpulint.frontends.cuda.file import CudaFile
    from gpulint.frontends.cuda.project import CudaProject

LAST_CHECK_END: MemoKey[dict[tuple[int, int, tuple[str, ...]], int]] = MemoKey(
    "cuda.last_check_end"
)


def last_check_end(file: CudaFile, scope: Node, configured: tuple[str, ...] = ()) -> int:
    """Byte offset just past the last launch check in `scope` (a function, or the file): -1
    when none. The text, not the tree: a check inside a region tree-sitter could not parse
    still counts. Computed once per scope."""
    cache = file.memo.get(LAST_CHECK_END, dict)
    key = (scope.start_byte, scope.end_byte, tuple(configured))
    found = cache.get(key)
    if found is None:
        found = -1
        names = file.check_names
        text = file.data[scope.start_byte : scope.end_byte]
        for m in CALLED_BYTES.finditer(text):
            name = m.group(1).decode("ascii", "replace")
            if (is_check_name(name, configured) or name in names) and not checks_library_status(
                name, text[m.end() : m.end() + 24]
            ):
                found = m.end()
        # A checking launcher called with template arguments (`launch<C, G, k<true>>(g)`).
        for name in file.checking_launchers() | (
            file._project.checking if file._project is not None else frozenset()
        ):
            for m in re.finditer(rb"\b" + re.escape(name.encode()) + rb"\s*[<(]", text):
                found = max(found, m.end())
        for name in configured:
            at = text.rfind(name.encode())
            if at >= 0:
                found = max(found, at + len(name))
        found = scope.start_byte + found if found >= 0 else -1
        cache[key] = found
    return found


def status_checked(file: CudaFile, call: Node) -> bool:
    """The call's result is checked where it is made: `CUDA_CHECK(launch(...))`,
    `if (launch(...) != cudaSuccess)`, `cudaError_t e = launch(...)` (a launcher that returns
    `cudaGetLastError()`). Returning or storing a tensor is not a check."""
    node = call
    for a in file.ancestors(call):
        if a.type in _STATEMENT_CONTAINERS_OR_FUNCTION:
            break
        if a.type == "call_expression" and is_check_name(file.call_name(a)):
            return True
        node = a
    return "cudaSuccess" in file.node_text(node) or "cudaError" in file.node_text(node)


_STATEMENT_CONTAINERS_OR_FUNCTION = {
    "compound_statement",
    "translation_unit",
    "function_definition",
    "lambda_expression",
}


def checks_after(
    file: CudaFile, scope: Node | None, node: Node, configured: tuple[str, ...] = ()
) -> set[str]:
    """The names of the launch checks after `node` in `scope` (as `last_check_end` finds
    them): which checks cover it, for the project's convention (a debug-only one is none)."""
    if scope is None:
        return set()
    names = file.check_names
    text = file.data[node.end_byte : scope.end_byte]
    found = {
        n
        for m in CALLED_BYTES.finditer(text)
        if is_check_name(n := m.group(1).decode("ascii", "replace"), configured) or n in names
    }
    for name in file.checking_launchers() | (
        file._project.checking if file._project is not None else frozenset()
    ):
        if re.search(rb"\b" + re.escape(name.encode()) + rb"\s*[<(]", text):
            found.add(name)
    found.update(n for n in configured if n.encode() in text)
    return found


def _release_checked(via: str, debug: frozenset[str]) -> bool:
    """A launch or call checked by the checks named in `via` (comma-joined) is checked in a
    release build: one of them is not debug-only (no names: checked by its status)."""
    return not via or not debug or any(n not in debug for n in via.split(","))


def launch_checked_in(
    file: CudaFile, launch: Node, function: Node, configured: tuple[str, ...] = ()
) -> bool:
    """A launch check follows `launch` in `function`."""
    return bool(last_check_end(file, function, configured) > launch.end_byte)


def count_convention(
    project: CudaProject,
    facts_by_path: dict[str, dict[str, Any]],
    skip: frozenset[str] = frozenset(),
) -> None:
    """The project's launch-checking convention and its per-kind runtime-call counts. A
    launcher's unchecked launches count as checked when library callers are found and every
    one of them checks after the call, or is checked by its own callers. `skip`: files that are programs' code (a
    harness header, a file including its driver)."""
    checked = total = debug_checked = 0
    checking_files: list[int] = []  # the launches of each file with a checked one
    api: dict[str, list[int]] = {}
    folders: dict[str, tuple[int, int]] = {}
    by_callers: dict[str, bool] = {}  # launcher -> every (library) caller checks
    by_callers_debug: dict[str, bool] = {}  # ... counting debug-only checks too
    debug = project.debug_checks
    for path, facts in facts_by_path.items():
        if path.replace("\\", "/") in skip:
            continue
        before, before_total = checked, total
        counts = facts.get("launch_counts", {})
        vias = facts.get("launch_checks", {})
        for name, (here, unchecked) in counts.items():
            total += here + unchecked
            # launches checked in their function only by debug-only checks
            only_debug = sum(
                c for v, c in vias.get(name, {}).items() if not _release_checked(v, debug)
            )
            checked += here - only_debug
            debug_checked += only_debug
            if unchecked and name in project.launchers:
                if _checked_by_callers(project, name, by_callers):
                    checked += unchecked
                elif debug and _checked_by_callers(project, name, by_callers_debug, release=False):
                    debug_checked += unchecked
        if checked > before:
            checking_files.append(total - before_total)
        for kind, (used, dropped) in facts.get("api_counts", {}).items():
            pair = api.setdefault(kind, [0, 0])
            pair[0] += used
            pair[1] += dropped
        add_folder_counts(folders, path, facts.get("api_counts", {}))
    if not project.reads_last_error:
        # A tree that never reads the last error checks no launch, whatever statuses it
        # checks after them (tiny-cuda-nn: CUDA_CHECK_THROW on copies, CUBLAS_CHECK_THROW).
        checked = debug_checked = 0
    project.launches_checked, project.launches_total = checked, total
    project.launches_debug_checked = debug_checked
    project.launches_beside_one_checking_file = (
        total - checking_files[0] if len(checking_files) == 1 else 0
    )
    project.api = {k: (u, d) for k, (u, d) in api.items()}
    project.api_folders = folders


def add_folder_counts(
    folders: dict[str, tuple[int, int]], path: str, counts: dict[str, list[int]]
) -> None:
    """Add a file's per-kind [used, discarded] counts to every folder above it."""
    for kind, (used, dropped) in counts.items():
        if used or dropped:
            for folder in folders_of(path):
                have = folders.get(f"{folder}:{kind}", (0, 0))
                folders[f"{folder}:{kind}"] = (have[0] + used, have[1] + dropped)


def _checked_by_callers(
    project: CudaProject, name: str, memo: dict[str, bool], depth: int = 0, release: bool = True
) -> bool:
    """Library callers of `name` are found and each checks after the call, or is itself
    checked by its callers (three levels up). By name, once per name: a count, cheaper than
    `unchecked_caller`'s walk for a finding (seconds on a large tree). `release`: leave out
    the checks compiled only into debug builds (`project.debug_checks`)."""
    if name in memo:
        return memo[name]
    memo[name] = False  # (a cycle checks nothing)
    sites = [s for s in project.callers(name) if s.caller != "main" and not is_driver_path(s.path)]
    drop = project.debug_checks if release else frozenset()
    found = bool(sites) and all(
        (s.checked and _release_checked(s.via, drop))
        or (
            depth < 3
            and bool(s.caller)
            and _checked_by_callers(project, s.caller, memo, depth + 1, release)
        )
        for s in sites
    )
    memo[name] = found
    return found


_RUNTIME_TEXT = re.compile(
    rb"\bcuda(?:Memcpy|Memset|Malloc|HostAlloc|HostRegister|FuncSetAttribute|DeviceSetLimit"
    rb"|LaunchKernel|LaunchCooperativeKernel|GraphLaunch)\w*(?=\s*\()"
)
_USED_AFTER = re.compile(rb"(?:[(,=!<>|&?:]|\breturn)\s*$")


def text_api_counts(data: bytes) -> dict[str, list[int]]:
    """`discarded.api_counts` of a file the index does not parse, read from its text: a call
    after `(`, `,`, `=`, an operator or `return` uses its status (`CHECK(cudaMemcpy(...))`),
    one starting a statement discards it, a `(void)` cast is neither. A file defining `main`
    (a standalone program) counts nothing."""
    out: dict[str, list[int]] = {}
    if MAIN_BYTES.search(data):
        return out
    for m in _RUNTIME_TEXT.finditer(data):
        kind = api_kind(m.group(0).decode("ascii"))
        if kind is None:
            continue
        before = data[max(0, m.start() - 24) : m.start()]
        if before.rstrip().endswith(b"(void)"):
            continue
        out.setdefault(kind, [0, 0])[0 if _USED_AFTER.search(before) else 1] += 1
    return out


_DEFINE = re.compile(rb"(?m)^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)((?:[^\n\\]|\\\n|\\)*)")
_CHECK_BYTES = re.compile(
    rb"\bcuda(GetLastError|PeekAtLastError|GetErrorString|GetErrorName)\b|\bcudaSuccess\b"
)


def macro_checks(files: Iterable[tuple[str, bytes]]) -> frozenset[str]:
    """The checking macros `#define`d anywhere in the checked tree, and the macros and helpers
    that read the last error (`checknames.last_error_checks`), read from the text."""
    return frozenset(
        name
        for _, data in files
        if b"#define" in data and b"cuda" in data
        for name in (*file_macro_checks(data), *last_error_checks(data))
    )


def file_macro_checks(data: bytes) -> list[str]:
    """Checking macros of a header, read from its text (headers are not parsed for this)."""
    return sorted(
        m.group(1).decode() for m in _DEFINE.finditer(data) if _CHECK_BYTES.search(m.group(2))
    )
