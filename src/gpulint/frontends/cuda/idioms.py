"""Names CUDA code uses for error checks and runtime calls, shared by the GPU80x rules."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tree_sitter import Node

from gpulint.frontends import MemoKey

if TYPE_CHECKING:
    from gpulint.frontends.cuda.file import CudaFile

# Once per file: the check macro the file wraps runtime calls in ("" where none), and the
# functions it defines itself under a `cuda` name.
_HOUSE_CHECK: MemoKey[str] = MemoKey("cuda.house_check_macro")
_DEFINED_CUDA: MemoKey[frozenset[str]] = MemoKey("cuda.defined_cuda_names")
_LAUNCH_HELPERS: MemoKey[tuple[set[str], set[str]]] = MemoKey("cuda.launch_helpers")
_API_COUNTS: MemoKey[dict[str, list[int]]] = MemoKey("cuda.api_counts")

# Calls that check (or fetch) the error a kernel launch left behind.
LAUNCH_CHECKS = frozenset(
    {
        "cudaGetLastError",
        "cudaPeekAtLastError",
        "C10_CUDA_KERNEL_LAUNCH_CHECK",
        "getLastCudaError",  # cuda-samples helper_cuda.h
        "CUDA_CHECK",
        "checkCudaErrors",
        "AT_CUDA_CHECK",
        "C10_CUDA_CHECK",
    }
)
# Macro/function names that wrap a CUDA call and check its status.
CHECK_MACROS = LAUNCH_CHECKS - {"cudaGetLastError", "cudaPeekAtLastError"}
# Project-local spellings: CUDA_CHECK_ERROR, CHECK_CUDA, cudaCheck, CUDACHECK, CUDA_SAFE_CALL...
_CHECKISH = re.compile(r"(?i)(cuda.*(check|safe|assert|call|try|ok)|(check|assert|try).*cuda)")

# CUDA runtime API functions returning cudaError_t (prefixes); error getters excluded.
RUNTIME_API = re.compile(
    r"^cuda(Malloc|Free|Memcpy|Memset|Memcpy2D|Memcpy3D|MemPrefetch|MemAdvise|Mem[A-Z]|Stream[A-Z]"
    r"|Event[A-Z]|Device[A-Z]|SetDevice|GetDevice|Graph[A-Z]|Func[A-Z]|Host[A-Z]|LaunchKernel|LaunchCooperative"
    r"|LaunchHostFunc|Array[A-Z]|Ipc[A-Z]|Import[A-Z]|DestroyExternal|SignalExternal|WaitExternal"
    r"|Profiler[A-Z]|Occupancy[A-Z]|PointerGetAttributes|ThreadExchange|CtxResetPersisting"
    r"|DriverGetVersion|RuntimeGetVersion|GetSymbol|CreateTextureObject|DestroyTextureObject"
    r"|CreateSurfaceObject|DestroySurfaceObject|UserObject[A-Z]|SetValidDevices|ChooseDevice|InitDevice"
    r"|GetDeviceCount|GetDeviceProperties)\w*$"
)
NOT_ERRORS = frozenset(
    {"cudaGetLastError", "cudaPeekAtLastError", "cudaGetErrorString", "cudaGetErrorName"}
)


def is_check_name(name: str | None, configured: tuple[str, ...] | list[str] = ()) -> bool:
    """A call that checks CUDA errors: a known idiom, a configured macro, or a project spelling."""
    if not name:
        return False
    if name in LAUNCH_CHECKS or name in configured:
        return True
    return bool(_CHECKISH.search(name)) and not RUNTIME_API.match(name)


# CUDA libraries whose calls return their own status (cublasStatus_t, cudnnStatus_t, ...): a
# check of one says nothing of an earlier kernel launch, whose error only the runtime's last
# error holds.
_LIBRARY = re.compile(r"(?i)(cublas|cudnn|cusparse|cufft|curand|cusolver|nccl|cutensor)")
_LIBRARY_CALL = re.compile(rb"(?i)\s*(cublas|cudnn|cusparse|cufft|curand|cusolver|nccl|cutensor)")


def checks_library_status(name: str, argument: bytes) -> bool:
    """A check call (`name(` followed by `argument`) that checks a CUDA library's status, not
    the runtime's: `CUBLAS_CHECK_THROW(cublasGemmEx(...))`, `CUDNN_CHECK(...)`."""
    return bool(_LIBRARY.search(name)) or bool(_LIBRARY_CALL.match(argument))


def is_runtime_call(name: str | None) -> bool:
    """A CUDA runtime API call returning cudaError_t. A project's own checking wrapper spelt
    like one (`cudaFreeCheck(p)`, `cudaMallocSafe`) is a check, not the runtime."""
    if not name:
        return False
    return (
        name not in NOT_ERRORS
        and bool(RUNTIME_API.match(name))
        and not _WRAPPER_SUFFIX.search(name)
    )


_WRAPPER_SUFFIX = re.compile(r"(?i)(check|checked|safe|or_die|ordie|assert|_ok)$")


# Calls that wrap a runtime call without checking it.
_NOT_CHECKS = frozenset({"static_cast", "reinterpret_cast", "void", "std", "move", "ignore"})


def house_check_macro(file: CudaFile, default: str | None = "CUDA_CHECK") -> str | None:
    """The check the file already wraps runtime calls in (`cudaCheck`, `gpuErrchk`), the most
    used one, the first seen on a tie; `default` where it wraps none. Fix suggestions use
    it so they read like the code around them (and compile: the file already uses it)."""
    return file.memo.get(_HOUSE_CHECK, lambda: _house_check_macro(file)) or default


