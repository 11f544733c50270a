import re

from gpulint.frontends.cuda.file import LOOP_TYPES, CudaFile, declared_names
from gpulint.frontends.cuda.idioms import (
    communicates_after,
    explained_sync,
    function_name,
    timed_loop,
)
from gpulint.rule import Rule

SYNCS = {"cudaDeviceSynchronize", "cudaStreamSynchronize"}
ALLOCS = {"cudaMalloc", "cudaFree"}
# After the sync, the host reads or times the iteration's result: the sync is the point.
_HOST_NEEDS_RESULT = re.compile(
    rb"\bbreak\b|\breturn\b|DeviceToHost|cudaMemcpyDefault|ElapsedTime|StopTimer|stopTimer|TimerValue|chrono|gettimeofday"
)
# a loop that times each iteration (a tuning sweep over configurations)
_TIMED = re.compile(rb"ElapsedTime|chrono|gettimeofday|clock_gettime|[Tt]imer|GpuTimer|time\(")
_PER_DEVICE = re.compile(rb"cudaSetDevice\s*\(")
_TORCH_SYNCS = {"synchronize", "device_synchronize"}  # torch::cuda::synchronize()
_OP_ENTRY = re.compile(r"(?i)(^|_)(forward|backward|fwd|bwd)($|_)")
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


class CudaSyncOrAllocInLoop(Rule):
    """
    ## What it does
    Finds `cudaDeviceSynchronize`, `cudaStreamSynchronize`, `cudaMalloc` or `cudaFree` inside a
    host loop that does GPU work on every iteration: the loop body launches a kernel (itself, or
    through a host function of the checked tree every definition of which launches one: a
    launcher template `launch_step<T, 256>(x, n, stream)` in a header), or it both allocates
    and frees. Loops that only set up or tear down a list of buffers or streams
    (`for (i...) cudaFree(bufs[i]);`, `for (s...) cudaStreamSynchronize(streams[s]);`) are left
    alone (the call's arguments use the loop variable), and so are syncs after which the host reads
    or times the iteration's result (a device-to-host copy, a `break`, a timer), loops that time
    each iteration (a tuning sweep over configurations, also when it allocates each
    configuration's buffers), loops over devices
    (`cudaSetDevice(dev)` in the body), `cudaFree(0)` (the context-creation idiom), and code
    outside loops. A sync is also left alone where it is the point of the loop: a benchmark
    whose repetitions a clock brackets (a clock read just before the loop and just after it:
    each repetition's sync is part of what it measures), a sync whose comment says what it is
    for (`// barrier: wait for every peer before the next exchange`), and one after which the
    iteration hands device buffers to host-driven communication (`MPI_Sendrecv` of a halo, an
    `MPI_Barrier`). A comment that only names the call (`// sync`) is no reason.

    In a PyTorch extension it also finds a device-wide sync (`cudaDeviceSynchronize`,
    `torch::cuda::synchronize`) in an op's `forward`/`backward` function (`*_forward`,
    `*_fwd`...), unguarded: it runs on every call of the op.

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
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "cuda-sync-or-alloc-in-loop"
    language = "cuda"
    triggers = (
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaMalloc",
        "cudaFree",
        "synchronize",
    )
    message = "`{name}` runs on every iteration of the loop at line {loop}; {advice}"
    per_op = (
        "`{name}` in `{op}` waits for the whole device on every call of the op: the host "
        "stalls and the next launches start on an idle GPU; drop it (PyTorch orders work on "
        "the current stream) or sync only where the host reads a result"
    )
    tags = ("sync", "memory")

    VALID = [
        """
__global__ void step(float* x) {}
void sweep(float* x, cudaEvent_t a, cudaEvent_t b) {
  for (int block : {128, 256, 512}) {  // each configuration timed
    cudaEventRecord(a);
    step<<<1, block>>>(x);
    cudaEventRecord(b);
    cudaDeviceSynchronize();
    float ms;
    cudaEventElapsedTime(&ms, a, b);
  }
}
""",
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
    VALID.append(
        """
