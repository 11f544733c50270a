import re

from gpulint.frontends.cuda.callgraph import functor_objects
from gpulint.frontends.cuda.file import LOOP_TYPES, CudaFile, declared_names
from gpulint.frontends.cuda.syncloops import communicates_after, explained_sync, timed_loop
from gpulint.frontends.cuda.syntax import function_name
from gpulint.rule import Exemption, Rule

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
    launcher template `launch_step<T, 256>(x, n, stream)` in a header, or an object of a functor
    class whose `operator()` launches: `ftor(stream, x, n)`), or it both allocates
    and frees. Code outside loops is not its business. A comment that only names the call
    (`// sync`) is no reason for a sync (see `explained-sync`).
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

    EXEMPTIONS = (
        Exemption(
            "context-creation",
            "`cudaFree(0)`: the idiom that creates the context, not a free.",
            """
__global__ void step(float* x) {}
void warm(float* x, int n) {
  for (int d = 0; d < n; ++d) {
    cudaFree(0);
    step<<<1, 128>>>(x);
  }
}
""",
        ),
        Exemption(
            "per-element-setup",
            "A call whose arguments use the loop variable (`for (i...) cudaFree(bufs[i]);`, "
            "`cudaStreamSynchronize(streams[s])`): setting up or tearing down a list of buffers "
            "or streams.",
            """
void cleanup(float** bufs, int n) {
  for (int i = 0; i < n; ++i) cudaFree(bufs[i]);
}
""",
        ),
        Exemption(
            "no-gpu-work-in-loop",
            "A loop that launches nothing (and, for an allocation, does not both allocate and "
            "free): no GPU work is held up on each iteration.",
            """
void setup(float** a, float** b, int n) {
  for (int tries = 0; tries < 3; ++tries) {
    if (cudaMalloc(a, n) == cudaSuccess) break;
  }
}
""",
        ),
        Exemption(
            "timed-sweep",
            "A loop that times each iteration (a tuning sweep over configurations), also when it "
            "allocates each configuration's buffers.",
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
""",
        ),
        Exemption(
            "host-needs-result",
            "A sync after which the host reads the iteration's result (a device-to-host copy, a "
            "`break` or `return` on it, a timer read).",
            """
__global__ void step(float* x, int* done) {}
void solve(float* x, int* done, int* host_done) {
  for (;;) {
    step<<<64, 256>>>(x, done);
    cudaDeviceSynchronize();
    cudaMemcpy(host_done, done, sizeof(int), cudaMemcpyDeviceToHost);
    if (*host_done) break;
  }
}
""",
        ),
        Exemption(
            "guarded-sync",
            "A sync under an `if` inside the loop (`if (i == 0) { sync; start timer; }`): a "
            "one-off, not every iteration's.",
            """
__global__ void step(float* x) {}
void run(float* x, int iters) {
  for (int it = 0; it < iters; ++it) {
    step<<<1, 128>>>(x);
    if (it == 0) cudaDeviceSynchronize();
  }
}
""",
        ),
        Exemption(
            "timed-loop",
            "A benchmark whose repetitions a clock brackets (a clock read just before the loop "
            "and just after it): each repetition's sync is part of what it measures.",
            fixture="cuda/gpu805_silent_sync_is_the_point.cu",
        ),
        Exemption(
            "explained-sync",
            "A sync whose comment says what it is for (`// barrier: wait for every peer before "
            "the next exchange`), or after which the iteration hands device buffers to "
            "host-driven communication (`MPI_Sendrecv` of a halo, an `MPI_Barrier`).",
            """
__global__ void step(float* x) {}
void exchange(float* x, int iters) {
  for (int it = 0; it < iters; ++it) {
    step<<<64, 256>>>(x);
    // barrier: every peer must finish writing its halo before the next exchange reads it
    cudaDeviceSynchronize();
  }
}
""",
        ),
        Exemption(
            "per-device-loop",
            "A loop over devices (`cudaSetDevice(dev)` in the body): each iteration sets up "
            "another device.",
            """
__global__ void init(float* x) {}
void init_all(float** x, int devices) {
  for (int dev = 0; dev < devices; ++dev) {
    cudaSetDevice(dev);
    init<<<1, 128>>>(x[dev]);
    cudaDeviceSynchronize();
  }
}
""",
        ),
        Exemption(
            "guarded-op-sync",
            "A device-wide sync in an extension op's forward or backward under an `if` or an "
            "`#if`: debug mode, a first call, a profiling switch.",
            """
#include <torch/extension.h>
torch::Tensor my_op_forward(torch::Tensor x, bool debug) {
  auto y = torch::empty_like(x);
  launch_my_op(x, y);
  if (debug) cudaDeviceSynchronize();
  return y;
}
""",
        ),
    )

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
    ]
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
        if self.exempt(
            "context-creation",
            name == "cudaFree"
            and file.node_text(args).replace(" ", "") in ("(0)", "(nullptr)", "(NULL)"),
        ):
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
        if self.exempt("per-element-setup", self._indexed_by_loop_variable(file, node, loop)):
            return
        body = file.data[loop.start_byte : loop.end_byte]
        rest = file.data[node.end_byte : loop.end_byte]
        launches = b"<<<" in body or _calls_launching(file, body)
        if name in ALLOCS:
            both = b"cudaMalloc(" in body and b"cudaFree(" in body
            if self.exempt("no-gpu-work-in-loop", not (both or launches)):
                return
            if self.exempt("timed-sweep", _TIMED.search(body)):
                return
            advice = "allocate once before the loop and free after it (or use a caching allocator)"
        else:
            if self.exempt("no-gpu-work-in-loop", not launches):
                return
            if self.exempt(
                "host-needs-result",
                _HOST_NEEDS_RESULT.search(rest) or b"DeviceToHost" in body,
            ):
                return
            if self.exempt(
                "guarded-sync", any(a.type == "if_statement" for a in _between(node, loop))
            ):
                return
            if self.exempt("timed-sweep", _TIMED.search(body)):
                return
            if self.exempt("timed-loop", timed_loop(file, loop)):
                return
            if self.exempt(
                "explained-sync",
                explained_sync(file, node) or communicates_after(file, node, loop),
            ):
                return
            advice = "synchronise once after the loop, or wait on an event only when the host needs the result"
        if self.exempt("per-device-loop", _PER_DEVICE.search(body)):
            return
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
        if self.exempt(
            "guarded-op-sync",
            any(
                a.type in ("if_statement", "preproc_if", "preproc_ifdef")
                for a in file.ancestors(node)
            ),
        ):
            return
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
    # (an object of a functor class whose `operator()` launches: `ftor(d, out, n)`)
    objects = functor_objects(file) if any(n.endswith("::operator()") for n in launching) else {}
    for m in _CALLED.findall(body):
        name = m.decode("ascii", "replace")
        if name in launching or f"{objects.get(name) or '?'}::operator()" in launching:
            return True
    return False


def _between(node, loop):
    a = node.parent
    while a is not None and a != loop:
        yield a
        a = a.parent
