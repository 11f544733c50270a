"""How a file spells a check: the fix that wraps a runtime call in the file's check
macro, and the check a file writes after its launches."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gpulint.frontends import MemoKey
from gpulint.frontends.cuda.checknames import (
    LAST_ERROR_CHECKS,
    checks,
    house_check_macro,
    is_check_name,
    last_error_checks,
)
from gpulint.frontends.cuda.debugbuilds import debug_only_checks

if TYPE_CHECKING:
    from gpulint.frontends.cuda.file import CudaFile


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
