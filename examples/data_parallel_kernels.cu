// The data-parallel example's two kernels (data_parallel.c), on the
// program's own CUDA runtime.
#include <cuda_runtime.h>

#include "data_parallel_ops.h"

static __global__ void grad_kernel(const float *x, const float *w, float *grad, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) grad[i] = x[i] * w[i] + 0.25f * x[i];
}

static __global__ void update_kernel(float *w, const float *grad, float scale, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) w[i] -= scale * grad[i];
}

extern "C" int dp_grad(void *stream, const float *x, const float *w, float *grad, int n) {
    grad_kernel<<<(n + 255) / 256, 256, 0, (cudaStream_t)stream>>>(x, w, grad, n);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

extern "C" int dp_update(void *stream, float *w, const float *grad, float scale, int n) {
    update_kernel<<<(n + 255) / 256, 256, 0, (cudaStream_t)stream>>>(w, grad, scale, n);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

extern "C" int dp_set_device(int ordinal) { return cudaSetDevice(ordinal) == cudaSuccess ? 0 : -1; }
