/*
 * The CUDA backend's peer access.
 *
 * Opening a device connects it with every open device whose kernels can
 * reach its memory, and the other way round (cudaDeviceCanAccessPeer):
 * peer access is enabled in the using device's context, which serves plain
 * segments, and the pages of growable segments are mapped for the using
 * device too (cuMemSetAccess), those mapped before included. A pair that
 * cannot be connected stays apart, as devices that do not allow it; so does
 * one whose page access the driver refuses, from then on.
 */
#include <stdatomic.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "cuda_backend.h"
#include "lock.h"

static cpool__mutex peers_mu = CPOOL__MUTEX_INIT(CPOOL__RANK_PEERS);
static cpool__bdevice *open_by_ordinal[MAX_PEERS]; /* under peers_mu */

static bool page_mapped(const reservation *r, size_t page) { return r->mapped[page / 64] >> (page % 64) & 1; }

/* Gives `peer` access to every mapped page of dev's growable segments;
 * false if the driver refused some. */
static bool grant_mapped(cpool__bdevice *dev, int peer) {
    bool granted = true;
    cpool__mutex_lock(&dev->mapped_mu);
    for (reservation *r = dev->reservations; r && granted; r = r->next)
        for (size_t i = 0; i < r->pages && granted;) {
            if (!page_mapped(r, i)) {
                i++;
                continue;
            }
            size_t end = i;
            while (end < r->pages && page_mapped(r, end)) end++;
            device_guard guard;
            granted = cpool__cuda_guard_enter(&guard, dev, true) == cudaSuccess;
            if (granted) {
                granted = cpool__cuda_set_access_for(r->base + i * CPOOL__PAGE_BYTES, (end - i) * CPOOL__PAGE_BYTES, -1,
                                         (uint64_t)1 << peer) == CUDA_SUCCESS;
                cpool__cuda_guard_exit(&guard);
            }
            i = end;
        }
    cpool__mutex_unlock(&dev->mapped_mu);
    return granted;
}

/* Lets kernels on `user` use owner's memory, where the devices allow it. */
static void connect(cpool__bdevice *user, cpool__bdevice *owner) {
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, user->ordinal, owner->ordinal) != cudaSuccess || !can) {
        cudaGetLastError();
        return;
    }
    cudaError_t err;
    GUARDED(err, user, true, cudaDeviceEnablePeerAccess(owner->ordinal, 0));
    if (err != cudaSuccess) cudaGetLastError();
    if (err != cudaSuccess && err != cudaErrorPeerAccessAlreadyEnabled) return;
    /* Set before the grant, which takes the lock new mappings read it
     * under: a page is granted either by its mapping or by the grant. */
    uint64_t bit = (uint64_t)1 << user->ordinal;
    atomic_fetch_or(&cpool__cuda_may_use[owner->ordinal], bit);
    if (owner->vmm && !grant_mapped(owner, user->ordinal)) {
        /* The pair stays apart: later pages are not granted either. */
        cudaGetLastError();
        atomic_fetch_and(&cpool__cuda_may_use[owner->ordinal], ~bit);
    }
}

void cpool__cuda_connect_peers(cpool__bdevice *d) {
    if (d->ordinal >= MAX_PEERS) return;
    cpool__mutex_lock(&peers_mu);
    for (int o = 0; o < MAX_PEERS; o++) {
        cpool__bdevice *other = open_by_ordinal[o];
        if (!other || o == d->ordinal) continue;
        connect(other, d);
        connect(d, other);
    }
    open_by_ordinal[d->ordinal] = d;
    cpool__mutex_unlock(&peers_mu);
}

/* Peer access stays enabled in the contexts, which outlive the device. */
void cpool__cuda_disconnect_peers(cpool__bdevice *d) {
    if (d->ordinal >= MAX_PEERS) return;
    cpool__mutex_lock(&peers_mu);
    if (open_by_ordinal[d->ordinal] == d) open_by_ordinal[d->ordinal] = NULL;
    cpool__mutex_unlock(&peers_mu);
}

