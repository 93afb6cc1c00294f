/*
 * capturepool and NCCL: pools whose memory is registered with a
 * communicator (NCCL's user-buffer registration, ncclCommRegister), so that
 * collectives on buffers from the pool, captured into graphs like any other
 * work, use the registered path.
 *
 * The library loads NCCL when it is first needed (libnccl.so.2, or the file
 * CPOOL_NCCL_LIBRARY names), so neither the library nor a program that
 * never calls this needs NCCL. The communicator is NCCL's own: make it with
 * ncclCommInitRank as usual and pass it here (ncclComm_t). Its options are
 * capturepool.h's cpool_pool_options (CPOOL_POOL_OPTIONS_INIT); docs/GUIDE.md,
 * "Several GPUs and NCCL", shows a use.
 */
#ifndef CAPTUREPOOL_NCCL_H
#define CAPTUREPOOL_NCCL_H

#include <stddef.h>

#include "capturepool.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

struct ncclComm; /* NCCL's: ncclComm_t is struct ncclComm * */

/* Creates a pool, as cpool_pool_create, whose device memory is registered
 * with `comm`.
 * Every segment is registered once, before any block of it is handed out,
 * and deregistered before it goes back to the device (at cpool_pool_trim,
 * and when the pool's last reference goes: a graph that holds the pool
 * keeps its registrations, as it keeps its memory). The segments are plain
 * (cpool_pool_options.plain_segments is implied), so a buffer from the pool
 * lies within one registration. comm must outlive the pool: release the
 * pool, and the graphs that hold it, before ncclCommDestroy. A failed
 * registration fails the allocation that needed it (CPOOL_ERR_BACKEND, with
 * NCCL's message), and nothing is kept. A capture that needs a new segment
 * registers it while capturing (with the capture mode relaxed); to keep
 * NCCL's registration out of captures altogether, reserve what they need
 * up front (reserve_bytes).
 * Returns CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT (dev, comm or out NULL, bad
 * options), CPOOL_ERR_UNSUPPORTED (NCCL could not be loaded, or the device
 * is not a CUDA device), and cpool_pool_create's statuses. */
cpool_status cpool_nccl_pool_create(cpool_device *dev, struct ncclComm *comm, const cpool_pool_options *opts,
                                    cpool_pool **out);

/* The registrations the pool's memory holds now.
 * 0 for NULL, a dead handle, or a pool not made by cpool_nccl_pool_create. */
size_t cpool_nccl_registration_count(const cpool_pool *pool);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif /* CAPTUREPOOL_NCCL_H */
