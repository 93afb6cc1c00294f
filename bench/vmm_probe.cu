/*
 * What graph pages cost on this GPU, and whether CUDA does what they rely
 * on: the driver's virtual memory calls one at a time (medians, in
 * microseconds), one physical allocation seen at two addresses, a page
 * swapped behind an instantiated graph, and, for comparison, CUDA's own
 * graph memory nodes (capture, instantiate and launch of a graph that
 * allocates, fills and frees a scratch buffer), each size in a fresh
 * process, cold (cudaDeviceGraphMemTrim between repetitions) and warm.
 * Every CUDA call is checked; a failed one ends the program.
 * Usage: vmm_probe [ROUNDS]   (rounds of 512 pages; default 5)
 */
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime.h>

#include "bench_util.h"

#define MIB ((size_t)1 << 20)
#define PAGE (2 * MIB)
enum { PAGES = 512, GRAPH_REPS = 20 };

static void check_cu(CUresult r, const char *call, int line) {
    if (r == CUDA_SUCCESS) return;
    const char *name = "?";
    cuGetErrorName(r, &name);
    fprintf(stderr, "vmm_probe.cu:%d: %s failed: %s\n", line, call, name);
    exit(1);
}
static void check_rt(cudaError_t e, const char *call, int line) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "vmm_probe.cu:%d: %s failed: %s\n", line, call, cudaGetErrorName(e));
    exit(1);
}
#define CU(call) check_cu((call), #call, __LINE__)
#define RT(call) check_rt((call), #call, __LINE__)

/* Times one call, in microseconds. */
#define TIME_US(sample, call)                                                                      \
    do {                                                                                           \
        double t0_ = bench_now_ns();                                                               \
        call;                                                                                      \
        (sample) = (bench_now_ns() - t0_) / 1e3;                                                   \
    } while (0)

static void row(const char *what, double *samples, int n) {
    printf("  %-62s %10.1f us  (median of %d)\n", what, bench_median(samples, n), n);
}

static CUmemAllocationProp prop;
static CUmemAccessDesc access_rw;

static CUmemGenericAllocationHandle create(size_t bytes) {
    CUmemGenericAllocationHandle h;
    CU(cuMemCreate(&h, bytes, &prop, 0));
    return h;
}
static void map(CUdeviceptr at, size_t bytes, CUmemGenericAllocationHandle h) {
    CU(cuMemMap(at, bytes, 0, h, 0));
    CU(cuMemSetAccess(at, bytes, &access_rw, 1));
}

/* ---- the driver's calls, one 2 MiB page at a time and over many ---------- */

