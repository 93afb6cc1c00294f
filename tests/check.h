/*
 * check.h: the test suite's tiny assertion header and runner.
 *
 * A test case is a function `void name(cpool_device *dev)`. The runner calls
 * it once per backend that is present: the host backend always, the CUDA
 * backend when cpool_device_open(CPOOL_BACKEND_CUDA, 0, ...) succeeds; where
 * it does not, the runner prints a visible SKIP line for the case. Every case
 * gets a freshly opened device.
 *
 * Failed checks are counted, not fatal: a case goes on after a failure so
 * that one run shows every broken expectation. REQUIRE* macros are the
 * exception: they return from the case, for setup whose failure would make
 * the rest of the case meaningless (or crash it).
 *
 * The last line of every binary is exactly "N passed, N failed" (cases times
 * backends); the exit status is 1 on any failure, 77 (ctest's SKIP_RETURN_CODE)
 * when every case was skipped, 0 otherwise. Before exiting 77 it prints one
 * line "SKIPPED: <why>", which scripts/test.sh collects from ctest's log.
 *
 * The header is valid C11 and C++ (test_kernels.cu includes it), and its
 * counters are updated atomically so that checks may run on worker threads.
 */
#ifndef CPOOL_TESTS_CHECK_H
#define CPOOL_TESTS_CHECK_H

#if !defined(_POSIX_C_SOURCE) && !defined(__cplusplus)
#define _POSIX_C_SOURCE 200809L /* nanosleep, pthreads under -std=c11 */
#endif

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capturepool.h"

/* ---- state of the running case ------------------------------------------ */

static int check_case_failures_;                 /* failed checks in the running case */
static const char *check_backend_name_ = "none"; /* "host" or "cuda" */
static const char *check_case_name_ = "";

static inline const char *check_backend_label(cpool_backend b) {
    return b == CPOOL_BACKEND_CUDA ? "cuda" : b == CPOOL_BACKEND_HOST ? "host" : "auto";
}

/* Prints one failure and counts it. */
static inline void check_report_(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    __atomic_add_fetch(&check_case_failures_, 1, __ATOMIC_SEQ_CST);
    flockfile(stdout);
    printf("  FAIL [%s] %s %s:%d: ", check_backend_name_, check_case_name_, file, line);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    funlockfile(stdout);
}

/* ---- checks --------------------------------------------------------------- */

