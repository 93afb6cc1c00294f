/*
 * The NCCL functions objects/nccl.c calls, as a table that tests replace to
 * run pools registered with a communicator on the host backend.
 * NCCL's results (ncclResult_t) as ints: 0 is ncclSuccess.
 */
#ifndef CPOOL_NCCL_CALLS_H
#define CPOOL_NCCL_CALLS_H

#include <stddef.h>

struct ncclComm;

typedef struct cpool__nccl_calls {
    int (*comm_register)(struct ncclComm *comm, void *buff, size_t size, void **handle);
    int (*comm_deregister)(struct ncclComm *comm, void *handle);
    const char *(*error_string)(int result);
} cpool__nccl_calls;

/* From now on cpool_nccl_pool_create's pools call `calls` (NULL: NCCL's own
 * again); pools made before keep theirs. */
void cpool__nccl_use_calls(const cpool__nccl_calls *calls);

#endif /* CPOOL_NCCL_CALLS_H */
