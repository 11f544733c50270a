from gpulint.frontends.cuda.idioms import house_check_macro, is_runtime_call
from gpulint.rule import Rule


class DiscardedCudaError(Rule):
    """
    ## What it does
    Finds a CUDA runtime API call used as a statement, its `cudaError_t` return value discarded:
    not assigned, not compared, not returned, not wrapped in a check macro (`CUDA_CHECK`,
    `checkCudaErrors`, `AT_CUDA_CHECK`, `C10_CUDA_CHECK`, or a name configured in
    `[tool.gpulint.cuda] check-macros`). An explicit `(void)` cast is left alone, and so are
    `cudaGetLastError()` (which clears the error) and calls to a function of the same name the
    file defines itself, and calls in device code (the device runtime: some, such as
    `cudaGraphSetConditional`, return nothing).

    ## Why is this bad?
    CUDA reports failures only through return values. A `cudaMalloc` that ran out of memory
    leaves the pointer unset, a `cudaMemcpy` that failed leaves the buffer stale, and errors from
    earlier asynchronous work are reported by whichever call comes next: dropping them moves the
    failure to a later, unrelated place.

    ## Example
    ```cuda
    cudaMalloc(&d_x, bytes);
    cudaMemcpy(d_x, h_x, bytes, cudaMemcpyHostToDevice);
    ```

    ## Use instead
    ```cuda
    CUDA_CHECK(cudaMalloc(&d_x, bytes));
    CUDA_CHECK(cudaMemcpy(d_x, h_x, bytes, cudaMemcpyHostToDevice));
    ```

    ## References
    - [CUDA Runtime API: error handling](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__ERROR.html)
    - [CUDA C++ Programming Guide: error checking](https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#error-checking)
    """

    code = "GPU803"
    name = "discarded-cuda-error"
    language = "cuda"
    triggers = ("cuda",)
    message = "the cudaError_t returned by `{name}` is discarded; wrap it: `{macro}({call})`"
    tags = ("correctness",)

    VALID = [
        """
void f(float** d, size_t n) {
  CUDA_CHECK(cudaMalloc(d, n));
  cudaError_t err = cudaMemset(*d, 0, n);
  if (cudaDeviceSynchronize() != cudaSuccess) return;
  (void)cudaFree(*d);
  cudaGetLastError();
}
""",
    ]
    INVALID = [
        """
void f(float** d, size_t n) {
  cudaMalloc(d, n);
}
""",
    ]

    def visit_call_expression(self, node, file):
        name = file.call_name(node)
        if not is_runtime_call(name):
            return
        parent = node.parent
        if parent is None or parent.type != "expression_statement":
            return
        fn = node.child_by_field_name("function")
        if fn is not None and fn.type == "field_expression":
            return  # obj.cudaMalloc(...): a method, not the runtime
        if name in self._defined_here(file):
            return
        if file.is_device_function(file.enclosing_function(node)):
            return  # the device runtime (dynamic parallelism, cudaGraphSetConditional): other rules

        call = " ".join(file.node_text(node).split())
        if len(call) > 60:
            call = f"{name}(...)"
        yield self.report(file, node, name=name, call=call, macro=house_check_macro(file))

    @staticmethod
    def _defined_here(file) -> set[str]:
        cached = getattr(file, "_gpu803_defined", None)
        if cached is None:
            cached = set()
            for fn in file.nodes("function_definition"):
                declarator = file.function_name_node(fn)
                inner = (
                    declarator.child_by_field_name("declarator") if declarator is not None else None
                )
                if inner is not None:
                    cached.add(file.node_text(inner).split("::")[-1])
            file._gpu803_defined = cached
        return cached
