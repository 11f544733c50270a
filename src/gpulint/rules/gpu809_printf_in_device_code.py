import re

from gpulint.frontends.cuda.file import CudaFile
from gpulint.frontends.cuda.printing import prints_only
from gpulint.rule import Rule

_DEBUG_GUARD = re.compile(r"(?i)debug|verbose|print|log|trace|dump")
# An architecture condition: its `#else` (or negated) branch is the unsupported-target fallback.
_ARCH_GUARD = re.compile(r"__CUDA_ARCH|ARCH_|\bENABLE_|_ENABLE_|\bSM_?\d{2,3}")
# The message of an error path: it runs only when something already went wrong.
_ERROR_MESSAGE = re.compile(
    r"(?i)error|fail|abort|mismatch|unsupported|not supported|requires|invalid|overflow|"
    r"too small|too large|exceed|out of (range|bounds)|warning|incomplete|\bexpected\b|"
    r"\bwrong\b|%\w+ != %"  # a mismatch report: `"%f != %f at %d"`
)
# `if (threadIdx.x == 0)`, `if (tid == 0 && blockIdx.x == 0)`: one thread prints, once
_ONE_THREAD = re.compile(
    r"(?i)\b(threadIdx\.x|tid|lane(_?id)?|thread_?id|idx|thread_rank\(\s*\))\s*==\s*0\b"
)
_DEBUG_FUNCTION = re.compile(r"(?i)(^|_|::)(print|dump|debug|show|trace)")
_DEBUG_FLAG = re.compile(r"(?i)\b(\w*print\w*|\w*verbose\w*|\w*debug\w*|trace)\b")
_FATAL_AFTER = re.compile(rb"__trap\s*\(|\btrap;|\bassert\s*\(|\babort\s*\(|\bexit\s*\(")
_PREPROC = {"preproc_if", "preproc_ifdef", "preproc_elif", "preproc_else", "preproc_elifdef"}


