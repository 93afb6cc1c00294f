/*
 * Output guesses: which allocations of a capture are its graph's outputs,
 * guessed from the pool's last capture.
 *
 * A graph's outputs outlive its capture; they are packed together in the
 * pool's packed region (graph_pages.h), on pages no other graph writes,
 * while scratch lies on pages the pool's graphs share. The caller may say
 * which allocations are outputs (cpool_alloc_output); the others are
 * guessed. Graphs captured one after another into a pool tend to allocate
 * in the same order (a graph per batch size), so the pool keeps which
 * allocations of its last capture outlived it, with their stream and size
 * (`cpool__guesses`, learned at a capture's end; not those made by
 * cpool_alloc_output: the caller names its outputs), and the next capture
 * bound to it packs the blocks at those places as outputs. Places are
 * counted per stream: a stream's n-th allocation stands for that stream's
 * n-th in the last capture.
 *
 *   capture k ends ---- learn ----> pool's guesses ---- hand ----> capture k+1
 *   (its log: what outlived it)     (outputs, streams,            (packs a request
 *                                    sizes; muted, far)             where one outlived)
 *
 * A guess costs nothing when it is right. A wrong one packs a scratch
 * block, which is then not shared: it costs its size for as long as its
 * graph lives. Hence the thresholds below, each bounding that cost, and
 * two states learned from how the guesses went:
 * - muted: the last capture guessed wrong (it freed a block it guessed to
 *   be an output). The next captures only note what they would have
 *   guessed, and guess again once that would have been right.
 * - far: guesses far from the output's size (below) are made too, after a
 *   capture kept such a request as an output; never again in the pool once
 *   one of them went wrong.
 *
 * The pool's guesses live under its lock; a capture's copy of them (its
 * plan, `predicted`) lives in its record, which capture_record.c writes.
 */
#ifndef CPOOL_OUTPUT_GUESSES_H
#define CPOOL_OUTPUT_GUESSES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* ---- the thresholds and why ---------------------------------------------- */

/* No request above this is packed on a guess: packed memory is not
 * shared, so a wrong guess costs its size while its graph lives. */
#define CPOOL__PREDICTED_MAX ((size_t)16 << 20)
/* A request is guessed an output only up to this many times the size that
 * output had: graphs per batch size grow by less from one to the next, and
 * a scratch block taken for an output would cost its size. */
#define CPOOL__GUESS_GROWTH_MAX ((size_t)16)
/* Above this, a guess also wants the request within a factor of
 * CPOOL__GUESS_NEAR_RATIO of the output it stands for (graphs per batch
 * size double at most from one to the next). Graphs that put their output
 * before and after an 8 MiB scratch in turn had every scratch guessed
 * without it: 3x their bound (tests/test_graph_pages.c,
 * alternating_orders_share_pages: 80 MiB held against 26). */
#define CPOOL__GUESS_NEAR_MIN ((size_t)1 << 20)
#define CPOOL__GUESS_NEAR_RATIO ((size_t)2)
/* Two more rules are not numbers but learned from how the guesses went
 * (cpool__guesses_take):
 * - Muting after a wrong guess: graphs whose outputs change places from
 *   one capture to the next would otherwise each pack a scratch block,
 *   never shared (the alternating graphs above; tests/test_graph_pages.c,
 *   wrong_guesses_are_muted, whose outputs are near the scratch's size:
 *   without it 42 MiB held against a bound of 32). Muted guesses come back
 *   only once a capture's would-be guesses were right: one that would have
 *   guessed nothing proves nothing (muted_until_guesses_are_right: graphs
 *   whose outputs and scratch take turns then guessed wrong every other
 *   capture, 78 MiB held against a bound of 58).
 * - Far guesses, at an output's place a request far from its size by the
 *   rules above: made once a capture of the pool kept such a request as
 *   an output. An engine captures its graphs in no order of size, and they
 *   jump by up to 128 times from one to the next (engine_off_the_page_grid
 *   held 174 MiB, 1.024x of the bound in pages, when none was made). A far
 *   guess that went wrong is not made again in the pool: one capture that
 *   keeps a far-sized output would otherwise turn them back on, and the
 *   next would pack its scratch, 16 MiB a pair of graphs
 *   (far_guesses_go_wrong_once: 94 MiB held against a bound of 83). */

/* ---- a pool's guesses ---------------------------------------------------- */

/* Which allocations of the last capture bound to the pool outlived it: bit
 * i of `outputs` for its i-th, made on stream streams[i] with sizes[i]
 * bytes asked for. Embedded in the pool, under its lock; all zero: nothing
 * learned yet. */
typedef struct cpool__guesses {
    uint64_t *outputs, *streams;
    size_t *sizes;
    size_t count;
    bool muted;       /* the last capture guessed wrong: the next one's guesses are only noted */
    bool far;         /* guesses far from the output's size are made too */
    bool far_spoiled; /* a guess went wrong while far guesses were made: none from then on */
} cpool__guesses;

/* Frees what the pool learned (its teardown). */
void cpool__guesses_destroy(cpool__guesses *g);

/* What a capture that ended well, bound to the pool, teaches it: its plan
 * for the next, and how its own guesses went. Made without the pool's lock
 * (cpool__guesses_learn), taken under it (cpool__guesses_take). */
typedef struct cpool__guess_lesson {
    uint64_t *outputs, *streams;
    size_t *sizes;
    size_t count;
    bool guessed_wrong; /* it freed a block its plan guessed (or could not note its guesses) */
    bool far_missed;    /* a request at an output's place, far from its size and not guessed, outlived it */
    bool stayed_muted;  /* muted, it would have guessed nothing: no proof either way */
    bool guessed_far;   /* its plan made far guesses */
} cpool__guess_lesson;

/* The lesson of `cap`; false when there is none (nothing allocated, or no
 * host memory for its log or the copy): the pool's guesses stay as they are. */
bool cpool__guesses_learn(const cpool__capture *cap, cpool__guess_lesson *out);
/* The pool's guesses become the lesson's (which they then own), muted and
 * far as it earned. */
void cpool__guesses_take(cpool__guesses *g, cpool__guess_lesson *lesson);

/* Hands a copy of the pool's guesses to the capture bound to it as it
 * begins (cpool__capture_predict); nothing when there are none or no host
 * memory. */
void cpool__guesses_hand(const cpool__guesses *g, cpool__capture *cap);

/* What the capture's plan (a graphed call's, or guesses handed to it) says
 * of its next allocation. */
typedef struct cpool__guess {
    size_t entry;  /* the plan's entry, for cpool__capture_plan_taken (SIZE_MAX: none) */
    bool output;   /* the plan packs it as an output */
    bool guessed;  /* guessed an output (acted on, or only noted while muted) */
    bool far_miss; /* at an output's place, not guessed for being far from its size */
} cpool__guess;

/* The capture's next allocation of `bytes` on stream `stream_id`; `said`:
 * the caller said it is an output (cpool_alloc_output), so it is no guess. */
cpool__guess cpool__guesses_next(const cpool__capture *cap, uint64_t stream_id, size_t bytes, bool said);

/* Whether the next capture's first request, of `bytes`, would be packed as
 * a guessed output: the last capture's first allocation was an output,
 * near enough in size, and guesses are on (a graph cache's prediction). */
bool cpool__guesses_first_packs(const cpool__guesses *g, size_t bytes);

#endif /* CPOOL_OUTPUT_GUESSES_H */