def _house_check_macro(file: CudaFile) -> str:
    counts: dict[str, int] = {}  # insertion order breaks ties
    for call in file.nodes("call_expression"):
        args = call.child_by_field_name("arguments")
        inner = args.named_children if args is not None else []
        if len(inner) == 1 and inner[0].type == "call_expression":
            if (file.call_name(inner[0]) or "").startswith("cuda"):
                outer = file.call_name(call)
                if outer and not is_runtime_call(outer) and outer not in _NOT_CHECKS:
                    counts[outer] = counts.get(outer, 0) + 1
    # A general check (`CUDA_CHECK_THROW`) before a special one (`check_shmem_error`).
    general = {n: c for n, c in counts.items() if checks(n, file)}
    pool = general or counts
    return max(pool, key=pool.__getitem__) if pool else ""


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
_CHECK_WORDS = re.compile(
    r"\bcuda(GetLastError|PeekAtLastError|GetErrorString|GetErrorName)\b|\bcudaSuccess\b"
)


def check_names(file: CudaFile, configured=()) -> frozenset[str]:
    """Names that check CUDA errors in this file: the known idioms are matched by pattern
    (`is_check_name`); these are the file's and the project's own macros and small functions
    whose body checks (`#define SYNC_CHECK() { cudaError_t e = cudaGetLastError(); ... }`),
    and the configured `check-macros`."""
    return file.check_names | frozenset(configured)


def checks(name: str | None, file: CudaFile, configured=()) -> bool:
    return is_check_name(name, configured) or (name is not None and name in check_names(file))


def file_checks(file: CudaFile) -> set[str]:
    """Macros and functions defined in `file` whose body checks a CUDA error status."""
    out = set(last_error_checks(file.data))
    for node in file.nodes("preproc_function_def") + file.nodes("preproc_def"):
        value = node.child_by_field_name("value")
        macro = node.child_by_field_name("name")
        if value is not None and macro is not None and _CHECK_WORDS.search(file.node_text(value)):
            out.add(file.node_text(macro))
    for fn in file.nodes("function_definition"):
        body = fn.child_by_field_name("body")
        if body is None or body.end_point[0] - body.start_point[0] > 25:
            continue  # a small helper; a long function that checks somewhere is not a check
        text = file.node_text(body)
        if _CHECK_WORDS.search(text) and all(
            n in _CHECKER_CALLS or is_check_name(n) or n.startswith(("std", "cuda"))
            for n in _CALLED.findall(text)
        ):
            name = function_name(file, fn)
            if name:
                out.add(name)
    return out


# -- checks of the last error --------------------------------------------------------------------
# `cudaGetLastError` returns (and clears) the last error of any runtime call or launch: a check
# built on it also reports a failed copy or memset made before it.
_LAST_ERROR = re.compile(rb"\bcuda(?:GetLastError|PeekAtLastError)\s*\(")
# The runtime's last error read anywhere in a text: directly, or by a check that reads it.
_READS_LAST_ERROR = re.compile(
    rb"\b(?:cudaGetLastError|cudaPeekAtLastError|C10_CUDA_KERNEL_LAUNCH_CHECK|getLastCudaError)\b"
)


def reads_last_error(data: bytes) -> bool:
    """The text reads the runtime's last error somewhere, the only place a failed launch's
    error is kept (a later call's status check does not return a bad launch configuration)."""
    return bool(_READS_LAST_ERROR.search(data))


_FUNCTION_HEAD = re.compile(
    rb"\b([A-Za-z_]\w*)\s*\((?:[^;{}()]|\([^;{}()]*\))*\)\s*(?:const\s*)?(?:noexcept\s*)?\{"
)
_NOT_FUNCTIONS = frozenset({b"if", b"for", b"while", b"switch", b"catch", b"return", b"sizeof"})
_DEFINE_TEXT = re.compile(rb"(?m)^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)((?:[^\n\\]|\\\n|\\)*)")
_CALLED_TEXT = re.compile(rb"\b([A-Za-z_]\w*)\s*\(")
# Known checks of the last error (besides the project's own).
LAST_ERROR_CHECKS = frozenset(
    {"cudaGetLastError", "cudaPeekAtLastError", "C10_CUDA_KERNEL_LAUNCH_CHECK", "getLastCudaError"}
)


def last_error_checks(data: bytes) -> frozenset[str]:
    """Macros and small functions defined in `data` (text, parsed or not) that check the last
    error: the body reads `cudaGetLastError()`/`cudaPeekAtLastError()` (not as a bare statement,
    which only clears it), also under a debug flag or an environment switch (the project's
    chosen convention), and macros that expand to a call of one, two levels deep
    (`#define sync_check() syncAndCheck(__FILE__, __LINE__)`). No launching function: its
    check is GPU802's `checking_launchers`."""
    if not _LAST_ERROR.search(data):
        return frozenset()
    out: set[str] = set()
    for m in _FUNCTION_HEAD.finditer(data):
        name = m.group(1)
        if name in _NOT_FUNCTIONS:
            continue
        body = _braced(data, m.end() - 1)
        if body is not None and b"<<<" not in body and _reads_last_error(body):
            out.add(name.decode("ascii", "replace"))
    macros = [
        (m.group(1).decode("ascii", "replace"), m.group(2)) for m in _DEFINE_TEXT.finditer(data)
    ]
    for _ in range(3):  # a macro calling a macro calling the function
        for name, value in macros:
            if name not in out and (
                _reads_last_error(value)
                or any(c.decode("ascii", "replace") in out for c in _CALLED_TEXT.findall(value))
            ):
                out.add(name)
    return frozenset(out)


