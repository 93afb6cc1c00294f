/*
 * Output guesses (output_guesses.h, where the design and the thresholds
 * are): a pool's guesses (`cpool__guesses`, embedded in the pool and
 * changed under its lock by the calls here), learned from the record of a
 * capture that ended, handed to the next capture's record, and asked at
 * each of that capture's allocations. A capture's record is read here and
 * written only through capture_record.c's functions.
 */
#include <stdlib.h>
#include <string.h>

#include "output_guesses.h"

/* How a guessed output that had `had` bytes in the last capture applies to
 * a request of `bytes` now: near enough to pack it, far (packed only with
 * far guesses), or never (above CPOOL__PREDICTED_MAX). */
typedef enum guess_size { GUESS_NEAR, GUESS_FAR, GUESS_NEVER } guess_size;

/* A guess packs only requests near the size that output had: up to
 * CPOOL__GUESS_GROWTH_MAX times it, and above CPOOL__GUESS_NEAR_MIN within
 * a factor of CPOOL__GUESS_NEAR_RATIO; others only once a capture of the
 * pool showed them outputs. */
static guess_size guess_fits(size_t had, size_t bytes) {
    if (bytes > CPOOL__PREDICTED_MAX) return GUESS_NEVER;
    if (bytes / CPOOL__GUESS_GROWTH_MAX <= had &&
        (bytes <= CPOOL__GUESS_NEAR_MIN ||
         (bytes / CPOOL__GUESS_NEAR_RATIO <= had && had / CPOOL__GUESS_NEAR_RATIO <= bytes)))
        return GUESS_NEAR;
    return GUESS_FAR;
}

void cpool__guesses_destroy(cpool__guesses *g) {
    free(g->outputs);
    free(g->streams);
    free(g->sizes);
    *g = (cpool__guesses){0};
}

/* ---- a capture's end: what it teaches ------------------------------------ */

/* Whether the capture's log still holds one of `of`'s allocations (it did
 * not free it: an output). */
static bool log_keeps(const cpool__capture *cap, const cpool__learn *of, size_t g) {
    for (size_t i = cap->log.count; i-- > 0;)
        if (cap->log.ptrs[i] == of->ptrs[g]) return true;
    return false;
}

/* Whether an allocation the capture did not guess for its size only
 * (far_miss) outlived it: far guesses would have been right. */
static bool far_missed(const cpool__capture *cap) {
    if (cap->far_misses.failed || cap->log.failed) return false;
    for (size_t g = 0; g < cap->far_misses.count; g++)
        if (log_keeps(cap, &cap->far_misses, g)) return true;
    return false;
}

/* Whether the capture freed an allocation its predicted plan guessed to be
 * an output (or could not note its guesses). */
static bool guessed_wrong(const cpool__capture *cap) {
    if (cap->guesses.failed || cap->log.failed) return true;
    /* A guess the capture freed is no longer in its log. */
    for (size_t g = 0; g < cap->guesses.count; g++)
        if (!log_keeps(cap, &cap->guesses, g)) return true;
    return false;
}

bool cpool__guesses_learn(const cpool__capture *cap, cpool__guess_lesson *out) {
    const cpool__learn *log = &cap->log;
    size_t n = log->count;
    if (log->failed || !n) return false;
    uint64_t *bits = cpool__calloc(n / 64 + 1, sizeof *bits);
    uint64_t *streams = cpool__malloc(n * sizeof *streams);
    size_t *sizes = cpool__malloc(n * sizeof *sizes);
    if (!bits || !streams || !sizes) {
        free(bits);
        free(streams);
        free(sizes);
        return false;
    }
    for (size_t i = 0; i < n; i++)
        if (log->ptrs[i]) bits[i / 64] |= (uint64_t)1 << (i % 64);
    memcpy(streams, log->streams, n * sizeof *streams);
    memcpy(sizes, log->sizes, n * sizeof *sizes);
    *out = (cpool__guess_lesson){
        .outputs = bits,
        .streams = streams,
        .sizes = sizes,
        .count = n,
        .guessed_wrong = guessed_wrong(cap),
        .far_missed = far_missed(cap),
        .stayed_muted = cap->guesses_muted && !cap->guesses.count,
        .guessed_far = cap->far_guesses,
    };
    return true;
}

void cpool__guesses_take(cpool__guesses *g, cpool__guess_lesson *lesson) {
    free(g->outputs);
    free(g->streams);
    free(g->sizes);
    g->outputs = lesson->outputs;
    g->streams = lesson->streams;
    g->sizes = lesson->sizes;
    g->count = lesson->count;
    /* Muted guesses come back only once a capture's would-be guesses were
     * right; far guesses that went wrong once are not made again
     * (output_guesses.h). */
    bool wrong = lesson->guessed_wrong;
    g->muted = wrong || lesson->stayed_muted;
    g->far_spoiled = g->far_spoiled || (wrong && lesson->guessed_far);
    g->far = !g->far_spoiled && !wrong && (lesson->far_missed || g->far);
}

/* ---- the next capture: its plan and each allocation ------------------------ */

void cpool__guesses_hand(const cpool__guesses *g, cpool__capture *cap) {
    size_t n = g->count;
    uint64_t *bits = n ? cpool__malloc((n / 64 + 1) * sizeof *bits) : NULL;
    uint64_t *streams = n ? cpool__malloc(n * sizeof *streams) : NULL;
    size_t *sizes = n ? cpool__malloc(n * sizeof *sizes) : NULL;
    if (bits && streams && sizes) {
        memcpy(bits, g->outputs, (n / 64 + 1) * sizeof *bits);
        memcpy(streams, g->streams, n * sizeof *streams);
        memcpy(sizes, g->sizes, n * sizeof *sizes);
        cpool__capture_predict(cap, bits, streams, sizes, n, g->muted, g->far);
    } else {
        free(bits);
        free(streams);
        free(sizes);
    }
}

cpool__guess cpool__guesses_next(const cpool__capture *cap, uint64_t stream_id, size_t bytes, bool said) {
    cpool__guess out = {.entry = SIZE_MAX};
    bool planned = cpool__capture_plan_lookup(cap, stream_id, &out.entry);
    bool far = false;
    /* A graphed call's plan is its eager run's, no guess: taken as it is. */
    if (planned && cap->predicted) {
        guess_size fit = guess_fits(cap->plan_sizes[out.entry], bytes);
        far = fit == GUESS_FAR;
        planned = fit == GUESS_NEAR || (far && cap->far_guesses);
    }
    out.guessed = planned && !said && cap->predicted;
    out.far_miss = far && !planned && !said;
    out.output = planned && !(out.guessed && cap->guesses_muted);
    return out;
}

bool cpool__guesses_first_packs(const cpool__guesses *g, size_t bytes) {
    if (!g->count || !(g->outputs[0] & 1) || g->muted) return false;
    guess_size fit = guess_fits(g->sizes[0], bytes);
    return fit == GUESS_NEAR || (fit == GUESS_FAR && g->far);
}
