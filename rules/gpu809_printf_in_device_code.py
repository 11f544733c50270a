from gpulint.rule import Rule


class PrintfInDeviceCode(Rule):
    """
    ## What it does
    Finds `printf` called in device code: inside a `__global__` kernel or a `__device__`
    (including `__host__ __device__`) function.

    ## Why is this bad?
    Device-side `printf` writes into a fixed-size FIFO that the host drains only at
    synchronisation points; each call formats on the GPU, adds registers and local memory to
    the kernel, and serialises the threads that reach it. Left in a hot kernel it costs
    throughput on every launch, and output beyond the buffer is silently lost.

    ## Example
    ```cuda
    __global__ void scale(float* x, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      printf("i=%d\\n", i);
      if (i < n) x[i] *= 2.f;
    }
    ```

    ## Use instead
    ```cuda
    __global__ void scale(float* x, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) x[i] *= 2.f;
    }
    ```

    ## References
    - [CUDA C++ Programming Guide: formatted output](https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#formatted-output)
    """

    code = "GPU809"
    name = "printf-in-device-code"
    language = "cuda"
    triggers = ("__global__", "__device__")
    message = "`printf` in device code serialises threads and costs registers on every launch; remove it (or guard it with a debug macro)"
    tags = ("debug",)

    VALID = [
        """
#include <cstdio>
void report(int n) { printf("n=%d\\n", n); }
__global__ void k(float* x) { x[threadIdx.x] = 0; }
""",
    ]
    INVALID = [
        """
__global__ void k(float* x) {
  printf("thread %d\\n", threadIdx.x);
}
""",
    ]

    def visit_call_expression(self, node, file):
        if file.call_name(node) not in ("printf", "std::printf"):
            return
        if file.is_device_function(file.enclosing_function(node)):
            yield self.report(file, node)
