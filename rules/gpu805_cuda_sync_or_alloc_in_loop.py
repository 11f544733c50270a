import re

from gpulint.frontends.cuda.file import LOOP_TYPES, declared_names
from gpulint.rule import Rule

SYNCS = {"cudaDeviceSynchronize", "cudaStreamSynchronize"}
ALLOCS = {"cudaMalloc", "cudaFree"}
# After the sync, the host reads or times the iteration's result: the sync is the point.
_HOST_NEEDS_RESULT = re.compile(
    rb"\bbreak\b|\breturn\b|DeviceToHost|cudaMemcpyDefault|ElapsedTime|StopTimer|stopTimer|TimerValue|chrono|gettimeofday"
)
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


class CudaSyncOrAllocInLoop(Rule):
    """
    ## What it does
    Finds `cudaDeviceSynchronize`, `cudaStreamSynchronize`, `cudaMalloc` or `cudaFree` inside a
    host loop that does GPU work on every iteration: the loop body launches a kernel, or it both
    allocates and frees. Loops that only set up or tear down a list of buffers or streams
    (`for (i...) cudaFree(bufs[i]);`, `for (s...) cudaStreamSynchronize(streams[s]);`) are left
    alone (the call's arguments use the loop variable), and so are syncs after which the host reads
    or times the iteration's result (a device-to-host copy, a `break`, a timer), and code outside
    loops.

    ## Why is this bad?
    A synchronisation drains the GPU queue: the CPU waits for the last kernel, then launches the
    next one into an idle device, so each iteration pays a launch-latency bubble. `cudaMalloc`
    and `cudaFree` are worse: `cudaFree` synchronises the whole device, and both call into the
    driver. Inside a loop these costs are paid on every iteration.

    ## Example
    ```cuda
    for (int it = 0; it < iters; ++it) {
      cudaMalloc(&tmp, bytes);
      step<<<blocks, 256>>>(tmp, x, n);
      cudaFree(tmp);
    }
    ```

    ## Use instead
    ```cuda
    cudaMalloc(&tmp, bytes);
    for (int it = 0; it < iters; ++it) {
      step<<<blocks, 256>>>(tmp, x, n);
    }
    cudaDeviceSynchronize();
    cudaFree(tmp);
    ```

    ## References
    - [CUDA C++ Best Practices Guide: asynchronous transfers and overlapping](https://docs.nvidia.com/cuda/cuda-c-best-practices-guide/index.html#asynchronous-and-overlapping-transfers-with-computation)
    - [CUDA Runtime API: cudaFree synchronises the device](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)
    """

    code = "GPU805"
    name = "cuda-sync-or-alloc-in-loop"
    language = "cuda"
    triggers = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaMalloc", "cudaFree")
    message = "`{name}` runs on every iteration of the loop at line {loop}; {advice}"
    tags = ("sync", "memory")

    VALID = [
        """
__global__ void step(float* x) {}
void run(float* x, int iters) {
  for (int it = 0; it < iters; ++it) step<<<1, 128>>>(x);
  cudaDeviceSynchronize();
}
""",
        """
void cleanup(float** bufs, int n) {
  for (int i = 0; i < n; ++i) cudaFree(bufs[i]);
}
""",
    ]
    INVALID = [
        """
__global__ void step(float* x) {}
void run(float* x, int iters) {
  for (int it = 0; it < iters; ++it) {
    step<<<1, 128>>>(x);
    cudaDeviceSynchronize();
  }
}
""",
    ]

    def visit_call_expression(self, node, file):
        name = file.call_name(node)
        if name not in SYNCS and name not in ALLOCS:
            return
        function = file.enclosing_function(node)
        if not file.is_host_function(function):
            return
        loop = None
        for a in file.ancestors(node):
            if a.type == "function_definition" or a.type == "lambda_expression":
                break
            if a.type in LOOP_TYPES:
                loop = a
                break
        if loop is None or file.broken(loop):
            return
        if self._indexed_by_loop_variable(file, node, loop):
            return  # per-element setup/teardown: `cudaMalloc(&bufs[i], ...)`, `cudaStreamSynchronize(streams[i])`
        body = file.data[loop.start_byte : loop.end_byte]
        rest = file.data[node.end_byte : loop.end_byte]
        launches = b"<<<" in body
        if name in ALLOCS:
            both = b"cudaMalloc(" in body and b"cudaFree(" in body
            if not (both or launches):
                return
            advice = "allocate once before the loop and free after it (or use a caching allocator)"
        else:
            if not launches or _HOST_NEEDS_RESULT.search(rest) or b"DeviceToHost" in body:
                return
            if any(a.type == "if_statement" for a in _between(node, loop)):
                return  # a guarded, one-off sync (`if (i == 0) { sync; start timer; }`)
            advice = "synchronise once after the loop, or wait on an event only when the host needs the result"
        loop_line = file.span(loop)[0]
        yield self.report(file, node, name=name, loop=loop_line, advice=advice)

    @staticmethod
    def _indexed_by_loop_variable(file, call, loop) -> bool:
        if loop.type != "for_statement":
            return False
        init = loop.child_by_field_name("initializer")
        if init is None:
            return False
        names = set(declared_names(init)) if init.type == "declaration" else set()
        if init.type == "assignment_expression":
            left = init.child_by_field_name("left")
            if left is not None:
                names.add(file.node_text(left))
        args = call.child_by_field_name("arguments")
        return bool(names & set(_IDENT.findall(file.node_text(args))))


def _between(node, loop):
    a = node.parent
    while a is not None and a != loop:
        yield a
        a = a.parent
