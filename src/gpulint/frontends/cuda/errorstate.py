"""The CUDA runtime's error state as the host code moves it: what records an error (a kernel
launch's pre-launch failure, a runtime call's own failure), what reads it (`cudaGetLastError`,
`cudaPeekAtLastError`, the check macros and helpers wrapping them) and what clears it: a bare
`cudaGetLastError();` statement reads the error, resets it to `cudaSuccess` and drops it, so a
failure recorded before it is lost, and a check after it sees success.

Facts only: which earlier launches and calls a bare clear swallows. Whether that is a finding
(and where the code is a program whose failures show anyway) is the rules' (GPU803).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpulint.frontends.cuda.callgraph import CALLED_BYTES, runs_after
from gpulint.frontends.cuda.checknames import (
    LAST_ERROR_CHECKS,
    defined_cuda_names,
    is_check_name,
    last_error_checks,
)
from gpulint.frontends.cuda.discarded import CORRUPTING
from gpulint.frontends.cuda.lasterror import last_error_checked_after
from gpulint.frontends.cuda.syntax import function_name

if TYPE_CHECKING:
    from tree_sitter import Node

    from gpulint.frontends.cuda.callgraph import CallSite
    from gpulint.frontends.cuda.file import CudaFile

# Words that say a clear is meant: `cudaGetLastError();  // reset the error state`.
_MEANT = re.compile(r"(?i)\b(clear|reset|ignor|discard|swallow|flush|expected|may fail|drop)")
# A status read in the text between a failure and the clear: a comparison with cudaSuccess, a
# `cudaError_t` kept, a read of the last error.
_STATUS_WORDS = re.compile(rb"\bcudaSuccess\b|\bcudaError(?:_t)?\b|\bcuda(?:Get|PeekAt)LastError\b")


# Why a launch or dropped call before a bare clear is not lost to it (`Swallowed.spared`).
STATUS_READ = "status-read"  # a status is read between them: the failure was seen
FAILURE_ALLOWED = "failure-allowed"  # the clear is the call's next statement: may fail


@dataclass(frozen=True)
class Swallowed:
    """What a bare `cudaGetLastError();` loses: the launches and the runtime calls (their
    status dropped) whose failure it reads and drops, in source order (empty when it loses
    nothing); the first check of the last error after it on its path, if any (it then sees
    success). `meant`: a comment at the clear says the reset is meant (nothing else is looked
    at); `spared`: why earlier launches or calls it would have lost are not lost (STATUS_READ,
    FAILURE_ALLOWED)."""

    lost: tuple[Node, ...]
    later_check: Node | None
    # the calls of the clear's function (other files' too) after which their caller checks the
    # last error: that check sees success as well (`checked_callers`)
    checked_callers: tuple[CallSite, ...] = ()
    meant: bool = False
    spared: frozenset[str] = frozenset()


def is_bare_clear(file: CudaFile, call: Node) -> bool:
    """`cudaGetLastError();` or `(void)cudaGetLastError();`: its result dropped, the error
    state reset."""
    if file.call_name(call) != "cudaGetLastError":
        return False
    parent = call.parent
    if parent is not None and parent.type == "cast_expression":
        parent = parent.parent
    return parent is not None and parent.type == "expression_statement"


def _dropped_corrupting_call(file: CudaFile, call: Node) -> bool:
    """A copy, memset, allocation, attribute or API launch used as a statement (status
    dropped), not a wrapper the project defines itself."""
    name = file.call_name(call)
    if not name or not CORRUPTING.match(name):
        return False
    parent = call.parent
    if parent is None or parent.type != "expression_statement":
        return False
    if name in file.project.defined or name in defined_cuda_names(file):
        return False
    return b"cudaMemcpyHostToHost" not in file.data[call.start_byte : call.end_byte]


def _reads_between(file: CudaFile, start: int, end: int) -> bool:
    """Whether the text between two points reads a CUDA status: a check macro or helper, a
    checking launcher, a comparison with `cudaSuccess`, a kept `cudaError_t`."""
    text = file.data[start:end]
    if _STATUS_WORDS.search(text):
        return True
    names = file.check_names | LAST_ERROR_CHECKS
    for m in CALLED_BYTES.finditer(text):
        name = m.group(1).decode("ascii", "replace")
        if name in names or is_check_name(name):
            return True
    return False


def _next_statement(node: Node) -> Node | None:
    sibling = node.next_named_sibling
    while sibling is not None and sibling.type == "comment":
        sibling = sibling.next_named_sibling
    return sibling


def swallowed(file: CudaFile, clear: Node) -> Swallowed | None:
    """For a bare clear (`is_bare_clear`) in host code: the kernel launches and dropped
    corrupting calls before it in its function whose failure nothing reads before the clear,
    and after which the clear always runs (a later statement of a block around them, not in
    a branch of its own). A dropped call counts only where a later check of the last error
    would have reported it (`last_error_checked_after`), which the clear defeats; one no
    check follows is a dropped status of its own. A dropped call whose next statement is the
    clear is left out: that is how code says "this call may fail, and that is fine"
    (`cudaHostRegister(...); cudaGetLastError();`). Nothing is lost (`lost` empty) where a
    comment at the clear says the reset is meant (`meant`); `spared` says which launches or
    calls were left out for a status read before the clear or a failure allowed. None outside
    host code."""
    function = file.enclosing_function(clear)
    if function is None or file.is_device_function(function) or file.broken(clear):
        return None
    if _MEANT.search(file.comment_before(clear, lines=1)):
        return Swallowed((), None, meant=True)
    statement = clear.parent
    if statement is not None and statement.type == "cast_expression":
        statement = statement.parent
    lost: list[Node] = []
    spared: set[str] = set()
    for call in file.all_calls:
        if call.end_byte > clear.start_byte:
            break
        if call.start_byte < function.start_byte or file.enclosing_function(call) != function:
            continue
        is_launch = file.launch_config(call) is not None
        if not is_launch and not _dropped_corrupting_call(file, call):
            continue
        if not is_launch and call.parent is not None and _next_statement(call.parent) == statement:
            # `cudaHostRegister(p, n, 0); cudaGetLastError();`: a failure allowed
            spared.add(FAILURE_ALLOWED)
            continue
        if not is_launch and not last_error_checked_after(file, call, function):
            continue  # no check would have read it anyway: the dropped status is the finding
        if _reads_between(file, call.end_byte, clear.start_byte):
            spared.add(STATUS_READ)
            continue
        if not runs_after(file, call, clear):
            continue
        lost.append(call)
    if not lost:
        return Swallowed((), None, spared=frozenset(spared))
    return Swallowed(
        tuple(lost),
        _later_check(file, clear, function),
        checked_callers(file, function),
        spared=frozenset(spared),
    )


def checked_callers(file: CudaFile, function: Node) -> tuple[CallSite, ...]:
    """The call sites of host function `function` (in any file of the checked tree) after
    which their caller checks the last error (`launch_foo(...); CHECK(cudaGetLastError());`),
    not by using the call's result: where `function` resets the error state, that check sees
    success. Empty for a name several functions share (the calls cannot be matched)."""
    name = function_name(file, function)
    if not name:
        return ()
    return tuple(s for s in file.project.clear_calls.get(name, ()) if s.checked and s.via)


def _later_check(file: CudaFile, clear: Node, function: Node) -> Node | None:
    """The first read of the last error after the clear in its function (it sees success):
    `cudaGetLastError()`/`cudaPeekAtLastError()` checked, or a check that reads it."""
    names = LAST_ERROR_CHECKS | file.project.last_error_checks | last_error_checks(file.data)
    for call in file.all_calls:
        if call.start_byte <= clear.end_byte or call.start_byte >= function.end_byte:
            continue
        if is_bare_clear(file, call):
            continue
        name = file.call_name(call) or ""
        if name in names:
            if file.enclosing_function(call) == function and runs_after(file, clear, call):
                return call
    return None
