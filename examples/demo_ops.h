/*
 * The demo's operations, shared by demo.c (host versions, run through
 * cpool_launch_host) and demo_kernels.cu (CUDA kernels). One operation is a
 * plain struct, so the same step can be enqueued on either backend.
 */
#ifndef DEMO_OPS_H
#define DEMO_OPS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum demo_op_kind {
    DEMO_OP_SCALE,         /* out[i] = a * in[i] */
    DEMO_OP_ADD,           /* out[i] += in[i] (a bias) */
    DEMO_OP_RELU,          /* out[i] = max(in[i], 0) */
    DEMO_OP_TANH,          /* out[i] = tanh(out[i]), in place */
    DEMO_OP_SUMSQ_PARTIAL, /* out[j] = sum of in[i]^2 over chunk j of DEMO_CHUNK elements */
    DEMO_OP_SUM,           /* out[0] = sum of in[0..n) (n: number of partial sums) */
    DEMO_OP_BLEND          /* out[i] = a * out[i] + (1 - a) * in[i] */
} demo_op_kind;

typedef struct demo_op {
    demo_op_kind kind;
    float *out;
    const float *in;
    float a;
    size_t n; /* elements of `in` */
} demo_op;

/* Elements per partial sum; the reductions always add in the same order, so
 * the eager run and the graph replay give bitwise equal results. */
#define DEMO_CHUNK 1024

static inline size_t demo_parts(size_t n) { return (n + DEMO_CHUNK - 1) / DEMO_CHUNK; }

/* Launches `op` as a CUDA kernel on the cudaStream_t `stream`; returns 0 or
 * the cudaError_t of the launch. Only in builds with nvcc (DEMO_HAVE_KERNELS). */
int demo_cuda_launch(void *stream, const demo_op *op);
const char *demo_cuda_error_string(int err);

#ifdef __cplusplus
}
#endif

#endif /* DEMO_OPS_H */
