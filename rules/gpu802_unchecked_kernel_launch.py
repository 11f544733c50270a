import re

from gpulint.frontends.cuda.idioms import house_check_macro, is_check_name
from gpulint.rule import Rule

_CALLED = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_RUNTIME_CALL = re.compile(r"\bcuda[A-Z]\w*\s*\(")


class UncheckedKernelLaunch(Rule):
    """
    ## What it does
    Finds a kernel launch `kernel<<<...>>>(...)` with no launch error check after it in the same
    function: `cudaGetLastError()`, `cudaPeekAtLastError()`, `C10_CUDA_KERNEL_LAUNCH_CHECK()`,
    `getLastCudaError(...)`, or a check macro (`CUDA_CHECK`, `checkCudaErrors`, `AT_CUDA_CHECK`,
    `C10_CUDA_CHECK`, project spellings such as `CUDA_CHECK_ERROR`/`CHECK_CUDA`, and the names in
    `[tool.gpulint.cuda] check-macros`). A check anywhere later in the function counts, including
    after the loop or the dispatch macro around the launch. Device-side launches (dynamic
    parallelism) are left alone, and so are *launcher* functions: a function other than `main`
    that makes no CUDA runtime call of its own besides the launch (it computes a grid and
    launches) follows the common convention that its caller checks, as ggml and the CUDA
    samples do; the rule fires in the host code that orchestrates (allocates, copies, launches).

    ## Why is this bad?
    A launch returns nothing. A bad configuration (too many threads, too much shared memory, a
    missing kernel image for this GPU) makes the launch fail silently: the kernel never runs, the
    output buffer keeps stale values, and the error surfaces later in an unrelated call, or never.

    ## Example
    ```cuda
    add_kernel<<<blocks, 256, 0, stream>>>(out, a, b, n);
    return out;
    ```

    ## Use instead
    ```cuda
    add_kernel<<<blocks, 256, 0, stream>>>(out, a, b, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();  // or CUDA_CHECK(cudaGetLastError());
    return out;
    ```

    ## References
    - [CUDA C++ Programming Guide: error checking](https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#error-checking)
    - [CUDA Runtime API: cudaGetLastError](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__ERROR.html)
    """

    code = "GPU802"
    name = "unchecked-kernel-launch"
    language = "cuda"
    triggers = ("<<<",)
    message = "kernel launch is not checked: a failed launch goes unnoticed; add `{check}` after it"
    tags = ("correctness", "launch")

    VALID = [
        """
__global__ void k(float* x) {}
// A launcher: grid arithmetic and a launch; the caller checks.
void launch_k(float* x, int n, cudaStream_t s) {
  k<<<(n + 127) / 128, 128, 0, s>>>(x);
}
""",
        """
__global__ void k(float* x) {}
void run(float* x, cudaStream_t s) {
  k<<<1, 128, 0, s>>>(x);
  CUDA_CHECK(cudaGetLastError());
}
""",
        """
#include <torch/extension.h>
__global__ void k(float* x) {}
void run(float* x) {
  for (int i = 0; i < 4; ++i) {
    k<<<1, 128, 0, at::cuda::getCurrentCUDAStream()>>>(x);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
""",
    ]
    INVALID = [
        """
__global__ void k(float* x) {}
void run(float* x, cudaStream_t s) {
  CUDA_CHECK(cudaMemsetAsync(x, 0, 512, s));
  k<<<1, 128, 0, s>>>(x);
}
""",
        """
__global__ void k(float* x) {}
int main() {
  float* x;
  k<<<1, 128>>>(x);
  return 0;
}
""",
    ]

    def visit_call_expression(self, node, file):
        if file.launch_config(node) is None:
            return
        function = file.enclosing_function(node)
        if function is not None and file.is_device_function(function):
            return  # a device-side (dynamic parallelism) launch: checked differently, if at all
        scope = function or file.root
        body = file.data[scope.start_byte : scope.end_byte].decode("utf-8", errors="replace")
        if function is not None and not _orchestrates(body):
            return  # a launcher helper: by convention its caller checks
        after = file.data[node.end_byte : scope.end_byte].decode("utf-8", errors="replace")
        configured = tuple(self.settings.option("cuda", "check-macros", []))
        # The text, not the tree: a check inside a region tree-sitter could not parse still counts.
        for m in _CALLED.finditer(after):
            if is_check_name(m.group(1), configured):
                return
        for name in configured:
            if name in after:
                return
        check = (
            "C10_CUDA_KERNEL_LAUNCH_CHECK();"
            if file.is_torch_extension
            else f"{house_check_macro(file)}(cudaGetLastError());"
        )
        yield self.report(file, node, check=check)


def _orchestrates(function_text: str) -> bool:
    """`main`, or a function that calls the CUDA runtime besides launching."""
    head = function_text.split("(", 1)[0]
    if re.search(r"\bmain\s*$", head):
        return True
    return _RUNTIME_CALL.search(function_text) is not None
