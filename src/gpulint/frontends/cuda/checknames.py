"""Names CUDA code uses for error checks and runtime calls: the known check idioms and
project spellings, the runtime calls that return a `cudaError_t`, the check macro a file wraps
them in, and the macros and small functions whose body checks (or reads the last error)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gpulint.frontends import MemoKey
from gpulint.frontends.cuda.syntax import CALLED, CALLED_TEXT, braced, function_name

if TYPE_CHECKING:
    from gpulint.frontends.cuda.file import CudaFile


# Once per file: the check macro the file wraps runtime calls in ("" where none), and the
# functions it defines itself under a `cuda` name.
_HOUSE_CHECK: MemoKey[str] = MemoKey("cuda.house_check_macro")
_DEFINED_CUDA: MemoKey[frozenset[str]] = MemoKey("cuda.defined_cuda_names")

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


CHECK_WORDS = re.compile(
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
        if value is not None and macro is not None and CHECK_WORDS.search(file.node_text(value)):
            out.add(file.node_text(macro))
    for fn in file.nodes("function_definition"):
        body = fn.child_by_field_name("body")
        if body is None or body.end_point[0] - body.start_point[0] > 25:
            continue  # a small helper; a long function that checks somewhere is not a check
        text = file.node_text(body)
        if CHECK_WORDS.search(text) and all(
            n in _CHECKER_CALLS or is_check_name(n) or n.startswith(("std", "cuda"))
            for n in CALLED.findall(text)
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
        body = braced(data, m.end() - 1)
        if body is not None and b"<<<" not in body and _reads_last_error(body):
            out.add(name.decode("ascii", "replace"))
    macros = [
        (m.group(1).decode("ascii", "replace"), m.group(2)) for m in _DEFINE_TEXT.finditer(data)
    ]
    for _ in range(3):  # a macro calling a macro calling the function
        for name, value in macros:
            if name not in out and (
                _reads_last_error(value)
                or any(c.decode("ascii", "replace") in out for c in CALLED_TEXT.findall(value))
            ):
                out.add(name)
    return frozenset(out)


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


# What a checking helper calls besides the error getters: it reports and stops.
_CHECKER_CALLS = frozenset(
    "if while for switch return sizeof printf fprintf puts fputs exit abort assert throw "
    "snprintf sprintf TORCH_CHECK AT_ERROR static_cast std runtime_error string "
    "to_string cerr fflush __LINE__ __FILE__ logic_error".split()
)


def defined_cuda_names(file: CudaFile) -> frozenset[str]:
    return file.memo.get(_DEFINED_CUDA, lambda: _defined_cuda_names(file))


def _defined_cuda_names(file: CudaFile) -> frozenset[str]:
    return frozenset(
        n
        for fn in file.nodes("function_definition")
        if (n := function_name(file, fn)) and n.startswith("cuda")
    )
