from gpulint.diagnostics import Severity
from gpulint.frontends.cuda.file import CudaFile
from gpulint.rule import Exemption, Rule

STATIC_LIMIT = 48 * 1024


class StaticSharedMemoryOver48KB(Rule):
    """
    ## What it does
    Finds a function whose statically sized `__shared__` arrays add up to more than 48 KB
    (49,152 bytes) per block. Sizes are evaluated from literals, `#define`, `constexpr`/`const`
    and `enum` values and known element types (`float`, `half`, `int4`...).

    ## Why is this bad?
    48 KB is the most static shared memory a block may declare. Above it the kernel does not
    compile (`ptxas error: uses too much shared data`), or, on older toolchains and in headers
    compiled for some targets only, fails at launch. The larger budgets of modern GPUs (up to
    227 KB per block on sm_90) are only reachable through dynamic shared memory with an explicit
    opt-in.

    ## Example
    ```cuda
    __global__ void tile(float* x) {
      __shared__ float buf[128][128];  // 64 KB
    }
    ```

    ## Use instead
    ```cuda
    __global__ void tile(float* x) {
      extern __shared__ float buf[];  // 128 * 128 floats
    }
    // host: opt in, then launch with the dynamic size
    cudaFuncSetAttribute(tile, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536);
    tile<<<grid, block, 65536, stream>>>(x);
    ```

    ## Known problems
    An array whose size or element type cannot be evaluated (a template parameter, a user
    struct) counts for nothing: a function over the limit only through such arrays is missed,
    and one over it with them is reported with the total of the others.

    ## References
    - [CUDA C++ Programming Guide: shared memory (compute capability 9.0)](https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#shared-memory-9-0)
    - [CUDA C++ Programming Guide: device memory specifiers](https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#shared)
    """

    code = "GPU810"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "static-shared-memory-over-48kb"
    severity = Severity.ERROR
    language = "cuda"
    triggers = ("__shared__",)
    message = (
        "static __shared__ arrays in this function take {total:,} bytes, above the 49,152-byte "
        "static limit per block; declare `extern __shared__` dynamic memory and opt in with "
        "`cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, {total})`"
    )
    tags = ("shared-memory",)

    EXEMPTIONS = (
        Exemption(
            "dynamic-shared-memory",
            "An `extern __shared__` array: dynamic shared memory, sized at launch, where a "
            "kernel opts in to more than 48 KB with `cudaFuncSetAttribute`.",
            """
__global__ void tile(float* x) {
  __shared__ float buf[64][64];  // 16 KB static
  extern __shared__ float dyn[];  // the rest, sized at launch
}
""",
        ),
    )

    VALID = [
        """
__global__ void tile(float* x) {
  __shared__ float buf[64][64];
}
""",
    ]
    INVALID = [
        """
#define TILE 128
__global__ void tile(float* x) {
  __shared__ float buf[TILE][TILE];
}
""",
    ]

    def finish(self, file: CudaFile):
        per_function: dict[int, list] = {}
        for decl in file.nodes("declaration"):
            if file.broken(decl) or not any(
                c.type == "type_qualifier" and file.node_text(c) == "__shared__"
                for c in decl.children
            ):
                continue
            if self.exempt(
                "dynamic-shared-memory",
                any(
                    c.type == "storage_class_specifier" and file.node_text(c) == "extern"
                    for c in decl.children
                ),
            ):
                continue
            function = file.enclosing_function(decl)
            if function is None:
                continue
            size = file.consts.array_bytes(decl)
            if size is None:
                continue
            per_function.setdefault(function.start_byte, []).append((decl, size))
        for decls in per_function.values():
            total = sum(size for _, size in decls)
            if total > STATIC_LIMIT:
                yield self.report(file, decls[0][0], total=total)
