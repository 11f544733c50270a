// A small CUDA library: a kernel and the host function that uploads its inputs and launches it.
#include <cuda_runtime.h>

__global__ void vector_add(const float* a, const float* b, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

// Adds two host vectors on the device; the result stays in d_out.
cudaError_t vector_add_on_device(const float* h_a, const float* h_b, float* d_a, float* d_b,
                                 float* d_out, int n, cudaStream_t stream) {
  cudaMemcpyAsync(d_a, h_a, n * sizeof(float), cudaMemcpyHostToDevice, stream);
  cudaMemcpyAsync(d_b, h_b, n * sizeof(float), cudaMemcpyHostToDevice, stream);
  vector_add<<<(n + 999) / 1000, 1000, 0, stream>>>(d_a, d_b, d_out, n);
  return cudaSuccess;
}
