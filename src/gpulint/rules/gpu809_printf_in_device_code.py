import re

from gpulint.frontends.cuda.file import CudaFile
from gpulint.frontends.cuda.printing import prints_only
from gpulint.rule import Exemption, Rule

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
    (including `__host__ __device__`) function.

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

    ## Known problems
    Printing helpers, debug builds and run-time switches are recognised by name (a function
    named `print*`, `dump*`, `debug*`, `show*`, `trace*`, or with such a part after `_`; an
    `#if` macro containing `debug`, `verbose`, `print`, `log`, `trace` or `dump`; an `if` on a
    word containing `print`, `verbose` or `debug`, or `trace`), and error paths by the words
    of their message: a hot kernel's `printf` under `if (print_every > 0)` is left alone too.
    A kernel the grammar misread (an exercise's `int idx = FIXME` placeholder) is not judged.
    A `__device__` function is known to be uncalled only when the checked tree has more than
    one file: a header linted alone is still reported.

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

    EXEMPTIONS = (
        Exemption(
            "printing-helper",
            "A `printf` in a printing helper (`print_*`, `dump_*`, `debug_*`, `show_*`, "
            "`trace_*` functions): printing is its job.",
            """
__device__ void print_tile(const float* t, int n) {
  for (int i = 0; i < n; ++i) printf("%f ", t[i]);
}
""",
        ),
        Exemption(
            "uncalled-device-helper",
            "A `__device__` function that nothing in the checked tree calls or names besides "
            "its definition (a debugging helper beside the `print()` utilities): no kernel pays "
            "for it.",
            files=(
                (
                    "include/debug_utils.cuh",
                    """
__device__ void fill_identity(float* m, int n) {
  for (int i = 0; i < n; ++i) {
    m[i * n + i] = 1.f;
    printf("m[%d][%d] = 1\\n", i, i);
  }
}
""",
                ),
                (
                    "src/scale.cu",
                    """
#include "../include/debug_utils.cuh"
__global__ void scale(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.f;
}
""",
                ),
            ),
        ),
        Exemption(
            "error-message",
            'A `printf` whose message reports an error (`"... failed"`, `"ERROR: ..."`, '
            '`"index %d out of range"`, `"%f != %f"`, or a message variable set to '
            "such a text): it runs only when something already went wrong.",
            """
__global__ void gather(const int* idx, const float* src, float* out, int n, int rows) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (idx[i] >= rows) printf("gather: index %d out of range\\n", idx[i]);
  out[i] = src[idx[i]];
}
""",
        ),
        Exemption(
            "fatal-error-path",
            "A `printf` followed by `__trap()`, `assert`, `abort` or `exit`, in its block or "
            "just after it: the message of a fatal error path.",
            """
__global__ void gather_rows(const int* dims, float* x, int rank) {
  if (dims[0] != rank) {
    printf("rank %d, got %d\\n", rank, dims[0]);
    __trap();
  }
  x[threadIdx.x] = 0.f;
}
""",
        ),
        Exemption(
            "prints-only-kernel",
            "In a standalone program or test (a file that defines `main`), a kernel whose only "
            "output is what it prints (it stores through no pointer, calls nothing but "
            "`printf` and barriers, returns nothing: a hello world showing each thread's "
            "indices): printing is the program's purpose.",
            """
#include <cstdio>
__global__ void hello() { printf("block %u, thread %u\\n", blockIdx.x, threadIdx.x); }
int main() {
  hello<<<2, 4>>>();
  cudaDeviceSynchronize();
  return 0;
}
""",
        ),
        Exemption(
            "one-thread-in-program",
            "In a standalone program or test, a `printf` that one thread runs "
            "(`if (threadIdx.x == 0)`, `if (g.thread_rank() == 0)`): a demo or a test showing "
            "its result.",
            """
#include <cstdio>
__global__ void sum(const float* x, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(out, x[i]);
  if (threadIdx.x == 0) printf("block %d done\\n", blockIdx.x);
}
int main() {
  float *x, *out;
  cudaMalloc(&x, 1024 * sizeof(float));
  cudaMalloc(&out, sizeof(float));
  sum<<<4, 256>>>(x, out, 1024);
  cudaDeviceSynchronize();
  return 0;
}
""",
        ),
        Exemption(
            "debug-build-only",
            "A `printf` compiled only in debug builds (under `#if DEBUG`, `#ifdef VERBOSE`, "
            "`#ifdef PRINT_TILES`...): a diagnostic aid, not the product.",
            """
__global__ void scale(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
#ifdef DEBUG_SCALE
  printf("i=%d\\n", i);
#endif
  if (i < n) x[i] *= 2.f;
}
""",
        ),
        Exemption(
            "unsupported-arch-fallback",
            "A `printf` in the fallback branch of an architecture check (the `#else` of "
            "`#if __CUDA_ARCH__ >= 800`): it runs only on a GPU the kernel does not support.",
            """
__global__ void mma_kernel(float* x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  x[threadIdx.x] = 1.f;
#else
  printf("mma_kernel needs sm_80\\n");
#endif
}
""",
        ),
        Exemption(
            "runtime-opt-in",
            "A `printf` under an `if` on a debugging switch (`if (verbose)`, "
            "`if (print_diff)`, `if (debug && i == 0)`): the user turns it on at run time.",
            """
__global__ void scale(float* x, int n, bool verbose) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (verbose && i == 0) printf("scaling %d values\\n", n);
  if (i < n) x[i] *= 2.f;
}
""",
        ),
    )

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
        declared = (
            file.node_text(name.child_by_field_name("declarator")) if name is not None else None
        )
        if self.exempt(
            "printing-helper", declared is not None and _DEBUG_FUNCTION.search(declared)
        ):
            return  # printing is its job
        if self.exempt(
            "uncalled-device-helper",
            declared is not None
            and f"{file.display_path}:{declared.split('::')[-1]}" in file.project.uncalled_printers,
        ):
            return  # a debugging helper nothing in the code base calls: no kernel pays for it
        args = node.child_by_field_name("arguments")
        values = [a for a in args.named_children if a.type != "comment"] if args is not None else []
        fmt = values[0] if values else None  # (a commented-out format before it is not it)
        says_error = False
        if fmt is not None and fmt.type in ("string_literal", "concatenated_string"):
            says_error = bool(_ERROR_MESSAGE.search(file.node_text(fmt)))
        elif fmt is not None and fmt.type == "identifier":
            # `printf(warning)`: the message is a variable; read what the function sets it to
            text = file.node_text(function)
            m = re.search(rf"\b{re.escape(file.node_text(fmt))}\b[^;]*=\s*([^;]*)", text)
            says_error = bool(m and _ERROR_MESSAGE.search(m.group(1)))
        if self.exempt("error-message", says_error):
            return
        block = next((a for a in file.ancestors(node) if a.type == "compound_statement"), None)
        # the message of a fatal error path, or just after the block it sits in:
        # `if (bad) { printf(...); } __trap();`
        fatal = block is not None and (
            _FATAL_AFTER.search(file.data[node.end_byte : block.end_byte])
            or _FATAL_AFTER.search(file.data[block.end_byte : block.end_byte + 120])
        )
        if self.exempt("fatal-error-path", fatal):
            return
        if file.is_program or file.is_test:
            if self.exempt("prints-only-kernel", prints_only(file, function)):
                return  # a program's kernel whose output is what it prints (a hello world)
            for a in file.ancestors(node):
                if self.exempt(
                    "one-thread-in-program",
                    a.type == "if_statement"
                    and _ONE_THREAD.search(file.node_text(a.child_by_field_name("condition"))),
                ):
                    return  # a demo or test driver printing its result from one thread
        for a in file.ancestors(node):
            if a.type in _PREPROC:
                guard, fallback = self._guard(file, a)
                if self.exempt("debug-build-only", _DEBUG_GUARD.search(guard)):
                    return  # compiled only for debugging
                if self.exempt("unsupported-arch-fallback", fallback and _ARCH_GUARD.search(guard)):
                    return  # the unsupported-architecture fallback
            if self.exempt(
                "runtime-opt-in",
                a.type == "if_statement"
                and _DEBUG_FLAG.search(file.node_text(a.child_by_field_name("condition"))),
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