static void page_costs(int rounds) {
    static CUmemGenericAllocationHandle h[PAGES];
    int n = rounds * PAGES;
    double *create_us = (double *)calloc(n, sizeof(double)), *map_us = (double *)calloc(n, sizeof(double));
    double *access_us = (double *)calloc(n, sizeof(double)), *unmap_us = (double *)calloc(n, sizeof(double));
    double *release_us = (double *)calloc(n, sizeof(double)), *span_us = (double *)calloc(rounds, sizeof(double));
    CUdeviceptr a, b;
    CU(cuMemAddressReserve(&a, PAGES * PAGE, PAGE, 0, 0));
    CU(cuMemAddressReserve(&b, PAGES * PAGE, PAGE, 0, 0));
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < PAGES; i++) TIME_US(create_us[r * PAGES + i], h[i] = create(PAGE));
        for (int i = 0; i < PAGES; i++) TIME_US(map_us[r * PAGES + i], CU(cuMemMap(a + i * PAGE, PAGE, 0, h[i], 0)));
        for (int i = 0; i < PAGES; i++)
            TIME_US(access_us[r * PAGES + i], CU(cuMemSetAccess(a + i * PAGE, PAGE, &access_rw, 1)));
        /* The same handles at a second range, its access set by one call. */
        for (int i = 0; i < PAGES; i++) CU(cuMemMap(b + i * PAGE, PAGE, 0, h[i], 0));
        TIME_US(span_us[r], CU(cuMemSetAccess(b, PAGES * PAGE, &access_rw, 1)));
        RT(cudaMemset((void *)b, 0, PAGES * PAGE)); /* the access is real */
        RT(cudaDeviceSynchronize());
        /* a's unmaps leave the memory mapped at b; the releases then free it. */
        for (int i = 0; i < PAGES; i++) TIME_US(unmap_us[r * PAGES + i], CU(cuMemUnmap(a + i * PAGE, PAGE)));
        for (int i = 0; i < PAGES; i++) CU(cuMemUnmap(b + i * PAGE, PAGE));
        for (int i = 0; i < PAGES; i++) TIME_US(release_us[r * PAGES + i], CU(cuMemRelease(h[i])));
    }
    CU(cuMemAddressFree(a, PAGES * PAGE));
    CU(cuMemAddressFree(b, PAGES * PAGE));
    printf("2 MiB pages (%d rounds of %d)\n", rounds, PAGES);
    row("cuMemCreate 2 MiB", create_us, n);
    row("cuMemMap 2 MiB", map_us, n);
    row("cuMemSetAccess on one 2 MiB mapping", access_us, n);
    double span_median = bench_median(span_us, rounds);
    row("cuMemSetAccess once over 512 mappings of 2 MiB", span_us, rounds);
    printf("  %-62s %10.2f us\n", "  the same, per mapping", span_median / PAGES);
    row("cuMemUnmap 2 MiB (memory still mapped elsewhere)", unmap_us, n);
    row("cuMemRelease 2 MiB (unmapped everywhere: frees it)", release_us, n);
    free(create_us), free(map_us), free(access_us), free(unmap_us), free(release_us), free(span_us);
}

static void gib_costs(void) {
    enum { REPS = 10 };
    const size_t bytes = 1024 * MIB;
    double c[REPS], m[REPS], s[REPS], u[REPS], r[REPS];
    CUdeviceptr at;
    CU(cuMemAddressReserve(&at, bytes, PAGE, 0, 0));
    for (int i = 0; i < REPS; i++) {
        CUmemGenericAllocationHandle h;
        TIME_US(c[i], h = create(bytes));
        TIME_US(m[i], CU(cuMemMap(at, bytes, 0, h, 0)));
        TIME_US(s[i], CU(cuMemSetAccess(at, bytes, &access_rw, 1)));
        TIME_US(u[i], CU(cuMemUnmap(at, bytes)));
        TIME_US(r[i], CU(cuMemRelease(h)));
    }
    CU(cuMemAddressFree(at, bytes));
    printf("1 GiB, one handle\n");
    row("cuMemCreate 1 GiB", c, REPS);
    row("cuMemMap 1 GiB", m, REPS);
    row("cuMemSetAccess 1 GiB", s, REPS);
    row("cuMemUnmap 1 GiB", u, REPS);
    row("cuMemRelease 1 GiB", r, REPS);
}

/* ---- what graph pages rely on --------------------------------------------- */

__global__ void write_marker(int *p, int value) { p[threadIdx.x] = value + (int)threadIdx.x; }

/* Whether all `bytes` at `at` read as `value`. */
static bool reads_as(CUdeviceptr at, int value, size_t bytes) {
    unsigned char *host = (unsigned char *)malloc(bytes);
    RT(cudaMemcpy(host, (void *)at, bytes, cudaMemcpyDeviceToHost));
    bool same = true;
    for (size_t i = 0; i < bytes && same; i++) same = host[i] == (unsigned char)value;
    free(host);
    return same;
}

