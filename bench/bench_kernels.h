/* A tiny kernel for the launch benchmarks, built by nvcc where it exists. */
#ifndef CPOOL_BENCH_KERNELS_H
#define CPOOL_BENCH_KERNELS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Enqueues one 32-thread kernel that adds 1 to x[0..31] on the given
 * cudaStream_t; returns 0 or the CUDA error code. */
int bench_tick(void *cuda_stream, float *x);

#ifdef __cplusplus
}
#endif

#endif
