/*
 * CUDA kernels for the demo's operations (see demo_ops.h). Every kernel is
 * deterministic: the reductions use a fixed tree, no atomics, so a step gives
 * the same bits eagerly and replayed from a graph.
 */
#include <cuda_runtime.h>

#include "demo_ops.h"

namespace {

constexpr int kThreads = 256;

__global__ void k_scale(float *out, const float *in, float a, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = a * in[i];
}

__global__ void k_add(float *out, const float *in, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n)
        out[i] += in[i];
}

__global__ void k_relu(float *out, const float *in, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

__global__ void k_tanh(float *out, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = tanhf(out[i]);
}

__global__ void k_blend(float *out, const float *in, float a, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = a * out[i] + (1.0f - a) * in[i];
}

/* One block per chunk of DEMO_CHUNK elements. */
__global__ void k_sumsq_partial(float *out, const float *in, size_t n)
{
    __shared__ float sh[kThreads];
    size_t begin = blockIdx.x * (size_t)DEMO_CHUNK;
    size_t end = begin + DEMO_CHUNK < n ? begin + DEMO_CHUNK : n;
    float acc = 0.0f;
    for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x)
        acc += in[i] * in[i];
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int off = kThreads / 2; off > 0; off >>= 1) {
        if (threadIdx.x < off)
            sh[threadIdx.x] += sh[threadIdx.x + off];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        out[blockIdx.x] = sh[0];
}

/* One block sums all n values. */
__global__ void k_sum(float *out, const float *in, size_t n)
{
    __shared__ float sh[kThreads];
    float acc = 0.0f;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x)
        acc += in[i];
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int off = kThreads / 2; off > 0; off >>= 1) {
        if (threadIdx.x < off)
            sh[threadIdx.x] += sh[threadIdx.x + off];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        out[0] = sh[0];
}

} // namespace

extern "C" int demo_cuda_launch(void *stream, const demo_op *op)
{
    cudaStream_t s = (cudaStream_t)stream;
    unsigned blocks = (unsigned)((op->n + kThreads - 1) / kThreads);
    if (blocks == 0)
        blocks = 1;
    switch (op->kind) {
    case DEMO_OP_SCALE:
        k_scale<<<blocks, kThreads, 0, s>>>(op->out, op->in, op->a, op->n);
        break;
    case DEMO_OP_ADD:
        k_add<<<blocks, kThreads, 0, s>>>(op->out, op->in, op->n);
        break;
    case DEMO_OP_RELU:
        k_relu<<<blocks, kThreads, 0, s>>>(op->out, op->in, op->n);
        break;
    case DEMO_OP_TANH:
        k_tanh<<<blocks, kThreads, 0, s>>>(op->out, op->n);
        break;
    case DEMO_OP_BLEND:
        k_blend<<<blocks, kThreads, 0, s>>>(op->out, op->in, op->a, op->n);
        break;
    case DEMO_OP_SUMSQ_PARTIAL:
        k_sumsq_partial<<<(unsigned)demo_parts(op->n), kThreads, 0, s>>>(op->out, op->in, op->n);
        break;
    case DEMO_OP_SUM:
        k_sum<<<1, kThreads, 0, s>>>(op->out, op->in, op->n);
        break;
    default:
        return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

extern "C" const char *demo_cuda_error_string(int err)
{
    return cudaGetErrorName((cudaError_t)err);
}
