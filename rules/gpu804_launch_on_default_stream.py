from gpulint.rule import Rule

_DEFAULT = {"0", "nullptr", "NULL", "cudaStreamLegacy", "cudaStreamDefault", "(cudaStream_t)0"}


class LaunchOnDefaultStream(Rule):
    """
    ## What it does
    In a PyTorch extension (a file that includes `torch/`, `ATen/` or `c10/` headers), finds a
    kernel launch with no stream argument, or with stream `0`/`nullptr`/`NULL`. Launches on
    `at::cuda::getCurrentCUDAStream()` or on any other stream expression are left alone, and so
    is every file that is not a PyTorch extension.

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
    requires = ("torch/", "ATen/", "c10/")
    message = (
        "kernel launched on the default stream in a PyTorch extension: launch on the current "
        "stream, `<<<grid, block, {smem}, at::cuda::getCurrentCUDAStream()>>>`"
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
    INVALID = [
        """
#include <torch/extension.h>
__global__ void k(float* x) {}
void run(torch::Tensor x) { k<<<1, 128>>>(x.data_ptr<float>()); }
""",
    ]

    def visit_call_expression(self, node, file):
        config = file.launch_config(node)
        if config is None or not file.is_torch_extension:
            return
        config = [c for c in config if c.type != "comment"]
        if len(config) >= 4 and " ".join(file.node_text(config[3]).split()) not in _DEFAULT:
            return
        smem = file.node_text(config[2]) if len(config) >= 3 else "0"
        yield self.report(file, node, smem=smem)
