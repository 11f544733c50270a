import re

from gpulint.frontends.cuda.callgraph import unreachable
from gpulint.frontends.cuda.file import CudaFile, declared_names
from gpulint.frontends.cuda.streams import DEFAULT_STREAMS, between_device_syncs, variant_on_stream
from gpulint.frontends.cuda.syntax import function_name
from gpulint.rule import Exemption, Rule

# A device-wide wait: after it, which stream a launch used changed nothing.
_DEVICE_SYNC = re.compile(rb"\bcudaDeviceSynchronize\s*\(")


class LaunchOnDefaultStream(Rule):
    """
    ## What it does
    Finds a kernel launch on the legacy default stream (no stream argument, or `0`/`nullptr`/
    `NULL`) in two places: anywhere in a PyTorch extension (a file that includes `torch/`,
    `ATen/` or `c10/` headers, itself or through a header of the checked tree, at any depth:
    `#include "pytorch_cuda_helper.hpp"` that includes `<ATen/cuda/CUDAContext.h>`), and in
    plain CUDA host code inside a function that takes a `cudaStream_t` parameter, a stream it
    was handed and did not use. A launch on `at::cuda::getCurrentCUDAStream()`, or on any other
    stream expression, is what the rule asks for. A launch written over lines is reported at
    its `<<<`.

    ## Why is this bad?
    PyTorch runs each op on the *current* stream, which users change with `torch.cuda.stream(s)`,
    CUDA graphs capture, and DDP overlaps with communication. A kernel launched on the legacy
    default stream ignores all of that: it serialises with every other stream (a device-wide
    bubble), breaks CUDA graph capture, and races with tensors produced on the current stream.

    ## Example
    ```cuda
    #include <torch/extension.h>
    my_kernel<<<blocks, 256>>>(x.data_ptr<float>(), n);
    ```

    ## Use instead
    ```cuda
    #include <torch/extension.h>
    #include <ATen/cuda/CUDAContext.h>
    my_kernel<<<blocks, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), n);
    ```

    ## Known problems
    Which stream an extension's callers run on is judged from the Python files in the checked
    tree: an extension built by a script that never mentions a stream is left alone, though
    a user outside the tree may call it under `torch.cuda.stream(s)` or in a CUDA graph.

    ## References
    - [PyTorch: CUDA semantics, CUDA streams](https://docs.pytorch.org/docs/stable/notes/cuda.html#cuda-streams)
    - [CUDA C++ Programming Guide: default stream](https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#default-stream)
    """

    code = "GPU804"
    name = "launch-on-default-stream"
    language = "cuda"
    triggers = ("<<<",)
    message = (
        "kernel launched on the default stream in a PyTorch extension: launch on the current "
        "stream, `<<<grid, block, {smem}, at::cuda::getCurrentCUDAStream()>>>`"
    )
    in_hand = (
        "kernel launched on the default stream although `{function}` has stream `{stream}` in "
        "hand: it serialises with all other work; launch with `<<<grid, block, {smem}, {stream}>>>`"
    )
    tags = ("streams", "pytorch")

    EXEMPTIONS = (
        Exemption(
            "standalone-program",
            "A standalone program's code (a file that defines `main`, or the `#ifdef "
            "RUN_MAIN`-like branch holding it beside the extension code): the default stream is "
            "its own.",
            """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void k(float* x) {}
void run(torch::Tensor x) {
  k<<<1, 128, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>());
}
#ifdef RUN_MAIN
int main() {
  float* x;
  cudaMalloc(&x, 128 * sizeof(float));
  k<<<1, 128>>>(x);
  return 0;
}
#endif
""",
        ),
        Exemption(
            "stream-variant-branch",
            "A launch in one branch of an `#if`/`#ifdef` whose sibling branch launches the same "
            "kernel on a stream (`#ifdef TORCH_BUILD k<<<g, b, s, stream>>> #else k<<<g, b, s>>> "
            "#endif`): the default-stream one is the other build's, a standalone harness.",
            """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void k(float* x) {}
void run(float* x) {
#ifdef TORCH_BUILD
  k<<<1, 128, 0, at::cuda::getCurrentCUDAStream()>>>(x);
#else
  k<<<1, 128>>>(x);  // the standalone harness build
#endif
}
""",
        ),
        Exemption(
            "between-device-syncs",
            "A launch with a `cudaDeviceSynchronize()` on its path both before and after it: the "
            "device is drained around it, so its order with every stream is already total.",
            """
#include <torch/extension.h>
__global__ void k(float* x) {}
void drained(torch::Tensor x) {
  cudaDeviceSynchronize();
  k<<<1, 128>>>(x.data_ptr<float>());
  cudaDeviceSynchronize();
}
""",
        ),
        Exemption(
            "script-built-extension",
            "An extension source built only by a Python script in its own folder "
            '(`torch.utils.cpp_extension.load(sources=["op.cu"])`, no `setup.py` there or one '
            "folder up packaging it) where no Python file of the folder mentions a stream or a "
            "CUDA graph, or an extension only scripts use (see GPU802: no package's module loads "
            "or imports it) whose scripts never mention one: every caller of its ops is in "
            "sight, and runs on the default stream.",
            files=(
                (
                    "op/scale.cu",
                    """#include <torch/extension.h>
__global__ void scale_kernel(float* x, int n) {}
void scale(torch::Tensor x) {
  int n = x.numel();
  scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), n);
}
""",
                ),
                (
                    "op/run.py",
                    """import torch
from torch.utils.cpp_extension import load

ext = load(name="scale", sources=["scale.cu"])
x = torch.randn(1024, device="cuda")
ext.scale(x)
""",
                ),
            ),
        ),
        Exemption(
            "after-return",
            "A launch after a `return` in its block (a kernel switched off): it never runs.",
            """
#include <torch/extension.h>
__global__ void k(float* x) {}
void clear(torch::Tensor x) {
  return;  // switched off
  k<<<1, 128>>>(x.data_ptr<float>());
}
""",
        ),
        Exemption(
            "device-side-launch",
            "A launch from device code (dynamic parallelism) in plain CUDA: it runs on the "
            "launching thread's own default stream, not the host's.",
            """
__global__ void child(float* x) {}
__global__ void parent(float* x, cudaStream_t stream) {
  child<<<1, 128>>>(x);
}
""",
        ),
        Exemption(
            "not-one-stream-parameter",
            "Plain CUDA code in a function with no `cudaStream_t` parameter, or several (which "
            "one is meant is not clear): no stream was handed to it to use.",
            """
__global__ void k(float* x) {}
void run(float* x) { k<<<1, 128>>>(x); }
""",
        ),
        Exemption(
            "device-synchronized-after",
            "Plain CUDA code that synchronises the whole device after the launch "
            "(`cudaDeviceSynchronize()`, a one-off setup step): nothing overlaps with it.",
            """
__global__ void reorder(unsigned* w, const unsigned short* perm, int rows) {}
void prepare_weights(unsigned* w, const unsigned short* perm, int rows, cudaStream_t stream) {
  reorder<<<(rows + 127) / 128, 128>>>(w, perm, rows);  // one-off: the device is drained below
  cudaDeviceSynchronize();
}
""",
        ),
    )

    VALID = [
        """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void k(float* x) {}
void run(torch::Tensor x) {
  auto stream = at::cuda::getCurrentCUDAStream();
  k<<<1, 128, 0, stream>>>(x.data_ptr<float>());
}
""",
        """
__global__ void k(float* x) {}
void run(float* x, cudaStream_t stream) { k<<<1, 128, 0, stream>>>(x); }
""",
    ]
    INVALID = [
        """
#include <torch/extension.h>
__global__ void k(float* x) {}
void run(torch::Tensor x) { k<<<1, 128>>>(x.data_ptr<float>()); }
void after_a_sync(torch::Tensor x) {
  cudaDeviceSynchronize();
  k<<<1, 128>>>(x.data_ptr<float>());  // work queued after it does not wait
}
""",
        """
__global__ void k(float* x) {}
void run(float* x, cudaStream_t stream) {
  CUDA_CHECK(cudaMemsetAsync(x, 0, 512, stream));
  k<<<1, 128>>>(x);
}
""",
    ]

    def visit_call_expression(self, node, file: CudaFile):
        config = file.launch_config(node)
        if config is None:
            return
        config = [c for c in config if c.type != "comment"]
        if len(config) >= 4 and " ".join(file.node_text(config[3]).split()) not in DEFAULT_STREAMS:
            return
        smem = file.node_text(config[2]) if len(config) >= 3 else "0"
        if self.exempt("standalone-program", file.in_program(node)):
            return
        if self.exempt("stream-variant-branch", variant_on_stream(file, node)):
            return
        if self.exempt("between-device-syncs", between_device_syncs(file, node)):
            return
        function = file.enclosing_function(node)
        if self.exempt("after-return", function is not None and unreachable(file, node, function)):
            return
        if file.includes_torch:
            path = file.display_path.replace("\\", "/")
            built = path in file.project.script_built or path in file.project.harness_streamless
            if self.exempt("script-built-extension", built):
                return
            yield self.report(file, file.launch_span(node), smem=smem)
            return
        function = file.enclosing_function(node)
        if function is None:
            return  # file-scope code (a macro's body): no function to be handed a stream
        if self.exempt("device-side-launch", file.is_device_function(function)):
            return
        stream = _stream_parameter(file, function)
        if self.exempt("not-one-stream-parameter", stream is None):
            return
        if self.exempt(
            "device-synchronized-after",
            _DEVICE_SYNC.search(file.data[node.end_byte : function.end_byte]),
        ):
            return
        yield self.report(
            file,
            file.launch_span(node),
            self.in_hand,
            function=function_name(file, function),
            stream=stream,
            smem=smem,
        )


def _stream_parameter(file: CudaFile, function) -> str | None:
    """The one `cudaStream_t` parameter of a host function (None when none, or several)."""
    declarator = file.function_name_node(function)
    params = declarator.child_by_field_name("parameters") if declarator is not None else None
    if params is None:
        return None
    found = []
    for param in params.named_children:
        kind = file.node_text(param.child_by_field_name("type"))
        if kind.split("::")[-1] in ("cudaStream_t", "CUstream") and "*" not in file.node_text(
            param
        ):
            found.extend(declared_names(param))
    return found[0] if len(found) == 1 else None