static bool markers_at(CUdeviceptr at, int value) {
    int host[32];
    RT(cudaMemcpy(host, (void *)at, sizeof host, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 32; i++)
        if (host[i] != value + i) return false;
    return true;
}

static const char *verdict(bool ok) { return ok ? "yes" : "NO"; }

static void two_addresses(void) {
    CUdeviceptr a, b;
    CU(cuMemAddressReserve(&a, PAGE, PAGE, 0, 0));
    CU(cuMemAddressReserve(&b, PAGE, PAGE, 0, 0));
    CUmemGenericAllocationHandle h = create(PAGE);
    map(a, PAGE, h);
    map(b, PAGE, h);
    RT(cudaMemset((void *)a, 0x5A, PAGE));
    bool memset_seen = reads_as(b, 0x5A, PAGE);
    write_marker<<<1, 32>>>((int *)b, 1000);
    RT(cudaGetLastError());
    RT(cudaDeviceSynchronize());
    bool kernel_seen = markers_at(a, 1000);
    CU(cuMemUnmap(a, PAGE));
    bool kept = markers_at(b, 1000);
    CU(cuMemUnmap(b, PAGE));
    CU(cuMemRelease(h));
    CU(cuMemAddressFree(a, PAGE));
    CU(cuMemAddressFree(b, PAGE));
    printf("One 2 MiB handle mapped at two addresses\n");
    printf("  %-62s %s\n", "cudaMemset through one, read back through the other", verdict(memset_seen));
    printf("  %-62s %s\n", "a kernel's writes through one, read through the other", verdict(kernel_seen));
    printf("  %-62s %s\n", "one mapping gone, the other still reads the bytes", verdict(kept));
}

/* A graph of a memset node and a kernel node on one page's address; the
 * page behind the address is swapped, and the graph launched again must
 * write the new page and leave the old one alone. */
static void swap_behind_graph(void) {
    enum { SWAPS = 201 }; /* odd: the last swap puts new_page behind */
    CUdeviceptr at, old_view, new_view;
    CU(cuMemAddressReserve(&at, PAGE, PAGE, 0, 0));
    CU(cuMemAddressReserve(&old_view, PAGE, PAGE, 0, 0));
    CU(cuMemAddressReserve(&new_view, PAGE, PAGE, 0, 0));
    CUmemGenericAllocationHandle old_page = create(PAGE), new_page = create(PAGE);
    map(at, PAGE, old_page);
    map(old_view, PAGE, old_page);
    map(new_view, PAGE, new_page);

    cudaStream_t s;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    RT(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    RT(cudaMemsetAsync((void *)at, 0x11, PAGE, s));
    write_marker<<<1, 32, 0, s>>>((int *)at, 2000);
    RT(cudaGetLastError());
    RT(cudaStreamEndCapture(s, &graph));
    RT(cudaGraphInstantiate(&exec, graph, 0));
    RT(cudaGraphLaunch(exec, s));
    RT(cudaStreamSynchronize(s));
    bool first_ok = markers_at(old_view, 2000) && reads_as(old_view + 128, 0x11, PAGE - 128);

    RT(cudaMemset((void *)old_view, 0, PAGE));
    RT(cudaMemset((void *)new_view, 0, PAGE));
    RT(cudaDeviceSynchronize());
    double swap_us[SWAPS];
    CUmemGenericAllocationHandle behind = old_page;
    for (int i = 0; i < SWAPS; i++) {
        behind = behind == old_page ? new_page : old_page;
        TIME_US(swap_us[i], (CU(cuMemUnmap(at, PAGE)), map(at, PAGE, behind)));
    }
    RT(cudaGraphLaunch(exec, s));
    RT(cudaStreamSynchronize(s));
    bool new_written = behind == new_page && markers_at(new_view, 2000) &&
                       reads_as(new_view + 128, 0x11, PAGE - 128);
    bool old_untouched = reads_as(old_view, 0, PAGE);

    RT(cudaGraphExecDestroy(exec));
    RT(cudaGraphDestroy(graph));
    RT(cudaStreamDestroy(s));
    CU(cuMemUnmap(at, PAGE));
    CU(cuMemUnmap(old_view, PAGE));
    CU(cuMemUnmap(new_view, PAGE));
    CU(cuMemRelease(old_page));
    CU(cuMemRelease(new_page));
    CU(cuMemAddressFree(at, PAGE));
    CU(cuMemAddressFree(old_view, PAGE));
    CU(cuMemAddressFree(new_view, PAGE));
    printf("A page swapped behind an instantiated graph (memset node + kernel node)\n");
    printf("  %-62s %s\n", "first launch writes the first page", verdict(first_ok));
    row("swap: cuMemUnmap + cuMemMap + cuMemSetAccess of 2 MiB", swap_us, SWAPS);
    printf("  %-62s %s\n", "launched again, it writes the new page", verdict(new_written));
    printf("  %-62s %s\n", "and leaves the old page alone", verdict(old_untouched));
}

/* ---- CUDA's graph memory nodes, for comparison ---------------------------- */

/* One size in this (fresh) process: GRAPH_REPS cold repetitions, then
 * GRAPH_REPS warm ones; each captures, instantiates, launches twice and
 * destroys the graph. */
static void graph_memory(size_t bytes) {
    RT(cudaSetDevice(0));
    RT(cudaFree(0));
    cudaStream_t s;
    RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int warm = 0; warm < 2; warm++) {
        double cap[GRAPH_REPS], inst[GRAPH_REPS], launch1[GRAPH_REPS], launch2[GRAPH_REPS];
        for (int i = 0; i < GRAPH_REPS; i++) {
            cudaGraph_t graph;
            cudaGraphExec_t exec;
            void *scratch;
            double t0 = bench_now_ns();
            RT(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
            RT(cudaMallocAsync(&scratch, bytes, s));
            RT(cudaMemsetAsync(scratch, 0x33, bytes, s));
            RT(cudaFreeAsync(scratch, s));
            RT(cudaStreamEndCapture(s, &graph));
            double t1 = bench_now_ns();
            RT(cudaGraphInstantiate(&exec, graph, 0));
            double t2 = bench_now_ns();
            RT(cudaGraphLaunch(exec, s));
            RT(cudaStreamSynchronize(s));
            double t3 = bench_now_ns();
            RT(cudaGraphLaunch(exec, s));
            RT(cudaStreamSynchronize(s));
            double t4 = bench_now_ns();
            cap[i] = (t1 - t0) / 1e3, inst[i] = (t2 - t1) / 1e3;
            launch1[i] = (t3 - t2) / 1e3, launch2[i] = (t4 - t3) / 1e3;
            RT(cudaGraphExecDestroy(exec));
            RT(cudaGraphDestroy(graph));
            if (!warm) RT(cudaDeviceGraphMemTrim(0));
        }
        printf("  %8zu MiB %-5s %12.1f %12.1f %14.1f %14.1f\n", bytes / MIB, warm ? "warm" : "cold",
               bench_median(cap, GRAPH_REPS), bench_median(inst, GRAPH_REPS), bench_median(launch1, GRAPH_REPS),
               bench_median(launch2, GRAPH_REPS));
    }
    RT(cudaStreamDestroy(s));
}

/* Each size in a child forked before this process touches CUDA. */
static void graph_memory_table(void) {
    const size_t sizes[] = {2 * MIB, 128 * MIB, 1024 * MIB};
    printf("Graph memory nodes: cudaMallocAsync + memset + cudaFreeAsync captured (medians of %d, us)\n",
           GRAPH_REPS);
    printf("  %12s %-5s %12s %12s %14s %14s\n", "scratch", "", "capture", "instantiate", "first launch",
           "second launch");
    fflush(stdout);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        pid_t child = fork();
        if (child < 0) {
            perror("fork");
            exit(1);
        }
        if (child == 0) {
            graph_memory(sizes[i]);
            fflush(stdout);
            _exit(0);
        }
        int status = 0;
        if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "vmm_probe: the graph memory run of %zu MiB failed\n", sizes[i] / MIB);
            exit(1);
        }
    }
    printf("  (cold: cudaDeviceGraphMemTrim after each repetition; warm: none)\n");
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    if (rounds < 1) rounds = 1;
    graph_memory_table(); /* first: its children fork from a process without CUDA */

    RT(cudaSetDevice(0));
    RT(cudaFree(0));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    access_rw.location = prop.location;
    access_rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    size_t granularity = 0;
    CU(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    cudaDeviceProp dp;
    RT(cudaGetDeviceProperties(&dp, 0));
    printf("\nDevice 0: %s, VMM granularity %zu KiB\n", dp.name, granularity / 1024);

    page_costs(rounds);
    gib_costs();
    two_addresses();
    swap_behind_graph();
    return 0;
}