def _braced(data: bytes, start: int, limit: int = 4000) -> bytes | None:
    """The `{...}` block opening at `start`; None past `limit` bytes or 40 lines (a small
    helper; a long function that reads the error somewhere is not a check)."""
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
                return body if body.count(b"\n") <= 40 else None
    return None


def _reads_last_error(text: bytes) -> bool:
    for m in _LAST_ERROR.finditer(text):
        before = text[: m.start()].rstrip()
        after = text[m.end() :].lstrip()
        bare = (
            (not before or before[-1:] in b";{}")
            and after.startswith(b")")
            and (after[1:].lstrip().startswith(b";"))
        )
        if not bare:
            return True
    return False


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
        if _CHECK_WORDS.search(rest) or any(
            is_check_name(n) or n in own for n in _CALLED.findall(rest)
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


# What a checking helper calls besides the error getters: it reports and stops.
_CHECKER_CALLS = frozenset(
    "if while for switch return sizeof printf fprintf puts fputs exit abort assert throw "
    "snprintf sprintf TORCH_CHECK AT_ERROR static_cast std runtime_error string "
    "to_string cerr fflush __LINE__ __FILE__ logic_error".split()
)


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


def discarded_status(file: CudaFile, call, name: str) -> str | None:
    """What dropping the status of runtime call `call` (an expression statement) costs:
    "corrupting" (a failure leaves results wrong), "status" (a failure goes unreported, nothing
    silently wrong), or None when nothing is lost: the next statement checks, it is teardown,
    or the value it produces is read later (a failure shows in it)."""
    statement = call.parent
    if _checked_next(file, statement):
        return None
    function = file.enclosing_function(call)
    if function is not None and last_error_checked_after(file, call, function):
        return None  # `sync_check_cuda_error();` later on its path reports this failure too
    if (
        name.startswith("cudaMemcpy")
        and b"cudaMemcpyHostToHost" in file.data[call.start_byte : call.end_byte]
    ):
        return None  # host memory to host memory: nothing on the GPU to fail
    if (
        file.is_test
        and function is not None
        and VALIDATES.search(file.data[call.end_byte : function.end_byte])
    ):
        return None  # a test that validates its output: a failed call fails the test
    if function is not None and _VALIDATING.search(function_name(file, function) or ""):
        return None  # `check_correctness`, `verify_output`: a failed copy shows as a mismatch
    if function is not None and _DEBUG_HELPER.search(function_name(file, function) or ""):
        return None  # `print_global_mem`, `dump_tensor`: a debugging aid, not the product
    if _debug_only(file, call):
        return None  # `#if DEBUG_GUARDS` / `#ifndef NDEBUG`: a diagnostic aid, not the product
    if TEARDOWN.match(name):
        if function is None or _teardown_context(file, call, function):
            return None
        return "status"
    if CORRUPTING.match(name):
        return "corrupting"
    if function is not None and _output_read_later(file, call, function):
        return None  # a query or an event: a failure shows in the value the code reads next
    return "status"


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
    if _CHECK_WORDS.search(text):
        return True
    for m in _CALLED.finditer(text):
        if checks(m.group(1), file):
            return True
    return False


_CALLED = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
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


def fix_for(file: CudaFile, call_text: str) -> str:
    """A check that compiles in this file: its own macro where it has one, else the one the
    other files of its folder use (not one a sibling source defines itself), PyTorch's in an
    extension, else plain C++."""
    project = file.project
    macro = (
        house_check_macro(file, default=None)
        or project.launch_check_near(file.display_path, project.check_macros)
        or None
    )
    if macro is not None:
        return f"{macro}({call_text});"
    if file.is_torch_extension:
        return f"C10_CUDA_CHECK({call_text});"
    return f"if ({call_text} != cudaSuccess) {{ /* report and stop */ }}"


def launch_check_for(file: CudaFile) -> str:
    """The launch check to suggest, in a spelling that compiles in this file: the one it
    already writes after launches, else the one the other files of its folder write
    (`STD_CUDA_KERNEL_LAUNCH_CHECK();` in a stable-ABI extension), else PyTorch's in an extension, the file's check macro, plain C++."""
    own = launch_check_spelling(file) or file.project.launch_check_near(file.display_path)
    if own:
        return own
    if file.includes_torch and not file.torch_is_conditional:
        return "C10_CUDA_KERNEL_LAUNCH_CHECK();"
    macro = house_check_macro(file, default=None)
    if macro is not None:
        return f"{macro}(cudaGetLastError());"
    return "if (cudaGetLastError() != cudaSuccess) { /* report and stop */ }"


_BARE_CHECK = re.compile(rb"\b([A-Za-z_]\w*)\s*\(\s*\)\s*;")
_WRAPPED_LAST_ERROR = re.compile(
    rb"\b([A-Za-z_]\w*)\s*\(\s*(cudaGetLastError|cudaPeekAtLastError)\s*\(\s*\)\s*\)"
)
_LAUNCH_SPELLING: MemoKey[str] = MemoKey("cuda.launch_check_spelling")


def launch_check_spelling(file: CudaFile) -> str:
    """How the file checks a launch, the most written spelling (the first on a tie):
    `C10_CUDA_KERNEL_LAUNCH_CHECK();`, `STD_CUDA_KERNEL_LAUNCH_CHECK();`, the project's
    `CHECK_LAST_ERROR();`, `CUDA_CHECK(cudaGetLastError());`; "" when it writes none."""

    def compute() -> str:
        if b"<<<" not in file.data and b"LAUNCH" not in file.data:
            return ""
        counts: dict[str, int] = {}
        names = file.check_names
        # (a check compiled only into debug builds is no launch check to suggest)
        debug = debug_only_checks(file.data) | file.project.debug_checks
        readers = last_error_checks(file.data) | file.project.last_error_checks | LAST_ERROR_CHECKS
        for m in _BARE_CHECK.finditer(file.data):
            name = m.group(1).decode("ascii", "replace")
            if name in debug or name in ("cudaGetLastError", "cudaPeekAtLastError"):
                continue
            if name in readers or ((is_check_name(name) or name in names) and "LAUNCH" in name):
                key = f"{name}();"
                counts[key] = counts.get(key, 0) + 1
        for m in _WRAPPED_LAST_ERROR.finditer(file.data):
            name = m.group(1).decode("ascii", "replace")
            if checks(name, file):
                key = f"{name}({m.group(2).decode()}());"
                counts[key] = counts.get(key, 0) + 1
        return max(counts, key=counts.__getitem__) if counts else ""

    return file.memo.get(_LAUNCH_SPELLING, compute)


def discarded_call(file: CudaFile, call) -> tuple[str, str] | None:
    """(name, grade) for a CUDA runtime call whose status is dropped (see `discarded_status`);
    None for anything else: not the runtime, used, `(void)`-cast, a method, a function the file
    or project defines itself, device code."""
    name = file.call_name(call)
    if not name or not is_runtime_call(name):
        return None
    parent = call.parent
    if parent is None or parent.type != "expression_statement":
        return None
    fn = call.child_by_field_name("function")
    if fn is not None and fn.type == "field_expression":
        return None  # obj.cudaMalloc(...): a method, not the runtime
    if name in file.project.defined or name in defined_cuda_names(file):
        return None  # the project's own wrapper with a runtime-like name
    if file.is_device_function(file.enclosing_function(call)):
        return None  # the device runtime (dynamic parallelism, cudaGraphSetConditional)
    grade = discarded_status(file, call, name)
    return (name, grade) if grade else None


def defined_cuda_names(file: CudaFile) -> frozenset[str]:
    return file.memo.get(_DEFINED_CUDA, lambda: _defined_cuda_names(file))


def _defined_cuda_names(file: CudaFile) -> frozenset[str]:
    return frozenset(
        n
        for fn in file.nodes("function_definition")
        if (n := function_name(file, fn)) and n.startswith("cuda")
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


# -- launches whose configuration cannot fail -----------------------------------------------------
_GRID_LIMITS = (2**31 - 1, 65535, 65535)
_BLOCK_LIMITS = (1024, 1024, 64)
# At most 256 threads a block fits the register file even at 255 registers a thread (64K
# registers a block), so "too many resources requested" cannot happen whatever the kernel.
SAFE_BLOCK_THREADS = 256


def fixed_safe_config(file: CudaFile, launch) -> bool:
    """`launch` has a configuration fixed at compile time that no device rejects: grid and
    block dims known values (literals, constants) within their limits (every dim at least 1),
    at most `SAFE_BLOCK_THREADS` threads a block, and no dynamic shared memory. What can still
    fail (no kernel image for this GPU, an earlier kernel's fault) is not the configuration."""
    config = file.launch_config(launch)
    if not config or len(config) < 2:
        return False
    grid = file.consts.dims(config[0], launch)
    block = file.consts.dims(config[1], launch)
    if not grid or not block or len(grid) > 3 or len(block) > 3:
        return False
    if any(not 1 <= d <= limit for d, limit in zip(grid, _GRID_LIMITS, strict=False)):
        return False
    if any(not 1 <= d <= limit for d, limit in zip(block, _BLOCK_LIMITS, strict=False)):
        return False
    threads = 1
    for d in block:
        threads *= d
    if threads > SAFE_BLOCK_THREADS:
        return False
    return len(config) < 3 or file.consts.value(config[2], launch) == 0


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
                close = _closing_paren(data, m.end() - 1)
                if close is None or not gate.search(data[m.end() : close]):
                    continue
                brace = data.find(b"{", close)
                if brace < 0 or data[close + 1 : brace].strip():
                    continue
                body = _braced(data, brace)
                if body is not None:
                    blank(brace, brace + len(body))
    return bytes(out)


def _closing_paren(data: bytes, start: int, limit: int = 600) -> int | None:
    depth = 0
    for i in range(start, min(len(data), start + limit)):
        if data[i] == 0x28:
            depth += 1
        elif data[i] == 0x29:
            depth -= 1
            if depth == 0:
                return i
    return None


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


# -- a function attribute a launch relies on -----------------------------------------------------
# The opt-in limit of dynamic shared memory: up to 48 KB every device grants without it.
DEFAULT_DYNAMIC_SMEM = 48 * 1024
_CASTS = re.compile(r"^\s*(?:\(\s*(?:const\s+)?void\s*\*\s*\)|&)\s*")


def kernel_base_name(text: str) -> str:
    """The kernel a launch or attribute call names, without scope, template arguments and
    casts: `(void*)ns::kernel<fmt, 2>` -> `kernel`."""
    text = _CASTS.sub("", text)
    m = re.match(r"^\s*reinterpret_cast\s*<[^>]*>\s*\((.*)\)\s*$", text, re.S)
    if m is not None:
        text = _CASTS.sub("", m.group(1))
    depth, plain = 0, []
    for ch in text:  # (template arguments out, nested ones too)
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            plain.append(ch)
    names = re.findall(r"[A-Za-z_]\w*", "".join(plain))
    return names[-1] if names else ""


def attribute_needs_no_check(file: CudaFile, call, configured=()) -> bool:
    """`cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, n)` whose failure
    cannot go unseen: `n` is a compile-time constant of at most 48 KB (every device grants that
    without the attribute: the call changes nothing), or a launch of `k` follows it on its path
    and that launch is checked, after it in the function or by every caller of the function
    (as GPU802 judges a launcher): without the attribute the launch fails, and that failure
    is reported."""
    args = call.child_by_field_name("arguments")
    values = [a for a in args.named_children if a.type != "comment"] if args is not None else []
    if len(values) != 3 or file.node_text(values[1]).strip().rsplit("::", 1)[-1] != (
        "cudaFuncAttributeMaxDynamicSharedMemorySize"
    ):
        return False
    size = file.consts.value(values[2], call)
    if size is not None and 0 <= size <= DEFAULT_DYNAMIC_SMEM:
        return True
    kernel = kernel_base_name(file.node_text(values[0]))
    function = file.enclosing_function(call)
    if not kernel or function is None:
        return False
    from gpulint.source import is_driver_path

    for launch in file.launches:
        if launch.start_byte <= call.end_byte or launch.end_byte > function.end_byte:
            continue
        callee = launch.child_by_field_name("function")
        if callee is None or kernel_base_name(file.node_text(callee)) != kernel:
            continue
        if file.enclosing_function(launch) != function or not _launch_follows(
            file, call, launch, kernel
        ):
            continue
        if _check_written_after(file, launch, function, configured) or last_error_checked_after(
            file, launch, function
        ):
            return True
        name = function_name(file, function)
        project = file.project
        library = [
            s
            for s in project.callers(name or "")
            if s.caller != "main" and not is_driver_path(s.path)
        ]
        if name and name in project.launchers and library and project.unchecked_chain(name) is None:
            return True  # every caller of the launcher checks after the call
    return False


STRINGS_AND_COMMENTS = re.compile(
    rb'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/', re.S
)


def blank_strings_and_comments(data: bytes) -> bytes:
    """`data` with its string and character literals and comments blanked: same length, the
    newlines kept (a commented-out `// CHECK(cudaGetLastError());` is no call)."""
    return STRINGS_AND_COMMENTS.sub(lambda m: re.sub(rb"[^\n]", b" ", m.group(0)), data)


def _check_written_after(file: CudaFile, launch, function, configured=()) -> bool:
    """A check is called after `launch` in `function`, outside comments (a commented-out
    `// CHECK_CUDA_ERROR(cudaGetLastError());` checks nothing)."""
    text = blank_strings_and_comments(file.data[launch.end_byte : function.end_byte])
    # `cudaGetLastError()` on its own is left to last_error_checked_after: bare, as a
    # statement, it clears the error unreported; read into a variable, it checks
    names = (m.group(1).decode("ascii", "replace") for m in _CALLED_TEXT.finditer(text))
    return any(n not in _LAST_ERROR_READS and checks(n, file, configured) for n in names)


_LAST_ERROR_READS = frozenset({"cudaGetLastError", "cudaPeekAtLastError"})


PREPROC_BRANCHES = ("preproc_if", "preproc_ifdef", "preproc_elif", "preproc_else")
_RUNTIME_BRANCHES = frozenset(
    {"if_statement", "switch_statement", "conditional_expression", "case_statement"}
    | {"lambda_expression", "catch_clause"}
)


def _launch_follows(file: CudaFile, call, launch, kernel: str) -> bool:
    """`launch` runs whenever `call` has (`on_path_after`), an `#if`/`#else` around it being no
    branch when every branch of it launches `kernel`: a build variant (`#ifdef TORCH_BUILD
    k<<<g, b, s, stream>>> #else k<<<g, b, s>>> #endif`)."""
    return on_path_after(
        file,
        call,
        launch,
        _RUNTIME_BRANCHES | frozenset(PREPROC_BRANCHES),
        lambda a: a.type in PREPROC_BRANCHES and _every_variant_launches(file, a, kernel),
    )


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


def _every_variant_launches(file: CudaFile, branch, kernel: str) -> bool:
    node, found_else = preproc_chain_top(branch), False
    launch = re.compile(rb"\b" + re.escape(kernel.encode()) + rb"\b[^;]*<<<")
    while node is not None:
        alternative = node.child_by_field_name("alternative")
        end = alternative.start_byte if alternative is not None else node.end_byte
        if not launch.search(file.data[node.start_byte : end]):
            return False
        found_else = found_else or node.type == "preproc_else"
        node = alternative
    return found_else


# -- launches on the default stream that cannot overlap anything ---------------------------------
# How a launch or an API call names the legacy default stream.
DEFAULT_STREAMS = frozenset(
    {"0", "nullptr", "NULL", "cudaStreamLegacy", "cudaStreamDefault", "(cudaStream_t)0"}
)
_DEVICE_SYNCS = re.compile(rb"\bcuda(?:DeviceSynchronize|ThreadSynchronize)\s*\(")


def variant_on_stream(file: CudaFile, node) -> bool:
    """`node` sits in one branch of an `#if`/`#ifdef` chain whose sibling branch launches the
    same kernel on a stream: the two are build variants of one launch."""
    callee = node.child_by_field_name("function")
    kernel = kernel_base_name(file.node_text(callee)) if callee is not None else ""
    if not kernel:
        return False
    for branch in file.ancestors(node):
        if branch.type not in PREPROC_BRANCHES:
            continue
        top = preproc_chain_top(branch)
        own = branch.child_by_field_name("alternative")
        mine = (branch.start_byte, own.start_byte if own is not None else branch.end_byte)
        for other in file.launches:
            if not (top.start_byte <= other.start_byte < top.end_byte):
                continue
            if mine[0] <= other.start_byte < mine[1]:
                continue  # this branch's own launches
            config = [c for c in file.launch_config(other) or () if c.type != "comment"]
            fn = other.child_by_field_name("function")
            if (
                len(config) >= 4
                and " ".join(file.node_text(config[3]).split()) not in DEFAULT_STREAMS
                and fn is not None
                and kernel_base_name(file.node_text(fn)) == kernel
            ):
                return True
    return False


def between_device_syncs(file: CudaFile, node) -> bool:
    """A `cudaDeviceSynchronize()` statement runs before `node` and another after it, each in
    a block around it (not inside a branch of their own)."""
    before = after = False
    child = node
    for a in file.ancestors(node):
        if a.type in ("function_definition", "lambda_expression"):
            break
        if a.type == "compound_statement":
            for statement in a.named_children:
                if statement.type != "expression_statement":
                    continue
                if not _DEVICE_SYNCS.search(file.data[statement.start_byte : statement.end_byte]):
                    continue
                if statement.end_byte <= child.start_byte:
                    before = True
                elif statement.start_byte >= child.end_byte:
                    after = True
            if before and after:
                return True
        child = a
    return False


# -- launches whose dynamic shared memory can fail by configuration -------------------------------
# What a block gets without `cudaFuncSetAttribute(..., MaxDynamicSharedMemorySize, ...)`.
SMEM_DEFAULT_LIMIT = 48 * 1024
_SIZEOF = re.compile(r"\bsizeof\s*\((?:[^()]|\([^()]*\))*\)")
_WORD = re.compile(r"(?<![\w.>:])(?:[A-Za-z_]\w*\s*::\s*)*([A-Za-z_]\w*)(\s*::)?")
_CONSTANT_WORD = re.compile(r"^(?:[A-Z][A-Z0-9_]*|k[A-Z]\w*)$")
_NOT_NAMES = frozenset(
    {"int", "size_t", "unsigned", "long", "uint32_t", "int32_t", "int64_t", "uint64_t"}
    | {"static_cast", "min", "max"}
)


def runtime_shared_memory(file: CudaFile, launch) -> str | None:
    """Why `launch`'s dynamic shared memory can fail by configuration: a compile-time value
    above the 48 KB a block gets by default ("96 KB"), or a size computed at run time (the
    expression, e.g. `smem_sz` from the sequence length). None without dynamic shared memory,
    for a known value within 48 KB, for a compile-time expression of unknown value (a
    template's constant, `sizeof(T) * BLOCK`), for a size handed in as a parameter (the
    caller's choice: a generic launch helper), and for a size bounded by the block's threads
    within 48 KB (`block.x * sizeof(float)`)."""
    config = file.launch_config(launch)
    if not config or len(config) < 3:
        return None
    expr = config[2]
    value = file.consts.value(expr, launch)
    if value is not None:
        return f"{value // 1024} KB" if value > SMEM_DEFAULT_LIMIT else None
    text = file.node_text(expr)
    function = file.enclosing_function(launch)
    scope = file.node_text(function) if function is not None else ""
    block = file.node_text(config[1]).strip()
    names = _runtime_names(text, _template_names(file, function), scope, 0)
    if function is not None and file.macro_name(function) is not None:
        # a macro's body: a name it does not declare comes from where it is expanded (unseen)
        names = {n for n in names if re.search(r"\b" + re.escape(n) + r"\s*[=({]", scope)}
    if not names:
        return None
    opening = scope.find("(")
    close = _closing_paren(scope.encode(), opening) if opening >= 0 else None
    head = scope[: close + 1] if close is not None else ""  # the parameter list
    if re.fullmatch(r"[A-Za-z_]\w*", text.strip()) and re.search(
        r"\b" + re.escape(text.strip()) + r"\b", head
    ):
        return None  # a parameter: sized by the caller
    if re.fullmatch(r"[A-Za-z_]\w*", block) and names <= {block}:
        # threads a block times a per-thread size: at most 1024 threads
        bound = _SIZEOF.sub(
            "16", re.sub(r"\b" + re.escape(block) + r"(?:\.[xyz])?\b", "1024", text)
        )
        if re.fullmatch(r"[\d\s*+()]+", bound):
            try:
                if eval(bound, {"__builtins__": {}}) <= SMEM_DEFAULT_LIMIT:  # digits, * + ( ) only
                    return None
            except (SyntaxError, ValueError, TypeError):
                pass
    return f"`{' '.join(text.split())}`"


def _template_names(file: CudaFile, function) -> set[str]:
    out: set[str] = set()
    node = function.parent if function is not None else None
    if node is not None and node.type == "template_declaration":
        params = node.child_by_field_name("parameters")
        if params is not None:
            out.update(re.findall(r"(\w+)\s*(?:=[^,>]*)?(?=[,>])", file.node_text(params)))
    return out


def _runtime_names(text: str, template: set[str], scope: str, depth: int) -> set[str]:
    """The names in `text` not known at compile time: besides literals, `sizeof`, constants
    (ALL_CAPS, `kName`, `Cfg::name`) and template parameters, a local name declared once
    (`int smem = ...;`, assigned nowhere else) from those is compile-time too."""
    text = _SIZEOF.sub("4", text)
    out: set[str] = set()
    for m in _WORD.finditer(text):
        name = m.group(1)
        if "::" in m.group(0):
            continue  # a class's or namespace's static constant (`Ktraits::kSmemSize`)
        if _CONSTANT_WORD.match(name) or name in template or name in _NOT_NAMES:
            continue
        # (`int smem = ...;`, or `dim3 block(32, 8);`)
        decl = re.search(
            r"\b[\w:<>]+\s+" + re.escape(name) + r"\s*(?:=\s*([^;]*)|[({]([^;]*)[)}]\s*);",
            scope,
        )
        again = len(re.findall(r"\b" + re.escape(name) + r"\s*[-+*/|&]?=[^=]", scope))
        if (
            decl is None
            or again > 1
            or depth >= 3
            or _runtime_names(decl.group(1) or decl.group(2), template, scope, depth + 1)
        ):
            out.add(name)
    return out


# Calls a device function may make and still have no output but what it prints.
_NO_OUTPUT_CALLS = frozenset({"printf", "std::printf", "__syncthreads", "__syncwarp", "sync"})
_STORE_TARGETS = frozenset({"subscript_expression", "pointer_expression", "field_expression"})


def prints_only(file: CudaFile, function) -> bool:
    """The device function's only output is what it prints: it stores through no pointer,
    array or member (`y[i] = ...`, `*out = ...`, `s->n++`), calls nothing but `printf` and
    barriers (an atomic, a helper or a copy may write), and returns no value. A hello-world
    kernel, a kernel that shows its thread and block indices: printing is its purpose."""
    body = function.child_by_field_name("body")
    if body is None:
        return False
    stack = [body]
    while stack:
        node = stack.pop()
        kind = node.type
        if kind == "assignment_expression":
            left = node.child_by_field_name("left")
            if left is not None and left.type in _STORE_TARGETS:
                return False
        elif kind == "update_expression":
            argument = node.child_by_field_name("argument")
            if argument is not None and argument.type in _STORE_TARGETS:
                return False
        elif kind == "call_expression":
            name = file.call_name(node)
            if name is None or name.split(".")[-1] not in _NO_OUTPUT_CALLS:
                return False
        elif kind == "return_statement" and node.named_child_count:
            return False
        elif kind in ("asm_statement", "gnu_asm_expression"):
            return False
        stack.extend(node.named_children)
    return True


def folders_of(path: str) -> list[str]:
    """The folders above `path`, nearest first, up to the top one of the tree (not "")."""
    parts = path.replace("\\", "/").split("/")[:-1]
    return ["/".join(parts[:i]) for i in range(len(parts), 0, -1)]


# -- a branch no build takes (GPU807): `#if USE_MANAGED` that nothing defines ----------------
_DEFINE_NAME = re.compile(rb"(?m)^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)")
# Macros the compiler, the platform or a library header defines: never judged undefined.
_TOOLCHAIN_MACROS = frozenset(
    {"NDEBUG", "WIN32", "WIN64", "linux", "unix", "USE_ROCM", "GOOGLE_CUDA", "USE_CUDA"}
    | {"WITH_CUDA", "TENSORFLOW_USE_ROCM", "EIGEN_USE_GPU", "MPI_VERSION", "HIP_VERSION"}
)
_LIBRARY_PREFIX = re.compile(
    r"^(_|CUDA|CUDART|CUB_|THRUST_|CUTLASS_|CUTE_|NCCL_|CUBLAS|CUDNN|CUSPARSE|CUFFT|CURAND|"
    r"CUSOLVER|NVTX|NV|TORCH_|AT_|C10_|HIP|ROCM|EIGEN_|OMPI_|MPI|PYBIND11_|BOOST_|GLOG_|GOOGLE_)"
)
# Build files that pass `-DNAME` or declare an option: a macro named in one may be defined.
_BUILD_FILES = (
    "CMakeLists.txt", "setup.py", "Makefile", "makefile", "GNUmakefile", "meson.build",
    "meson_options.txt", "BUILD", "BUILD.bazel", "build.sh", "setup.cfg", "pyproject.toml",
    "configure.ac", "SConstruct", "build.py",
)  # fmt: skip
_BUILD_SUFFIXES = (".cmake", ".mk", ".bzl", ".sh")
_BUILD_WORD = re.compile(rb"[A-Za-z_]\w*")
_BUILD_WORDS: MemoKey[frozenset[str]] = MemoKey("cuda.build_words")
# `X`, `defined(X)`, `defined X`, `X == 1`, `X > 0`, `X != 0`: true only where X is defined
_SIMPLE_CONDITION = re.compile(
    r"^\(?\s*(?:defined\s*\(\s*(\w+)\s*\)|defined\s+(\w+)|(\w+)(?:\s*(?:==\s*[1-9]\d*|>\s*0|"
    r"!=\s*0|>=\s*1))?)\s*\)?$"
)


def tree_macros(files) -> frozenset[str]:
    """Names `#define`d in any of the checked tree's sources (path, bytes)."""
    names: set[str] = set()
    for _, data in files:
        if b"define" in data:
            names.update(m.decode("ascii", "replace") for m in _DEFINE_NAME.findall(data))
    return frozenset(names)


def _build_words(file: CudaFile) -> frozenset[str]:
    """Every word of the build files in the file's folder and the folders above it
    (`-DUSE_MANAGED=1`, `option(USE_MANAGED ...)`, `define_macros=[("USE_MANAGED", None)]`).
    Read as bounded text, never run; each read recorded as evidence for the cache."""
    import os

    from gpulint import claims
    from gpulint.safeio import read_side

    words: set[str] = set()
    folder = os.path.dirname(file.display_path)
    for _ in range(12):
        here = folder or "."
        claims.EVIDENCE_READS.add(os.path.abspath(here))  # a build file added: a cache miss
        try:
            with os.scandir(here) as entries:
                names = [
                    e.name
                    for e in entries
                    if (e.name in _BUILD_FILES or e.name.endswith(_BUILD_SUFFIXES))
                    and e.is_file(follow_symlinks=False)
                ][:64]
        except OSError:
            names = []
        for name in names:
            path = os.path.join(here, name)
            text = read_side(path, 1 << 20)
            if text is not None:
                claims.EVIDENCE_READS.add(os.path.abspath(path))
                for w in _BUILD_WORD.findall(text):
                    word = w.decode("ascii", "replace")
                    words.add(word[1:] if word.startswith("D") else word)  # `-DNAME`
                    words.add(word)
        if not folder:
            break
        folder = os.path.dirname(folder)
    return frozenset(words)


def undefined_macro_branch(file: CudaFile, node) -> str | None:
    """The macro of an `#if NAME`/`#ifdef NAME`/`#if defined(NAME) && ...` branch that holds
    `node` where no build defines NAME: no `#define` of it in this file or the checked tree,
    no build file in the folders up from this one names it (`-DNAME`, an option), and it is no
    toolchain, platform or library macro (`__CUDA_ARCH__`, `NDEBUG`, `_WIN32`, `CUDART_*`,
    `TORCH_*`...). The branch is dead code as the tree is built; None otherwise (an `#else`,
    an `#ifndef`, an `||`, a macro that may be defined)."""
    child = node
    for parent in file.ancestors(node):
        if parent.type in ("preproc_if", "preproc_ifdef", "preproc_elif"):
            alternative = parent.child_by_field_name("alternative")
            if alternative is None or child != alternative:
                name = _undefined_in(file, parent)
                if name is not None:
                    return name
        child = parent
    return None


def _undefined_in(file: CudaFile, branch) -> str | None:
    if branch.type == "preproc_ifdef":
        if file.node_text(branch).lstrip().startswith("#ifndef"):
            return None
        names = [file.node_text(branch.child_by_field_name("name"))]
    else:
        condition = file.node_text(branch.child_by_field_name("condition")).strip()
        names = []
        for part in condition.split("&&"):
            m = _SIMPLE_CONDITION.match(part.strip())
            if m is not None:
                names.append(next(g for g in m.groups() if g))
        if "||" in condition:
            return None
    for name in names:
        if not name or name.isdigit() or name in _TOOLCHAIN_MACROS or _LIBRARY_PREFIX.match(name):
            continue
        if name.encode() in file.data and re.search(
            rb"(?m)^[ \t]*#[ \t]*define[ \t]+" + re.escape(name.encode()) + rb"\b", file.data
        ):
            continue
        if name in file.project.macros:
            continue
        if name in file.memo.get(_BUILD_WORDS, lambda: _build_words(file)):
            continue
        return name
    return None


# -- a loop whose sync is the point (GPU805) --------------------------------------------------
_CLOCK_READ = re.compile(
    rb"\bchrono\b|_clock\s*::\s*now|\bnow\s*\(\s*\)|gettimeofday|clock_gettime|omp_get_wtime|"
    rb"MPI_Wtime|cudaEventRecord|[Tt]imer\w*\s*[.(]|\bclock\s*\(\s*\)|\bsecond\s*\(\s*\)"
)


def timed_loop(file: CudaFile, loop) -> bool:
    """`loop` is what a clock measures: a clock read (`high_resolution_clock::now()`,
    `cudaEventRecord`, `gettimeofday`, a timer's start/stop) among the three statements just
    before it and among the three just after it, in its own block. A benchmark timing its
    repetitions: what each of them does, a sync included, is what is being measured."""
    block = loop.parent
    if block is None:
        return False
    siblings = [c for c in block.named_children if c.type != "comment"]
    at = next((i for i, c in enumerate(siblings) if c == loop), None)
    if at is None:
        return False

    def reads_clock(nodes) -> bool:
        return any(_CLOCK_READ.search(file.data[n.start_byte : n.end_byte]) for n in nodes)

    return reads_clock(siblings[max(0, at - 3) : at]) and reads_clock(siblings[at + 1 : at + 4])


# A comment that gives the sync a purpose: a barrier, an ordering, what must be done first.
_SYNC_REASON = re.compile(
    r"(?i)barrier|\bwait(s|ing)? (for|until|on)\b|\bensure|make sure|so that|before (the |we |"
    r"next|launch|read|writ|copy|swap|send|exchang|start)|\bmust\b|\bneed(s|ed)? to\b|required|"
    r"otherwise|\brace\b|overwrit|\breuse|\bhalo\b|neighbo|\bpeer\b|\bp2p\b|in order|complete[sd]? "
    r"before|serializ|serialis|on purpose|deliberate|intentional|measure"
)
# Communication the host starts after the sync on device buffers: MPI, SHMEM barriers.
_HOST_COMMUNICATION = re.compile(rb"\bMPI_\w+\s*\(|\b(?:nv)?shmem_\w*barrier\w*\s*\(")


def explained_sync(file: CudaFile, call) -> bool:
    """The comment on the sync's line or just above it says what the sync is for (`// wait
    for the peers before the next exchange`, `// barrier: every GPU done with iteration i`):
    a documented protocol, not an accident."""
    return bool(_SYNC_REASON.search(file.comment_before(call, lines=2)))


def communicates_after(file: CudaFile, call, loop) -> bool:
    """After the sync, the iteration hands device data to host-driven communication (an
    `MPI_Sendrecv` of a halo, an `MPI_Barrier`, a SHMEM barrier): the host must know the
    kernels finished before it does."""
    return bool(_HOST_COMMUNICATION.search(file.data[call.end_byte : loop.end_byte]))
