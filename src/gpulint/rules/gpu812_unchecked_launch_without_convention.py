from gpulint.diagnostics import Severity
from gpulint.rules.gpu802_unchecked_kernel_launch import UncheckedKernelLaunch


class UncheckedLaunchWithoutConvention(UncheckedKernelLaunch):
    """
    ## What it does
    Off by default (`--extend-select GPU812`). GPU802's finding in a code base that does not
    check its kernel launches: of its library launches (tests and standalone programs left
    out; at least 5 of them) fewer than 15% are checked, or those checked all sit in one file
    (a header vendored from a project that checks) beside files that check none and launch
    more (at least 5), counting a launch as checked as
    GPU802 does (a check after it in its function, or in every caller of a launcher). A
    check that reads the last error only in a debug build (`#ifndef NDEBUG`, `#ifdef DEBUG`,
    an `if` on a `getenv` switch) covers its launch but is no release convention: a project
    whose launches only such checks cover is here, and the message says how many it checks
    only in debug builds.
    Everything else is as in GPU802, its exemptions included (the list below).

    It is opt-in because there the missing check is the project's house style, not a slip: a
    maintainer who checks none of a hundred launches will not thank a linter for a hundred
    findings, and in a PyTorch extension the next ATen operation raises a failed launch
    anyway (under its own name, which is the harm). Turn it on to adopt the convention
    PyTorch itself follows, a `C10_CUDA_KERNEL_LAUNCH_CHECK()` after every launch, or a
    `cudaGetLastError()` check in plain CUDA.

    ## Why is this bad?
    A launch returns nothing. A bad configuration (a grid sized by an empty input, too many
    threads or too much shared memory for this GPU, a missing kernel image) makes it fail
    silently: the kernel never runs, the output keeps stale values, and the error is reported
    by whichever CUDA call comes next, under the wrong name, or never.

    ## Example
    ```cuda
    scatter_kernel<<<BLOCKS(n), THREADS, 0, stream>>>(src, index, out, n);
    return out;
    ```

    ## Use instead
    ```cuda
    scatter_kernel<<<BLOCKS(n), THREADS, 0, stream>>>(src, index, out, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
    ```

    ## References
    - [PyTorch: `C10_CUDA_KERNEL_LAUNCH_CHECK` (c10/cuda/CUDAException.h)](https://github.com/pytorch/pytorch/blob/main/c10/cuda/CUDAException.h)
    - [CUDA Runtime API: cudaGetLastError](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__ERROR.html)
    """

    code = "GPU812"
    name = "unchecked-launch-without-convention"
    severity = Severity.INFO
    tier = "pedantic"
    precision = "medium"
    message = (
        "kernel launch is not checked, as {checked} of this project's {total} launches are"
        "{debug}: a failed launch goes unnoticed (or is reported by a later call); add `{check}` "
        "after it"
    )
    by_caller = (
        "kernel launch is not checked, nor by {caller} ({where}) that calls {kind} `{function}`, "
        "as {checked} of this project's {total} launches are{debug}: a failed launch goes "
        "unnoticed (or is reported by a later call); add `{check}` after the launch (or after "
        "that call)"
    )
    wants_convention = False

    VALID = [
        """
#include <torch/extension.h>
__global__ void fill(float* x, int n) {}
void fill_op(float* x, int n, cudaStream_t s) {
  fill<<<(n + 255) / 256, 256, 0, s>>>(x, n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
""",
        """
#include <torch/extension.h>
__global__ void init_done(int* done) {}
__global__ void step(float* x, int n) {}
void reset(int* done) {
  init_done<<<1, 1>>>(done);  // a fixed configuration no device rejects
}
void run(float* x, int n, cudaStream_t s) {
  // launches of a project that checks them: GPU802's, not GPU812's
  for (int i = 0; i < 4; ++i) step<<<(n + 255) / 256, 256, 0, s>>>(x, n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  step<<<(n + 127) / 128, 128, 0, s>>>(x, n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
""",
    ]
    INVALID = [
        """
#include <torch/extension.h>
__global__ void fill(float* x, int n) {}
__global__ void scale(float* x, float a, int n) {}
// an extension that checks none of its launches
void fill_op(float* x, int n, cudaStream_t s) {
  fill<<<(n + 255) / 256, 256, 0, s>>>(x, n);
}
void scale_op(float* x, float a, int n, cudaStream_t s) {
  scale<<<(n + 255) / 256, 256, 0, s>>>(x, a, n);
}
void fill_scale_op(float* x, float a, int n, cudaStream_t s) {
  fill<<<(n + 255) / 256, 256, 0, s>>>(x, n);
  scale<<<(n + 255) / 256, 256, 0, s>>>(x, a, n);
  scale<<<(n + 255) / 256, 256, 0, s>>>(x, a, n);
}
""",
        """
// a library whose launch checks read the last error only in a debug build
inline void debugCheck() {
#ifndef NDEBUG
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) abort();
#endif
}
#define debug_check() debugCheck()
__global__ void k(float* x, int n) {}
void a(float* x, int n, cudaStream_t s) { k<<<n / 256, 256, 0, s>>>(x, n); debug_check(); }
void b(float* x, int n, cudaStream_t s) { k<<<n / 256, 256, 0, s>>>(x, n); debug_check(); }
void c(float* x, int n, cudaStream_t s) { k<<<n / 256, 256, 0, s>>>(x, n); debug_check(); }
void d(float* x, int n, cudaStream_t s) { k<<<n / 256, 256, 0, s>>>(x, n); debug_check(); }
void e(float* x, int n, cudaStream_t s) {
  k<<<n / 256, 256, 0, s>>>(x, n);  // checked nowhere: no release convention, so GPU812
}
void step(float* x, int n, cudaStream_t s) { e(x, n, s); }
""",
    ]
