from gpulint.diagnostics import Severity
from gpulint.frontends.cuda.file import CudaFile
from gpulint.rule import Exemption, Rule

MAX_THREADS = 1024


class BlockSizeNotWarpMultiple(Rule):
    """
    ## What it does
    Finds a kernel launch `<<<grid, block>>>` whose block size evaluates to a number of threads
    that is not a multiple of 32 (warning) or exceeds 1,024 (error). The block is evaluated from
    literals, `#define`, `constexpr`/`const` variables, `enum` values, `dim3 block(16, 16)` and
    simple arithmetic.

    ## Why is this bad?
    The GPU schedules threads in warps of 32. A block of 100 threads occupies four warps, and the
    last one runs 4 of its 32 lanes: an eighth of the block's issue slots do nothing, and the
    partial warp still takes a full share of the SM's warp slots. More than 1,024 threads per
    block is not a slow launch but a failed one: the launch returns
    `cudaErrorInvalidConfiguration` and the kernel never runs.

    ## Example
    ```cuda
    #define THREADS 100
    scale<<<(n + THREADS - 1) / THREADS, THREADS>>>(x, n);
    ```

    ## Use instead
    ```cuda
    #define THREADS 128
    scale<<<(n + THREADS - 1) / THREADS, THREADS>>>(x, n);
    ```

    ## Known problems
    A block size that cannot be evaluated (a parameter, a template parameter, a value computed
    at run time) is not judged: `<<<blocks, threads>>>` whose callers pass `threads = 100` is
    missed.

    ## References
    - [CUDA C++ Best Practices Guide: thread and block heuristics](https://docs.nvidia.com/cuda/cuda-c-best-practices-guide/index.html#thread-and-block-heuristics)
    - [CUDA C++ Programming Guide: thread hierarchy](https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#thread-hierarchy)
    """

    code = "GPU801"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "block-size-not-warp-multiple"
    severity = Severity.WARNING
    language = "cuda"
    triggers = ("<<<",)
    message = (
        "block of {threads} threads is not a multiple of the 32-thread warp: the last warp runs "
        "{lanes} of 32 lanes; use {suggest} (a multiple of 32; start at 128-256)"
    )
    too_big = (
        "block of {threads} threads exceeds the 1,024-thread limit: the launch fails with "
        "cudaErrorInvalidConfiguration; use at most 1024 (start at 128-256)"
    )
    tags = ("launch-config",)

    EXEMPTIONS = (
        Exemption(
            "one-thread-block",
            "A block of one thread (`<<<1, 1>>>` setup kernels, `<<<rows, 1>>>`): a kernel "
            "written for one thread per block on purpose, not a warp-sized block that came out "
            "wrong.",
            """
__global__ void prefix_sum_serial(float* x, int n) {}
void scan_rows(float* x, int rows, int n) { prefix_sum_serial<<<rows, 1>>>(x, n); }
""",
        ),
        Exemption(
            "single-block",
            "A launch of a single block (`<<<1, 4>>>` in a demo of a per-thread API): one block "
            "cannot fill the GPU whatever its size, so its partial warp costs nothing measurable.",
            """
__global__ void init(float* x) {}
void run(float* x) { init<<<1, 4>>>(x); }
""",
        ),
    )

    VALID = [
        """
__global__ void scale(float* x, int n) {}
void run(float* x, int n) {
  dim3 block(16, 16);
  scale<<<(n + 255) / 256, block>>>(x, n);
}
""",
        """
__global__ void scale(float* x, int n) {}
void run(float* x, int n, int threads) {
  scale<<<(n + threads - 1) / threads, threads>>>(x, n);
}
""",
    ]
    INVALID = [
        """
#define THREADS 100
__global__ void scale(float* x, int n) {}
void run(float* x, int n) {
  scale<<<(n + THREADS - 1) / THREADS, THREADS>>>(x, n);
}
""",
        """
__global__ void scale(float* x, int n) {}
void run(float* x, int n) {
  dim3 block(64, 32);
  scale<<<n, block>>>(x, n);
}
""",
    ]

    def visit_call_expression(self, node, file: CudaFile):
        config = file.launch_config(node)
        if not config or len(config) < 2:
            return
        block = config[1]
        threads = file.consts.threads(block, node)
        if threads is None or self.exempt("one-thread-block", threads == 1) or threads < 1:
            return  # (below 1: an evaluation gone wrong, not a launch to judge)
        if threads > MAX_THREADS:
            yield self.report(file, block, self.too_big, severity=Severity.ERROR, threads=threads)
        elif threads % 32 and not self.exempt(
            "single-block", file.consts.threads(config[0], node) == 1
        ):
            suggest = max(32, (threads + 31) // 32 * 32)
            yield self.report(file, block, threads=threads, lanes=threads % 32, suggest=suggest)
