"""Names CUDA code uses for error checks and runtime calls, shared by the GPU80x rules."""

from __future__ import annotations

import re

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


def is_runtime_call(name: str | None) -> bool:
    return bool(name) and name not in NOT_ERRORS and bool(RUNTIME_API.match(name))


def house_check_macro(file) -> str:
    """The check the file already wraps runtime calls in (`cudaCheck`, `gpuErrchk`), the most
    used one, the first seen on a tie; `CUDA_CHECK` where it wraps none. Fix suggestions use
    it so they read like the code around them."""
    cached = getattr(file, "_house_check_macro", None)
    if cached is None:
        counts: dict[str, int] = {}  # insertion order breaks ties
        for call in file.nodes("call_expression"):
            args = call.child_by_field_name("arguments")
            inner = args.named_children if args is not None else []
            if len(inner) == 1 and inner[0].type == "call_expression":
                if (file.call_name(inner[0]) or "").startswith("cuda"):
                    outer = file.call_name(call)
                    if outer and not is_runtime_call(outer):
                        counts[outer] = counts.get(outer, 0) + 1
        cached = max(counts, key=counts.__getitem__) if counts else "CUDA_CHECK"
        file._house_check_macro = cached
    return cached