void tune(const int* ms, const int* ns, int count) {
  for (int c = 0; c < count; ++c) {
    float* buf;
    CUDA_CHECK(cudaMalloc(&buf, (size_t)ms[c] * ns[c] * sizeof(float)));
    cudaEvent_t start, stop;
    cudaEventCreate(&start); cudaEventCreate(&stop);
    cudaEventRecord(start);
    for (int it = 0; it < 10; ++it) gemm_kernel<<<ms[c] / 64, 256>>>(buf, ms[c], ns[c]);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms_taken;
    cudaEventElapsedTime(&ms_taken, start, stop);
    printf("%d x %d: %.3f ms\\n", ms[c], ns[c], ms_taken / 10);
    CUDA_CHECK(cudaFree(buf));
  }
}
"""
    )
    INVALID = [
        """
#include <torch/extension.h>
torch::Tensor my_op_forward(torch::Tensor x) {
  auto y = torch::empty_like(x);
  launch_my_op(x, y);
  cudaDeviceSynchronize();
  return y;
}
""",
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

    def visit_call_expression(self, node, file: CudaFile):
        name = file.call_name(node)
        if name in _TORCH_SYNCS or name in SYNCS:
            yield from self._sync_per_op_call(node, file, name)
        if name not in SYNCS and name not in ALLOCS:
            return
        function = file.enclosing_function(node)
        if not file.is_host_function(function):
            return
        args = node.child_by_field_name("arguments")
        if name == "cudaFree" and file.node_text(args).replace(" ", "") in (
            "(0)",
            "(nullptr)",
            "(NULL)",
        ):
            return  # `cudaFree(0)`: the idiom that creates the context, not a free
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
        launches = b"<<<" in body or _calls_launching(file, body)
        if name in ALLOCS:
            both = b"cudaMalloc(" in body and b"cudaFree(" in body
            if not (both or launches):
                return
            if _TIMED.search(body):
                return  # a tuning sweep: each configuration gets its buffers, then is timed
            advice = "allocate once before the loop and free after it (or use a caching allocator)"
        else:
            if not launches or _HOST_NEEDS_RESULT.search(rest) or b"DeviceToHost" in body:
                return
            if any(a.type == "if_statement" for a in _between(node, loop)):
                return  # a guarded, one-off sync (`if (i == 0) { sync; start timer; }`)
            if _TIMED.search(body):
                return  # a tuning sweep: each iteration times its configuration
            if timed_loop(file, loop):
                return  # a benchmark timing its repetitions: the sync is part of what it measures
            if explained_sync(file, node) or communicates_after(file, node, loop):
                return  # a documented barrier; a halo the host sends by MPI once kernels finish
            advice = "synchronise once after the loop, or wait on an event only when the host needs the result"
        if _PER_DEVICE.search(body):
            return  # each iteration sets up another device (`cudaSetDevice(dev)`)
        loop_line = file.span(loop)[0]
        yield self.report(file, node, name=name, loop=loop_line, advice=advice)

    def _sync_per_op_call(self, node, file: CudaFile, name):
        """A device-wide sync in an extension op's forward/backward: every call of the op
        stalls the host until the GPU drains."""
        if not file.is_torch_extension or name == "cudaStreamSynchronize":
            return
        fn = node.child_by_field_name("function")
        if fn is not None and fn.type == "field_expression":
            return  # `stream.synchronize()`: one stream, not the device
        function = file.enclosing_function(node)
        if function is None or not file.is_host_function(function):
            return
        op = function_name(file, function) or ""
        if not _OP_ENTRY.search(op):
            return
        for a in file.ancestors(node):
            if a.type in ("if_statement", "preproc_if", "preproc_ifdef"):
                return  # guarded: debug mode, a first call, a profiling switch
        yield self.report(file, node, self.per_op, name=name, op=op)

    @staticmethod
    def _indexed_by_loop_variable(file: CudaFile, call, loop) -> bool:
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


# a call, template arguments and all: `launch_scale<T, 256>(...)`
_CALLED = re.compile(rb"\b([A-Za-z_]\w*)\s*(?:<(?:[^;(){}]|\([^;(){}]*\))*>\s*)?\(")


def _calls_launching(file: CudaFile, body: bytes) -> bool:
    """The loop body calls a host function of the project that launches a kernel (a launcher
    template, `launch_scale<T>(x, n, stream)`): GPU work on every iteration, as a `<<<`."""
    launching = file.project.launching
    if not launching:
        return False
    return any(m.decode("ascii", "replace") in launching for m in _CALLED.findall(body))


def _between(node, loop):
    a = node.parent
    while a is not None and a != loop:
        yield a
        a = a.parent
