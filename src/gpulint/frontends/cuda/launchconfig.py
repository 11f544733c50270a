"""Launches whose configuration cannot fail: a fixed grid and block inside the
hardware limits, and a function attribute (`cudaFuncSetAttribute`) a launch relies on whose
failure the launch's own check reports."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gpulint.frontends.cuda.checknames import checks
from gpulint.frontends.cuda.lasterror import last_error_checked_after
from gpulint.frontends.cuda.syntax import (
    CALLED_TEXT,
    PREPROC_BRANCHES,
    blank_strings_and_comments,
    function_name,
    on_path_after,
    preproc_chain_top,
)

if TYPE_CHECKING:
    from gpulint.frontends.cuda.file import CudaFile


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


# Why a `cudaFuncSetAttribute` needs no check of its own (`attribute_needs_no_check`).
ATTRIBUTE_NO_OP = "no-op"  # a known size within the default: the call changes nothing
ATTRIBUTE_LAUNCH_CHECKED = "launch-checked"  # the launch that needs it follows and is checked


def attribute_needs_no_check(file: CudaFile, call, configured=()) -> str | None:
    """Why `cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, n)`'s failure
    cannot go unseen, None where it can: `ATTRIBUTE_NO_OP` where `n` is a compile-time constant
    of at most 48 KB (every device grants that without the attribute: the call changes
    nothing); `ATTRIBUTE_LAUNCH_CHECKED` where a launch of `k` follows it on its path and that
    launch is checked, after it in the function or by every caller of the function (as GPU802
    judges a launcher): without the attribute the launch fails, and that failure is
    reported."""
    args = call.child_by_field_name("arguments")
    values = [a for a in args.named_children if a.type != "comment"] if args is not None else []
    if len(values) != 3 or file.node_text(values[1]).strip().rsplit("::", 1)[-1] != (
        "cudaFuncAttributeMaxDynamicSharedMemorySize"
    ):
        return None
    size = file.consts.value(values[2], call)
    if size is not None and 0 <= size <= DEFAULT_DYNAMIC_SMEM:
        return ATTRIBUTE_NO_OP
    kernel = kernel_base_name(file.node_text(values[0]))
    function = file.enclosing_function(call)
    if not kernel or function is None:
        return None
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
            return ATTRIBUTE_LAUNCH_CHECKED
        name = function_name(file, function)
        project = file.project
        library = [
            s
            for s in project.callers(name or "")
            if s.caller != "main" and not is_driver_path(s.path)
        ]
        if name and name in project.launchers and library and project.unchecked_chain(name) is None:
            return ATTRIBUTE_LAUNCH_CHECKED  # every caller of the launcher checks after the call
    return None


def _check_written_after(file: CudaFile, launch, function, configured=()) -> bool:
    """A check is called after `launch` in `function`, outside comments (a commented-out
    `// CHECK_CUDA_ERROR(cudaGetLastError());` checks nothing)."""
    text = blank_strings_and_comments(file.data[launch.end_byte : function.end_byte])
    # `cudaGetLastError()` on its own is left to last_error_checked_after: bare, as a
    # statement, it clears the error unreported; read into a variable, it checks
    names = (m.group(1).decode("ascii", "replace") for m in CALLED_TEXT.finditer(text))
    return any(n not in _LAST_ERROR_READS and checks(n, file, configured) for n in names)


_LAST_ERROR_READS = frozenset({"cudaGetLastError", "cudaPeekAtLastError"})
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
