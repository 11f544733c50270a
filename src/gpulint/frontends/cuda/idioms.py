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
