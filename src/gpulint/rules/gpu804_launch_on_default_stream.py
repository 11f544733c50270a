import re

from gpulint.frontends.cuda.callgraph import unreachable
from gpulint.frontends.cuda.file import CudaFile, declared_names
from gpulint.frontends.cuda.idioms import (
    DEFAULT_STREAMS,
    between_device_syncs,
    function_name,
    variant_on_stream,
)
from gpulint.rule import Rule

# A device-wide wait: after it, which stream a launch used changed nothing.
_DEVICE_SYNC = re.compile(rb"\bcudaDeviceSynchronize\s*\(")


class LaunchOnDefaultStream(Rule):
    """
    ## What it does
    Finds a kernel launch on the legacy default stream (no stream argument, or `0`/`nullptr`/
    `NULL`) in two places: anywhere in a PyTorch extension (a file that includes `torch/`,
    `ATen/` or `c10/` headers, itself or through a header of the checked tree, at any depth:
    `#include "pytorch_cuda_helper.hpp"` that includes `<ATen/cuda/CUDAContext.h>`), and in plain CUDA host code inside a function that takes a
    `cudaStream_t` parameter, a stream it was handed and did not use. Launches on
    `at::cuda::getCurrentCUDAStream()` or on any other stream expression are left alone, and so
    are plain CUDA functions with no stream parameter (or several: which one is meant is not
    clear), and a standalone program's code (a file that defines `main`, or the `#ifdef
    RUN_MAIN`-like branch holding it beside the extension code), whose default stream is its own.
    An extension source built only by a Python script in its own folder
    (`torch.utils.cpp_extension.load(sources=["op.cu"])`, no `setup.py` there or one folder up
    packaging it), where no Python file of the folder mentions a stream or a CUDA graph, is left
    alone too: every caller of its ops is in sight, and runs on the default stream. So is an
    extension only scripts use (see GPU802: no package's module loads or imports it) whose
    scripts never mention a stream or a CUDA graph. Also left alone: a launch in one branch of
    an `#if`/`#ifdef` whose sibling branch launches the same kernel on a stream (`#ifdef
    TORCH_BUILD k<<<g, b, s, stream>>> #else k<<<g, b, s>>> #endif`: the default-stream one is
    the other build's, a standalone harness), and a launch with a `cudaDeviceSynchronize()` on
    its path both before and after it (the device is drained around it: its order with every
    stream is already total), and a launch after a `return` in its block (switched off: it
    never runs). A launch written over lines is reported at its `<<<`. In plain
    CUDA, a function that synchronises the whole device after the launch
    (`cudaDeviceSynchronize()`, a one-off setup step) is left alone: nothing overlaps with it.

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
void run(float* x) { k<<<1, 128>>>(x); }
""",
    ]
    VALID.append(
        """
__global__ void reorder(unsigned* w, const unsigned short* perm, int rows) {}
void prepare_weights(unsigned* w, const unsigned short* perm, int rows, cudaStream_t stream) {
  reorder<<<(rows + 127) / 128, 128>>>(w, perm, rows);  // one-off: the device is drained below
  cudaDeviceSynchronize();
}
"""
    )
    VALID.append(
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
void drained(torch::Tensor x) {
  cudaDeviceSynchronize();
  k<<<1, 128>>>(x.data_ptr<float>());
  cudaDeviceSynchronize();
}
"""
    )
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
        if file.in_program(node):
            return  # a standalone program's path (`#ifdef RUN_MAIN`): the default stream is its own
        if variant_on_stream(file, node):
            # `#ifdef TORCH_BUILD k<<<g, b, s, stream>>> #else k<<<g, b, s>>> #endif`: the
            # default stream is the other build's (a standalone harness), not the extension's
            return
        if between_device_syncs(file, node):
            return  # the device is drained before and after it: the order is total anyway
        function = file.enclosing_function(node)
        if function is not None and unreachable(file, node, function):
            return  # after a `return` (a kernel switched off): it never runs
        if file.includes_torch:
            path = file.display_path.replace("\\", "/")
            if path in file.project.script_built or path in file.project.harness_streamless:
                # built only by a script beside it that never changes streams: the current
                # stream of every caller is the default stream
                return
            yield self.report(file, file.launch_span(node), smem=smem)
            return
        if function is None or file.is_device_function(function):
            return
        stream = _stream_parameter(file, function)
        if stream is not None and _DEVICE_SYNC.search(file.data[node.end_byte : function.end_byte]):
            return  # the function waits for the whole device after it: nothing overlaps anyway
        if stream is not None:
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
