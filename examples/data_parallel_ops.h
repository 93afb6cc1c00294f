/* The data-parallel example's device work (data_parallel_kernels.cu). */
#ifndef DATA_PARALLEL_OPS_H
#define DATA_PARALLEL_OPS_H

#ifdef __cplusplus
extern "C" {
#endif

/* grad = x * w + x / 4, elementwise, on stream (a cudaStream_t); 0 or -1. */
int dp_grad(void *stream, const float *x, const float *w, float *grad, int n);
/* w -= scale * grad. */
int dp_update(void *stream, float *w, const float *grad, float scale, int n);
/* The runtime's current device for the calling thread. */
int dp_set_device(int ordinal);

#ifdef __cplusplus
}
#endif

#endif