#define CHECK(cond)                                                      \
    do {                                                                 \
        if (!(cond)) check_report_(__FILE__, __LINE__, "CHECK(%s)", #cond); \
    } while (0)

/* Integer comparisons. Both sides are evaluated once and compared as
 * unsigned long long (every quantity of this API is a size, a count or an
 * enum); a failure prints both sides, signed and in hex. */
#define CHECK_CMP_(a, op, b)                                                                          \
    do {                                                                                              \
        unsigned long long check_a_ = (unsigned long long)(a);                                        \
        unsigned long long check_b_ = (unsigned long long)(b);                                        \
        if (!(check_a_ op check_b_))                                                                  \
            check_report_(__FILE__, __LINE__, "CHECK(%s %s %s): %lld (0x%llx) vs %lld (0x%llx)", #a, #op, \
                          #b, (long long)check_a_, check_a_, (long long)check_b_, check_b_);          \
    } while (0)
#define CHECK_EQ(a, b) CHECK_CMP_(a, ==, b)
#define CHECK_NE(a, b) CHECK_CMP_(a, !=, b)
#define CHECK_LT(a, b) CHECK_CMP_(a, <, b)
#define CHECK_LE(a, b) CHECK_CMP_(a, <=, b)
#define CHECK_GT(a, b) CHECK_CMP_(a, >, b)
#define CHECK_GE(a, b) CHECK_CMP_(a, >=, b)

#define CHECK_PTR_EQ(a, b)                                                                           \
    do {                                                                                             \
        const void *check_pa_ = (const void *)(a);                                                   \
        const void *check_pb_ = (const void *)(b);                                                   \
        if (check_pa_ != check_pb_)                                                                  \
            check_report_(__FILE__, __LINE__, "CHECK_PTR_EQ(%s, %s): %p != %p", #a, #b, check_pa_, check_pb_); \
    } while (0)

#define CHECK_STR_EQ(a, b)                                                                            \
    do {                                                                                              \
        const char *check_sa_ = (a);                                                                  \
        const char *check_sb_ = (b);                                                                  \
        if (!check_sa_ || !check_sb_ || strcmp(check_sa_, check_sb_) != 0)                            \
            check_report_(__FILE__, __LINE__, "CHECK_STR_EQ(%s, %s): \"%s\" != \"%s\"", #a, #b,        \
                          check_sa_ ? check_sa_ : "(null)", check_sb_ ? check_sb_ : "(null)");         \
    } while (0)

/* Returns 1 when got == want; otherwise prints both statuses in words and
 * this thread's cpool_last_error(), counts the failure and returns 0. The
 * call is evaluated (as a function argument) before the last error is read. */
static inline int check_status_(cpool_status got, cpool_status want, const char *call, const char *want_text,
                                const char *file, int line) {
    if (got == want) return 1;
    {
        const char *last = cpool_last_error();
        check_report_(file, line, "%s returned %d (%s), expected %s = %d (%s); cpool_last_error: \"%s\"", call,
                      (int)got, cpool_status_string(got), want_text, (int)want, cpool_status_string(want),
                      last ? last : "(NULL)");
    }
    return 0;
}

#define CHECK_STATUS(call, expected) check_status_((call), (expected), #call, #expected, __FILE__, __LINE__)
#define CHECK_OK(call) CHECK_STATUS(call, CPOOL_OK)

/* As CHECK / CHECK_OK, but return from the (void) case on failure. */
#define REQUIRE(cond)                                                                \
    do {                                                                             \
        if (!(cond)) {                                                               \
            check_report_(__FILE__, __LINE__, "REQUIRE(%s) (case abandoned)", #cond); \
            return;                                                                  \
        }                                                                            \
    } while (0)
#define REQUIRE_OK(call)                                  \
    do {                                                  \
        if (!CHECK_STATUS(call, CPOOL_OK)) return;        \
    } while (0)

/* ---- cleanups -------------------------------------------------------------- */

/* What the running case registered to end when it returns, normally or
 * from a failed REQUIRE: run last first by the runner, so that an abandoned
 * case leaks nothing into the next one. */
typedef void (*check_cleanup_fn)(void *arg);
enum { CHECK_CLEANUPS_MAX = 64 };
static struct {
    check_cleanup_fn fn;
    void *arg;
} check_cleanups_[CHECK_CLEANUPS_MAX];
static int check_cleanup_count_;

static inline void check_defer(check_cleanup_fn fn, void *arg) {
    if (check_cleanup_count_ == CHECK_CLEANUPS_MAX) {
        fprintf(stderr, "check_defer: more than %d cleanups in one case\n", CHECK_CLEANUPS_MAX);
        abort();
    }
    check_cleanups_[check_cleanup_count_].fn = fn;
    check_cleanups_[check_cleanup_count_].arg = arg;
    check_cleanup_count_++;
}

static inline void check_run_cleanups_(void) {
    while (check_cleanup_count_ > 0) {
        check_cleanup_count_--;
        check_cleanups_[check_cleanup_count_].fn(check_cleanups_[check_cleanup_count_].arg);
    }
}

/* ---- runner --------------------------------------------------------------- */

/* Whether the case runs under the binary's first argument: names that
 * contain any of its comma-separated parts, or, with a leading '-', names
 * that contain none of them ("engine,batch" and "-engine,batch" split a
 * binary in two ctest entries that run side by side). */
static inline int check_case_selected_(const char *name, const char *filter) {
    int exclude = filter[0] == '-';
    const char *part = filter + exclude;
    int hit = 0;
    while (*part && !hit) {
        const char *end = strchr(part, ',');
        size_t len = end ? (size_t)(end - part) : strlen(part);
        for (const char *p = name; *p && !hit; p++) hit = len && strncmp(p, part, len) == 0;
        part += len + (end ? 1 : 0);
    }
    return exclude ? !hit : hit;
}

typedef void (*check_case_fn)(cpool_device *dev);
typedef struct check_case {
    const char *name;
    check_case_fn fn;
} check_case;
#define CHECK_CASE(fn) {#fn, fn}

enum { CHECK_ON_HOST = 1, CHECK_ON_CUDA = 2, CHECK_ON_ALL = 3 };

/* Runs every case (or those whose name contains argv[1]) once per backend in
 * `backends` that is present. */
static inline int check_run_(int argc, char **argv, const check_case *cases, size_t n, int backends) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    int passed = 0, failed = 0, skipped = 0;
    int have_cuda = 0;
    char cuda_reason[256] = "";
    size_t i;
    int b;

    {
        cpool_device *probe = NULL;
        cpool_status st = cpool_device_open(CPOOL_BACKEND_CUDA, 0, &probe);
        if (st == CPOOL_OK) {
            have_cuda = 1;
            cpool_device_close(probe);
#ifdef __CUDACC__
            /* A .cu test has a CUDA runtime of its own, apart from the
             * library's: it starts now, not at a first kernel launch inside
             * a case's capture. */
            cudaFree(NULL);
#endif
        } else {
            const char *last = cpool_last_error();
            snprintf(cuda_reason, sizeof cuda_reason, "%s%s%s", cpool_status_string(st),
                     last && *last ? ": " : "", last ? last : "");
        }
    }

    for (i = 0; i < n; i++) {
        if (filter && !check_case_selected_(cases[i].name, filter)) continue;
        for (b = 0; b < 2; b++) {
            cpool_backend backend = b == 0 ? CPOOL_BACKEND_HOST : CPOOL_BACKEND_CUDA;
            cpool_device *dev = NULL;
            cpool_status st;
            if (!(backends & (b == 0 ? CHECK_ON_HOST : CHECK_ON_CUDA))) continue;
            check_backend_name_ = check_backend_label(backend);
            check_case_name_ = cases[i].name;
            if (backend == CPOOL_BACKEND_CUDA && !have_cuda) {
                printf("SKIP [cuda] %s: no usable GPU (%s)\n", cases[i].name, cuda_reason);
                fflush(stdout);
                skipped++;
                continue;
            }
            printf("RUN  [%s] %s\n", check_backend_name_, cases[i].name);
            fflush(stdout);
            __atomic_store_n(&check_case_failures_, 0, __ATOMIC_SEQ_CST);
            st = cpool_device_open(backend, 0, &dev);
            if (st != CPOOL_OK) {
                check_report_(__FILE__, __LINE__, "cpool_device_open(%s) failed: %s (%s)", check_backend_name_,
                              cpool_status_string(st), cpool_last_error());
            } else {
                cases[i].fn(dev);
                check_run_cleanups_();
                cpool_device_close(dev);
                /* Teardown a case handed to the library's thread ends with the case. */
                cpool_wait_deferred();
            }
            if (__atomic_load_n(&check_case_failures_, __ATOMIC_SEQ_CST) == 0) {
                printf("PASS [%s] %s\n", check_backend_name_, cases[i].name);
                passed++;
            } else {
                printf("FAIL [%s] %s: %d failed check(s)\n", check_backend_name_, cases[i].name,
                       __atomic_load_n(&check_case_failures_, __ATOMIC_SEQ_CST));
                failed++;
            }
            fflush(stdout);
        }
    }
    if (!failed && passed == 0 && skipped > 0)
        printf("SKIPPED: all %d case(s) need the CUDA backend, and no GPU is usable (%s)\n", skipped, cuda_reason);
    printf("%d passed, %d failed\n", passed, failed);
    fflush(stdout);
    if (failed) return 1;
    return passed == 0 && skipped > 0 ? 77 : 0;
}

#define CHECK_MAIN(cases, backends)                                                        \
    int main(int argc, char **argv) {                                                       \
        return check_run_(argc, argv, cases, sizeof(cases) / sizeof((cases)[0]), backends); \
    }

#endif /* CPOOL_TESTS_CHECK_H */
