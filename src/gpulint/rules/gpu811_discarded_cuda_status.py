from gpulint.diagnostics import Severity
from gpulint.frontends.cuda import discarded
from gpulint.frontends.cuda.discarded import Discard
from gpulint.rule import Exemption
from gpulint.rules.gpu803_discarded_cuda_error import DiscardedCudaError


class DiscardedCudaStatus(DiscardedCudaError):
    """
    ## What it does
    Off by default (`--extend-select GPU811`). Finds the CUDA runtime calls GPU803 leaves out
    whose `cudaError_t` is discarded: synchronisation (`cudaDeviceSynchronize`,
    `cudaStreamSynchronize`), events and streams (`cudaEventRecord`, `cudaStreamCreate`),
    `cudaSetDevice`, queries whose result the code never reads, and frees or destroys outside
    teardown. GPU803's exemptions hold here too (a call the next statement checks, a `(void)`
    cast, the project's own wrappers, device code, ...: the list below), besides teardown and
    outputs read later.
    Also GPU803's calls (copies, memsets, allocations, attribute calls) of a kind the code
    does not check by convention: the file, where it makes at least 3 calls of the kind, else
    the nearest folder above it that makes at least 3 (up to the top of the tree: a
    `models/` folder that checks none of its copies beside a `utils/` that checks its own),
    else the checked tree, uses the status of fewer than 15% of them; where the tree makes fewer
    than 3, all its calls of these kinds are counted, and where those are fewer than 3 too,
    its kernel launches (a code base that checks none of them, see GPU812).

    ## Why is this bad?
    These failures rarely corrupt results by themselves, but CUDA reports errors from earlier
    asynchronous work through whichever call comes next: a dropped `cudaDeviceSynchronize`
    status is often the only place a kernel fault would have surfaced. Worth turning on for
    code that must fail loudly (services, CI harnesses); noise in demos and benchmarks.

    ## Example
    ```cuda
    step<<<blocks, 256, 0, stream>>>(x, n);
    cudaStreamSynchronize(stream);
    ```

    ## Use instead
    ```cuda
    step<<<blocks, 256, 0, stream>>>(x, n);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    ```

    ## References
    - [CUDA Runtime API: error handling](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__ERROR.html)
    """

    code = "GPU811"
    name = "discarded-cuda-status"
    severity = Severity.INFO
    tier = "pedantic"
    precision = "medium"
    message = (
        "the cudaError_t returned by `{name}` is discarded: errors from earlier asynchronous work "
        "surface here and are lost; check it: `{suggest}`"
    )
    house_message = (
        "the cudaError_t returned by `{name}` is discarded, as this {where} checks {used} of its "
        "{total} {kind}: a failure leaves results silently wrong; check it: `{suggest}`"
    )
    grades = ("status", "house")

    EXEMPTIONS = DiscardedCudaError.EXEMPTIONS + (
        Exemption(
            "teardown",
            "A free or destroy (`cudaFree`, `cudaStreamDestroy`, ...) in teardown: a destructor, "
            "a `cleanup()`/`free_*`/`release_*` function, an error path, after a `cleanup:` "
            "label, at the end of `main` or at file scope: its status matters only as a report "
            "of earlier failures, and the program is letting go.",
            """
struct Buffer {
  float* d;
  ~Buffer() { cudaFree(d); }
};
""",
        ),
        Exemption(
            "output-read-later",
            "A query or event call (`cudaEventElapsedTime(&ms, ...)`, "
            "`cudaPointerGetAttributes(&attr, p)`) whose output the code reads later in the "
            "function: a failure shows in that value.",
            """
void time_it(cudaEvent_t a, cudaEvent_t b) {
  float ms;
  cudaEventElapsedTime(&ms, a, b);
  printf("%f ms\\n", ms);
}
""",
        ),
    )

    VALID = [
        """
void f(float* d, cudaStream_t s) {
  CUDA_CHECK(cudaStreamSynchronize(s));
}
""",
    ]
    INVALID = [
        """
void f(float* d, cudaStream_t s) {
  cudaStreamSynchronize(s);
}
""",
        """
void load_weights(float* d, const float* h, size_t n) {
  // a kind of call this code never checks: GPU811, not GPU803
  cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(d + n, h + n, n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(d + 2 * n, h + 2 * n, n * sizeof(float), cudaMemcpyHostToDevice);
}
""",
    ]

    def _nothing_lost(self, found: Discard) -> None:
        self.exempt("teardown", found.spared == discarded.TEARDOWN_CONTEXT)
        self.exempt("output-read-later", found.spared == discarded.OUTPUT_READ_LATER)
