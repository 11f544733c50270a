import re

from gpulint.frontends.cuda.buildmacros import undefined_macro_branch
from gpulint.frontends.cuda.file import CudaFile
from gpulint.rule import Exemption, Rule


class CudaMallocManaged(Rule):
    """
    ## What it does
    Finds calls to `cudaMallocManaged` (unified memory) in library code, and in programs that
    time their GPU work (`cudaEventElapsedTime`, warm-up runs), where page faults count.

    ## Why is this bad?
    Managed memory migrates on demand, page by page: the first GPU touch of each page faults,
    stalls the kernel and moves it over PCIe/NVLink at a fraction of the copy bandwidth, and a
    host touch moves it back. Kernels that run fine with explicit buffers run several times
    slower, with timings that depend on access order. Explicit device buffers filled by
    `cudaMemcpyAsync` from pinned host memory move at full bandwidth and overlap with compute
    (on an H200, pinned host-to-device copies measured 55 GB/s against 6–10 GB/s pageable).

    ## Example
    ```cuda
    float* x;
    cudaMallocManaged(&x, n * sizeof(float));
    ```

    ## Use instead
    ```cuda
    float *h_x, *d_x;
    cudaMallocHost(&h_x, n * sizeof(float));
    cudaMalloc(&d_x, n * sizeof(float));
    cudaMemcpyAsync(d_x, h_x, n * sizeof(float), cudaMemcpyHostToDevice, stream);
    ```

    ## References
    - [CUDA C++ Programming Guide: unified memory programming](https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#unified-memory-programming)
    - [CUDA C++ Best Practices Guide: pinned memory](https://docs.nvidia.com/cuda/cuda-c-best-practices-guide/index.html#pinned-memory)
    """

    code = "GPU807"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "cuda-malloc-managed"
    language = "cuda"
    triggers = ("cudaMallocManaged",)
    message = (
        "`cudaMallocManaged` pages data over on demand (page faults inside kernels); allocate with "
        "`cudaMalloc` and copy explicitly from pinned memory (`cudaMallocHost`) with `cudaMemcpyAsync`"
    )
    bench = "h2d"
    tags = ("memory",)

    EXEMPTIONS = (
        Exemption(
            "user-opt-in",
            "A call under an `if` the user opts in with (`if (getenv(...))`, `if (m_managed)`, "
            "`if (use_unified_memory)`): managed memory is a choice made at run time.",
            """
void alloc(float** d, size_t n, bool managed) {
  if (managed) {
    CUDA_CHECK(cudaMallocManaged(d, n));
  }
}
""",
        ),
        Exemption(
            "unbuilt-macro-branch",
            "A call in an `#if USE_MANAGED`/`#ifdef UNIFIED` branch that no build takes: no "
            "source of the checked tree `#define`s the macro, no build file in the folders "
            "above (`CMakeLists.txt`, `setup.py`, `Makefile`...) names it, and it is not a "
            "compiler, platform or library macro (`__CUDA_ARCH__`, `NDEBUG`, `_WIN32`), which "
            "a toolchain defines unseen.",
            """
void alloc(float** d, size_t n) {
#ifdef USE_MANAGED_BUFFERS
  CUDA_CHECK(cudaMallocManaged(d, n));
#else
  CUDA_CHECK(cudaMalloc(d, n));
#endif
}
""",
        ),
        Exemption(
            "comment-says-why",
            "A call with a comment in the six lines above saying managed memory is meant "
            "(`// managed memory: fall back when the model does not fit`, an oversubscription "
            "design).",
            """
void alloc_state(float** d, size_t n) {
  // Oversubscription: the optimizer state pages to host memory when the GPU is full.
  CUDA_CHECK(cudaMallocManaged(d, n));
}
""",
        ),
        Exemption(
            "program-about-unified-memory",
            "A file under a folder named for unified memory (`um`, `uvm`, `unified`, `managed`: "
            "`multi_threaded_um/`): a program about unified memory.",
            """
void alloc(float** d, size_t n) { CUDA_CHECK(cudaMallocManaged(d, n)); }
""",
            filename="samples/unified_memory/alloc.cu",
        ),
        Exemption(
            "comment-names-managed-earlier",
            "A call after a comment earlier in its function that names managed or unified "
            "memory (one comment for the input and output buffers).",
            """
void alloc_io(float2** in, float** out, float** scratch, size_t n) {
  // Allocate managed memory for the input and the output
  CUDA_CHECK(cudaMallocManaged(in, n * sizeof(float2)));
  size_t bytes = n * sizeof(float);
  size_t pad = 256 - bytes % 256;
  bytes += pad;
  CUDA_CHECK(cudaMalloc(scratch, bytes));
  CUDA_CHECK(cudaMemset(*scratch, 0, bytes));
  CUDA_CHECK(cudaMallocManaged(out, bytes));
}
""",
        ),
        Exemption(
            "untimed-sample-program",
            "A call in a sample program (a file defining `main`, and its helpers) that times "
            "nothing: a few page faults in a demo of another API are not its point.",
            """
__global__ void fft_kernel(float2* in, float* out) {}
int main() {
  float2* in;
  CUDA_CHECK(cudaMallocManaged(&in, 512 * sizeof(float2)));
  float* out;
  CUDA_CHECK(cudaMallocManaged(&out, 512 * sizeof(float)));
  fft_kernel<<<1, 64>>>(in, out);
  CUDA_CHECK(cudaDeviceSynchronize());
  return 0;
}
""",
        ),
    )

    VALID = [
        """
void f(float** d, size_t n) { CUDA_CHECK(cudaMalloc(d, n)); }
""",
    ]
    INVALID = [
        """
void f(float** d, size_t n) { CUDA_CHECK(cudaMallocManaged(d, n)); }
""",
        """
__global__ void saxpy(float* y, const float* x, int n) {}
int main() {
  int n = 1 << 24;
  float *x, *y;
  CUDA_CHECK(cudaMallocManaged(&x, n * sizeof(float)));
  CUDA_CHECK(cudaMallocManaged(&y, n * sizeof(float)));
  cudaEvent_t start, stop;
  cudaEventCreate(&start); cudaEventCreate(&stop);
  cudaEventRecord(start);
  saxpy<<<(n + 255) / 256, 256>>>(y, x, n);
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms;
  cudaEventElapsedTime(&ms, start, stop);
  printf("%.3f ms\\n", ms);
  return 0;
}
""",
    ]

    def visit_call_expression(self, node, file: CudaFile):
        if file.call_name(node) != "cudaMallocManaged":
            return
        opted = any(
            a.type == "if_statement"
            and _OPT_IN.search(file.node_text(a.child_by_field_name("condition")))
            for a in file.ancestors(node)
        )
        if self.exempt("user-opt-in", opted):
            return  # `if (getenv("..._UNIFIED_MEMORY"))`, `if (m_managed)`
        if self.exempt("unbuilt-macro-branch", undefined_macro_branch(file, node) is not None):
            return  # under an `#if USE_MANAGED` that no source or build file defines: dead code
        if self.exempt("comment-says-why", _SAYS_WHY.search(file.comment_before(node, lines=6))):
            return  # a fallback, a design
        if self.exempt("program-about-unified-memory", _ABOUT_UM.search(file.display_path)):
            return  # `multi_threaded_um/`, `managed_*.cu`
        function = file.enclosing_function(node)
        if self.exempt(
            "comment-names-managed-earlier",
            function is not None
            and _SAYS_MANAGED.search(file.data[function.start_byte : node.start_byte]),
        ):
            return
        if self.exempt(
            "untimed-sample-program", file.in_program(node) and not _TIMES.search(file.data)
        ):
            return
        yield self.report(file, node)


# A comment naming managed or unified memory (`// Allocate managed memory for input/output`).
_SAYS_MANAGED = re.compile(rb"(?i)//[^\n]*(managed|unified)|/\*(?:[^*]|\*(?!/))*(managed|unified)")
# What a benchmark does: it times the GPU work, where page faults would count.
# (a compile step timed with std::chrono is not a benchmark of the GPU work)
_TIMES = re.compile(rb"cudaEventElapsedTime|nvtxRange|(?i:bench|warm_?up)")


_OPT_IN = re.compile(r"(?i)getenv|managed|unified|\buvm\b|\bum\b|oversubscri")
_SAYS_WHY = re.compile(
    r"(?i)managed|unified|\buvm\b|oversubscri|fallback|fall back|on purpose|deliberate|"
    r"intentional|so that|because|page[ds]? (to|on|out)|evict"
)
# a folder of a program about unified memory: `multi_threaded_um/`, `unified_memory/`
_ABOUT_UM = re.compile(r"(?i)(^|/)([\w.-]*[_-])?(um|uvm|unified|managed)([_-][\w.-]*)?/")