class PrintfInDeviceCode(Rule):
    """
    ## What it does
    Finds `printf` called in device code: inside a `__global__` kernel or a `__device__`
    (including `__host__ __device__`) function. Left alone: `printf` compiled only in debug
    builds (under `#if DEBUG`, `#ifdef VERBOSE`...) or in the unsupported-architecture fallback
    of an architecture check, the message of an error path (`"... failed"`, `"ERROR: ..."`, a
    message variable saying so, or followed by `__trap()`/`assert`, in its block or just after
    it), printing helpers (`print_*`, `dump_*`, `debug_*` functions), a `__device__` function
    that nothing in the checked code base calls or names besides its definition (a debugging
    helper such as `fill_identity` beside the `print()` utilities: no kernel pays for it; a
    file linted alone, whose callers are not in sight, is still reported), and in a standalone
    program or test (a file that defines `main`) a `printf` that one thread runs
    (`if (threadIdx.x == 0)`, `if (g.thread_rank() == 0)`): a demo or a test showing its
    result. Also left alone there: a kernel whose only output is what it prints (it stores
    through no pointer or array, calls nothing but `printf` and barriers, returns nothing: a
    hello world showing each thread's indices), where printing is the program's purpose; the
    same kernel in a header or library file is still reported. A kernel the grammar misread
    (an exercise's `int idx = FIXME` placeholder) is not judged.

    ## Why is this bad?
    Device-side `printf` writes into a fixed-size FIFO that the host drains only at
    synchronisation points; each call formats on the GPU, adds registers and local memory to
    the kernel, and serialises the threads that reach it. Left in a hot kernel it costs
    throughput on every launch, and output beyond the buffer is silently lost.

    ## Example
    ```cuda
    __global__ void scale(float* x, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      printf("i=%d\\n", i);
      if (i < n) x[i] *= 2.f;
    }
    ```

    ## Use instead
    ```cuda
    __global__ void scale(float* x, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) x[i] *= 2.f;
    }
    ```

    ## References
    - [CUDA C++ Programming Guide: formatted output](https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#formatted-output)
    """

    code = "GPU809"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "printf-in-device-code"
    language = "cuda"
    triggers = ("printf",)
    requires = ("__global__", "__device__", "_DEVICE", "_GLOBAL")
    message = "`printf` in device code serialises threads and costs registers on every launch; remove it (or guard it with a debug macro)"
    tags = ("debug",)

    VALID = [
        """
#include <cstdio>
void report(int n) { printf("n=%d\\n", n); }
__global__ void k(float* x) { x[threadIdx.x] = 0; }
""",
    ]
    VALID.append(
        """
__global__ void verify(const float* got, const float* want, int n, float tol) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    if (fabsf(got[i] - want[i]) > tol) {
      printf(  // "%f vs %f"
          "%f != %f at %d\\n", got[i], want[i], i);
    }
  }
}
"""
    )
    INVALID = [
        """
__global__ void k(float* x) {
  printf("thread %d\\n", threadIdx.x);
}
""",
    ]

    def visit_call_expression(self, node, file: CudaFile):
        if file.call_name(node) not in ("printf", "std::printf"):
            return
        function = file.enclosing_function(node)
        if function is None or not file.is_device_function(function) or file.broken(function):
            return  # (a printf the grammar misread into a kernel: `int idx = FIXME` before it)
        name = file.function_name_node(function)
        if name is not None and _DEBUG_FUNCTION.search(
            file.node_text(name.child_by_field_name("declarator"))
        ):
            return  # a printing helper: printing is its job
        if (
            name is not None
            and f"{file.display_path}:{file.node_text(name.child_by_field_name('declarator')).split('::')[-1]}"
            in file.project.uncalled_printers
        ):
            return  # a debugging helper nothing in the code base calls: no kernel pays for it
        args = node.child_by_field_name("arguments")
        values = [a for a in args.named_children if a.type != "comment"] if args is not None else []
        fmt = values[0] if values else None  # (a commented-out format before it is not it)
        if fmt is not None and fmt.type in ("string_literal", "concatenated_string"):
            if _ERROR_MESSAGE.search(file.node_text(fmt)):
                return
        if fmt is not None and fmt.type == "identifier":
            # `printf(warning)`: the message is a variable; read what the function sets it to
            text = file.node_text(function)
            m = re.search(rf"\b{re.escape(file.node_text(fmt))}\b[^;]*=\s*([^;]*)", text)
            if m and _ERROR_MESSAGE.search(m.group(1)):
                return
        block = next((a for a in file.ancestors(node) if a.type == "compound_statement"), None)
        if block is not None and _FATAL_AFTER.search(file.data[node.end_byte : block.end_byte]):
            return  # the message of a fatal error path
        # ... or just after the block it sits in: `if (bad) { printf(...); } __trap();`
        if block is not None and _FATAL_AFTER.search(
            file.data[block.end_byte : block.end_byte + 120]
        ):
            return
        if file.is_program or file.is_test:
            if prints_only(file, function):
                return  # a program's kernel whose output is what it prints (a hello world)
            for a in file.ancestors(node):
                if a.type == "if_statement" and _ONE_THREAD.search(
                    file.node_text(a.child_by_field_name("condition"))
                ):
                    return  # a demo or test driver printing its result from one thread
        for a in file.ancestors(node):
            if a.type in _PREPROC:
                guard, fallback = self._guard(file, a)
                if _DEBUG_GUARD.search(guard) or (fallback and _ARCH_GUARD.search(guard)):
                    return  # compiled only for debugging, or the unsupported-architecture fallback
            if a.type == "if_statement" and _DEBUG_FLAG.search(
                file.node_text(a.child_by_field_name("condition"))
            ):
                return  # opt-in at run time: `if (print_diff)`, `if (verbose)`
        yield self.report(file, node)

    @staticmethod
    def _guard(file: CudaFile, node) -> tuple[str, bool]:
        """The condition of the #if/#ifdef branch `node` belongs to, and whether `node` is the
        branch taken when that condition is false (`#else`, `#ifndef`, `#if !defined(...)`)."""
        fallback = False
        while node is not None and node.type in ("preproc_else", "preproc_elif", "preproc_elifdef"):
            cond = node.child_by_field_name("condition")
            if cond is not None and node.type != "preproc_else":
                return file.node_text(cond), False
            fallback = True
            node = node.parent
        if node is None:
            return "", False
        cond = node.child_by_field_name("condition") or node.child_by_field_name("name")
        text = file.node_text(cond)
        negated = text.lstrip().startswith("!") or file.node_text(node).startswith("#ifndef")
        return text, fallback != negated
