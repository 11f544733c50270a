"""What a discarded `cudaError_t` costs (corrupting results, an unreported status, or
nothing: teardown, validation, debug output, and which of those), the runtime call a statement
discards, and the project's checking convention per kind of runtime call."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpulint.frontends import MemoKey
from gpulint.frontends.cuda.checknames import (
    CHECK_WORDS,
    checks,
    defined_cuda_names,
    is_runtime_call,
)
from gpulint.frontends.cuda.lasterror import last_error_checked_after
from gpulint.frontends.cuda.syntax import CALLED, function_name

if TYPE_CHECKING:
    from gpulint.frontends.cuda.file import CudaFile


_API_COUNTS: MemoKey[dict[str, list[int]]] = MemoKey("cuda.api_counts")


# -- what a discarded cudaError_t costs ---------------------------------------------------------
# Calls whose failure leaves results silently wrong: memory that was never allocated or filled,
# a kernel that never ran, an attribute a later launch relies on.
CORRUPTING = re.compile(
    r"^cuda(Malloc|Memcpy|Memset|HostAlloc|HostRegister|HostGetDevicePointer|GetSymbolAddress"
    r"|FuncSetAttribute|DeviceSetLimit|LaunchKernel|LaunchCooperativeKernel|GraphLaunch"
    r"|GraphInstantiate|GraphExecUpdate|MemcpyToSymbol|MemcpyFromSymbol)\w*$"
)
# Calls that release what is no longer needed: their status matters at the end of a program
# only as a report of earlier failures.
TEARDOWN = re.compile(
    r"^cuda(Free\w*|\w*Destroy\w*|HostUnregister|DeviceReset|IpcCloseMemHandle|ProfilerStop"
    r"|GraphicsUnregisterResource|StreamEndCapture)$"
)
_TEARDOWN_FUNCTION = re.compile(
    r"(?i)(free|release|destroy|clean|teardown|tear_down|final|dispose|reset|close|deinit|"
    r"shutdown|dealloc|clear|uninit|exit|delete)"
)
_ERROR_CONDITION = re.compile(r"(?i)cudaSuccess|\berr|\bstat|fail|\bres|\bret")
# After these, a `main` is only tearing down: no more GPU work whose result could be wrong.
_GPU_WORK = re.compile(rb"<<<|cudaMemcpy|cudaMalloc|cudaMemset|cudaLaunch|cudaGraphLaunch")


# Why a dropped status loses nothing, or the call is not the runtime's (`Discard.spared`): the
# case that applied, for the rules to name where they stay silent.
VOID_CAST = "void-cast"  # `(void)cudaFree(p);`: dropped in so many words
METHOD = "method"  # `pool.cudaMalloc(...)`: a method, not the runtime
OWN_FUNCTION = "own-function"  # a function the file or project defines with a runtime-like name
DEVICE_CODE = "device-code"  # the device runtime (dynamic parallelism, cudaGraphSetConditional)
CHECKED_NEXT = "checked-next"  # the next statement checks: `getLastCudaError("...")`
LAST_ERROR_READ_LATER = "last-error-read-later"  # a read of the last error later on its path
HOST_TO_HOST = "host-to-host"  # `cudaMemcpyHostToHost`: nothing on the GPU to fail
TEST_VALIDATES = "test-validates"  # a test that validates its output after the call
VALIDATING_FUNCTION = "validating-function"  # `check_correctness`, `verify_output`
DEBUG_HELPER = "debug-helper"  # `print_*`, `dump_*`, `debug_*`
DEBUG_ONLY = "debug-only"  # compiled only in debug builds: `#ifndef NDEBUG`, `#ifdef MY_DEBUG`
TEARDOWN_CONTEXT = "teardown"  # a free or destroy in a destructor, cleanup, an error path
OUTPUT_READ_LATER = "output-read-later"  # a query whose output the code reads next


@dataclass(frozen=True)
class Discard:
    """A CUDA runtime call used as a statement, its `cudaError_t` dropped: its `name`, what
    dropping it costs (`grade`: "corrupting" when a failure leaves results wrong, "status" when
    it only goes unreported, None when nothing is lost or the call is not the runtime's), and,
    where `grade` is None, why (`spared`: one of the cases above)."""

    name: str
    grade: str | None
    spared: str | None = None


def discarded_status(file: CudaFile, call, name: str) -> str | None:
    """What dropping the status of runtime call `call` (an expression statement) costs:
    "corrupting", "status", or None when nothing is lost (`discard_cost` says why)."""
    return discard_cost(file, call, name)[0]


def discard_cost(file: CudaFile, call, name: str) -> tuple[str | None, str | None]:
    """(grade, spared) for dropping the status of runtime call `call` (an expression statement):
    grade "corrupting" (a failure leaves results wrong) or "status" (a failure goes unreported,
    nothing silently wrong) with spared None; or grade None when nothing is lost, spared saying
    why: the next statement checks, a later read of the last error reports it, it is teardown,
    validation or debug output, or the value it produces is read later (a failure shows in it)."""
    statement = call.parent
    if _checked_next(file, statement):
        return None, CHECKED_NEXT
    function = file.enclosing_function(call)
    if function is not None and last_error_checked_after(file, call, function):
        # `sync_check_cuda_error();` later on its path reports this failure too
        return None, LAST_ERROR_READ_LATER
    if (
        name.startswith("cudaMemcpy")
        and b"cudaMemcpyHostToHost" in file.data[call.start_byte : call.end_byte]
    ):
        return None, HOST_TO_HOST  # host memory to host memory: nothing on the GPU to fail
    if (
        file.is_test
        and function is not None
        and VALIDATES.search(file.data[call.end_byte : function.end_byte])
    ):
        return None, TEST_VALIDATES  # a test that validates its output: a failure fails it
    if function is not None and _VALIDATING.search(function_name(file, function) or ""):
        # `check_correctness`, `verify_output`: a failed copy shows as a mismatch
        return None, VALIDATING_FUNCTION
    if function is not None and _DEBUG_HELPER.search(function_name(file, function) or ""):
        return None, DEBUG_HELPER  # `print_global_mem`, `dump_tensor`: a debugging aid
    if _debug_only(file, call):
        return None, DEBUG_ONLY  # `#if DEBUG_GUARDS` / `#ifndef NDEBUG`: a diagnostic aid
    if TEARDOWN.match(name):
        if function is None or _teardown_context(file, call, function):
            return None, TEARDOWN_CONTEXT
        return "status", None
    if CORRUPTING.match(name):
        return "corrupting", None
    if function is not None and _output_read_later(file, call, function):
        # a query or an event: a failure shows in the value the code reads next
        return None, OUTPUT_READ_LATER
    return "status", None


# A function whose job is to compare results against a reference.
# (named by its verb first: `ml_dsa_verify` verifies a signature, its product)
_VALIDATING = re.compile(
    r"(?i)^(verif|validat|compar|check_?guard)|correctness|allclose|mismatch|check_?result"
)
# A debugging helper, named by what it does first: `print_global_mem`, `dump_tile`, `debug_*`.
_DEBUG_HELPER = re.compile(r"(?i)^(print|dump|debug)(_|[A-Z]|$)")
_DEBUG_MACRO = re.compile(r"\b\w*DEBUG\w*\b")


def _debug_only(file: CudaFile, node) -> bool:
    """`node` is compiled only in debug builds: in the first branch of `#if DEBUG_GUARD_SIZE > 0`,
    `#ifdef MY_DEBUG`, `#ifndef NDEBUG` (not in their `#else`)."""
    child = node
    for a in file.ancestors(node):
        if a.type in ("preproc_if", "preproc_ifdef"):
            alternative = a.child_by_field_name("alternative")
            if alternative is not None and child == alternative:
                child = a
                continue
            if a.type == "preproc_if":
                condition = file.node_text(a.child_by_field_name("condition"))
                names = _DEBUG_MACRO.findall(condition)
                if names and all(n != "NDEBUG" for n in names) and "!" not in condition:
                    return True
            else:
                name = file.node_text(a.child_by_field_name("name"))
                ifndef = file.node_text(a).startswith("#ifndef") or "ifndef" in a.children[0].type
                if name == "NDEBUG" and ifndef:
                    return True
                if name != "NDEBUG" and "DEBUG" in name and not ifndef:
                    return True
        child = a
    return False


def _next_statement(statement):
    sibling = statement.next_named_sibling
    while sibling is not None and sibling.type == "comment":
        sibling = sibling.next_named_sibling
    return sibling


def _checked_next(file: CudaFile, statement) -> bool:
    """The statement after the call checks the error (`getLastCudaError("...")`,
    `cudaCheckError();`, `if (cudaGetLastError() != cudaSuccess)`, a project macro)."""
    nxt = _next_statement(statement)
    if nxt is None:
        return False
    text = file.node_text(nxt)
    if CHECK_WORDS.search(text):
        return True
    for m in CALLED.finditer(text):
        if checks(m.group(1), file):
            return True
    return False


# A test validating its results after the GPU work (`validate(...)`, `ASSERT_NEAR`, `allclose`).
VALIDATES = re.compile(rb"(?i)validat|verif|compare|assert|expect_|allclose|check_result")


def _teardown_context(file: CudaFile, call, function) -> bool:
    name = function_name(file, function) or ""
    if name.startswith("~") or _TEARDOWN_FUNCTION.search(name):
        return True  # a destructor, `cleanup()`, `free_buffers()`
    for a in file.ancestors(call):
        if a is function:
            break
        if a.type == "if_statement":
            cond = a.child_by_field_name("condition")
            if cond is not None and _ERROR_CONDITION.search(file.node_text(cond)):
                return True  # an error path releasing what was allocated
        if a.type == "labeled_statement":
            return True  # `cleanup:` / `Error:` at the end of a function
    labels = file.data[function.start_byte : call.start_byte]
    if re.search(rb"(?m)^\s*[A-Za-z_]\w*:\s*$", labels) and b"goto" in labels:
        return True  # after the `cleanup:` label gotos jump to
    if name == "main" or name.endswith("_main") or name.startswith("main"):
        rest = file.data[call.end_byte : function.end_byte]
        return not _GPU_WORK.search(rest)  # the end of `main`
    return False


def _output_read_later(file: CudaFile, call, function) -> bool:
    args = call.child_by_field_name("arguments")
    if args is None:
        return False
    outputs = set()
    for arg in args.named_children:
        if arg.type == "pointer_expression" and file.node_text(arg).startswith("&"):
            outputs.add(file.node_text(arg.child_by_field_name("argument")).strip())
    rest = file.data[call.end_byte : function.end_byte].decode("utf-8", "replace")
    return any(
        re.search(rf"(?<![\w.]){re.escape(o)}(?!\w)", rest) for o in outputs if o.isidentifier()
    ) or any(o and not o.isidentifier() and o in rest for o in outputs)


def discarded_call(file: CudaFile, call) -> Discard | None:
    """The `Discard` of a call named like a CUDA runtime call that is used as a statement, its
    status dropped (see `discard_cost`), or `(void)`-cast; its grade None, with why, for a
    `(void)` cast, a method, a function the file or project defines itself, device code, and
    where nothing is lost. None for anything else: not named like the runtime, its status used."""
    name = file.call_name(call)
    if not name or not is_runtime_call(name):
        return None
    parent = call.parent
    if parent is not None and parent.type == "cast_expression" and _void_statement(file, parent):
        return Discard(name, None, VOID_CAST)  # `(void)cudaFree(p);`: dropped on purpose
    if parent is None or parent.type != "expression_statement":
        return None
    fn = call.child_by_field_name("function")
    if fn is not None and fn.type == "field_expression":
        return Discard(name, None, METHOD)  # obj.cudaMalloc(...): a method, not the runtime
    if name in file.project.defined or name in defined_cuda_names(file):
        return Discard(name, None, OWN_FUNCTION)  # the project's own, with a runtime-like name
    if file.is_device_function(file.enclosing_function(call)):
        return Discard(name, None, DEVICE_CODE)  # the device runtime (dynamic parallelism)
    grade, spared = discard_cost(file, call, name)
    return Discard(name, grade, spared)


def _void_statement(file: CudaFile, cast) -> bool:
    """`cast` is `(void)call` used as a statement."""
    statement = cast.parent
    kind = cast.child_by_field_name("type")
    return (
        statement is not None
        and statement.type == "expression_statement"
        and kind is not None
        and file.node_text(kind).strip() == "void"
    )


# -- the project's checking convention per kind of runtime call ---------------------------------
_API_KINDS = (
    ("attribute", re.compile(r"^cuda(FuncSetAttribute|DeviceSetLimit)")),
    ("copy", re.compile(r"^cudaMemcpy")),
    ("memset", re.compile(r"^cudaMemset")),
    ("alloc", re.compile(r"^cuda(Malloc|HostAlloc|HostRegister|HostGetDevicePointer|GetSymbol)")),
    ("launch", re.compile(r"^cuda(LaunchKernel|LaunchCooperativeKernel)")),
    ("graph", re.compile(r"^cudaGraph(Launch|Instantiate|ExecUpdate)")),
)


def api_kind(name: str) -> str | None:
    """The kind of a corrupting runtime call (GPU803): "copy", "memset", "alloc", "attribute",
    "launch", "graph"; None for other calls."""
    for kind, pattern in _API_KINDS:
        if pattern.match(name):
            return kind
    return None


def api_counts(file: CudaFile) -> dict[str, list[int]]:
    """Per kind of corrupting runtime call (`api_kind`), in the file's library code (tests and
    what standalone programs run left out): [status used, status discarded]. A use is a check macro
    around the call, a comparison, an assignment, a return; a discard is what GPU803 would
    report (a call checked by the next statement or a later last-error check counts as
    neither). Once per file."""
    return file.memo.get(_API_COUNTS, lambda: _api_counts(file))


def _api_counts(file: CudaFile) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    if file.is_test or b"cuda" not in file.data:
        return out
    for call in file.all_calls:
        name = file.call_name(call)
        kind = api_kind(name) if name and name.startswith("cuda") else None
        if kind is None or file.broken(call) or file.run_by_main(call):
            continue
        if file.is_device_function(file.enclosing_function(call)):
            continue
        parent = call.parent
        if parent is not None and parent.type == "expression_statement":
            # (as `discarded_call`, without the project: these counts are part of it)
            fn = call.child_by_field_name("function")
            if (fn is not None and fn.type == "field_expression") or name in defined_cuda_names(
                file
            ):
                continue
            if name and discarded_status(file, call, name) == "corrupting":
                out.setdefault(kind, [0, 0])[1] += 1
        elif parent is not None and parent.type != "cast_expression":  # (void) is a discard
            out.setdefault(kind, [0, 0])[0] += 1
    return out
