// A first CUDA program: allocate, copy, launch, copy back.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void vector_add(const float* a, const float* b, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

int main() {
  const int n = 1 << 20;
  float* h_a = (float*)malloc(n * sizeof(float));
  float *d_a, *d_b, *d_out;
  cudaMalloc(&d_a, n * sizeof(float));
  cudaMalloc(&d_b, n * sizeof(float));
  cudaMalloc(&d_out, n * sizeof(float));
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  cudaMemcpyAsync(d_a, h_a, n * sizeof(float), cudaMemcpyHostToDevice, stream);
  vector_add<<<(n + 999) / 1000, 1000, 0, stream>>>(d_a, d_b, d_out, n);
  cudaDeviceSynchronize();
  printf("done\n");
  return 0;
}
