/*
 * capturepool.hpp: header-only C++17 RAII over the C API of capturepool.h.
 *
 * Each class owns one reference of the C handle it wraps and ends it in its
 * destructor; every failing call throws cpool::Error (a std::runtime_error
 * carrying the cpool_status and cpool_last_error()'s text). The C header
 * states each call's promises; this layer adds none of its own.
 *
 *   cpool::Device dev(CPOOL_BACKEND_AUTO);        // cpool_device_open / close
 *   cpool::Stream s(dev);                         // cpool_stream_create / destroy
 *   cpool::Pool pool(dev);                        // cpool_pool_create; copies retain, destructors release
 *   auto x = pool.alloc<float>(n, s);             // cpool::Buffer<float>: frees itself (cpool_free)
 *   cpool::Capture cap(s, pool);                  // cpool_capture_begin; discarded unless end()
 *   ... work on s ...
 *   cpool::Graph g = cap.end();                   // cpool_capture_end
 *   g.launch(s);
 *
 *   cpool::GraphCache cache(pool, {512ull << 20, 0, free_outputs}); // cpool_graph_cache_create / destroy
 *   bool hit = cache.launch(batch, s, [&](const cpool::Stream &st) { ... }); // captures on a miss
 *
 * Thread-safety is the C library's (docs/GUIDE.md, "Thread safety").
 */
#ifndef CAPTUREPOOL_HPP
#define CAPTUREPOOL_HPP

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "capturepool.h"

namespace cpool {

/* A failed call: the C status and cpool_last_error() at the time. */
class Error : public std::runtime_error {
public:
    Error(cpool_status status, const std::string &message)
        : std::runtime_error(message.empty() ? std::string(cpool_status_string(status)) : message), status_(status)
    {
    }
    cpool_status status() const noexcept { return status_; }

private:
    cpool_status status_;
};

/* Throws cpool::Error for anything but CPOOL_OK. */
inline void check(cpool_status status)
{
    if (status != CPOOL_OK)
        throw Error(status, cpool_last_error());
}

inline const char *version_string() noexcept { return cpool_version_string(); }
inline void wait_deferred() noexcept { cpool_wait_deferred(); }

/* A device reference (cpool_device_open / cpool_device_close). Copies open
 * another reference of the same device. */
class Device {
public:
    explicit Device(cpool_backend backend = CPOOL_BACKEND_AUTO, int ordinal = 0) : ordinal_(ordinal)
    {
        check(cpool_device_open(backend, ordinal, &dev_));
    }
    Device(const Device &o) : ordinal_(o.ordinal_) { check(cpool_device_open(o.backend(), o.ordinal_, &dev_)); }
    Device(Device &&o) noexcept : dev_(std::exchange(o.dev_, nullptr)), ordinal_(o.ordinal_) {}
    Device &operator=(Device o) noexcept
    {
        std::swap(dev_, o.dev_);
        std::swap(ordinal_, o.ordinal_);
        return *this;
    }
    ~Device() { cpool_device_close(dev_); }

    cpool_backend backend() const noexcept { return cpool_device_backend(dev_); }
    int ordinal() const noexcept { return ordinal_; }
    cpool_device *get() const noexcept { return dev_; }

private:
    cpool_device *dev_ = nullptr;
    int ordinal_;
};

/* A stream (cpool_stream_create or Stream::wrap / cpool_stream_destroy).
 * Movable, not copyable: the destructor ends it. */
class Stream {
public:
    explicit Stream(const Device &dev) { check(cpool_stream_create(dev.get(), &s_)); }
    /* Wraps an existing cudaStream_t (borrowed, never destroyed). */
    static Stream wrap(const Device &dev, void *cuda_stream)
    {
        cpool_stream *s = nullptr;
        check(cpool_stream_wrap(dev.get(), cuda_stream, &s));
        return Stream(s);
    }
    Stream(Stream &&o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
    Stream &operator=(Stream &&o) noexcept
    {
        if (this != &o) {
            cpool_stream_destroy(s_);
            s_ = std::exchange(o.s_, nullptr);
        }
        return *this;
    }
    Stream(const Stream &) = delete;
    Stream &operator=(const Stream &) = delete;
    ~Stream() { cpool_stream_destroy(s_); }

    void synchronize() const { check(cpool_stream_synchronize(s_)); }
    void *native() const noexcept { return cpool_stream_native(s_); }
    cpool_capture_state capture_state() const
    {
        cpool_capture_state st = CPOOL_CAPTURE_NONE;
        check(cpool_capture_status(s_, &st));
        return st;
    }
    void memcpy_async(void *dst, const void *src, size_t bytes) const
    {
        check(cpool_memcpy_async(s_, dst, src, bytes));
    }
    void memset_async(void *dst, int value, size_t bytes) const { check(cpool_memset_async(s_, dst, value, bytes)); }
    /* cpool_launch_host: fn(arg) in stream order (captured like any work). */
    void launch_host(void (*fn)(void *), void *arg) const { check(cpool_launch_host(s_, fn, arg)); }
    cpool_stream *get() const noexcept { return s_; }

private:
    explicit Stream(cpool_stream *s) noexcept : s_(s) {}
    cpool_stream *s_ = nullptr;
};

/* An event (cpool_event_create / cpool_event_destroy). */
class Event {
public:
    explicit Event(const Device &dev) { check(cpool_event_create(dev.get(), &e_)); }
    Event(Event &&o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
    Event &operator=(Event &&o) noexcept
    {
        if (this != &o) {
            cpool_event_destroy(e_);
            e_ = std::exchange(o.e_, nullptr);
        }
        return *this;
    }
    Event(const Event &) = delete;
    Event &operator=(const Event &) = delete;
    ~Event() { cpool_event_destroy(e_); }

    void record(const Stream &s) const { check(cpool_event_record(e_, s.get())); }
    /* Makes `s` wait for the record (a fork or a join under capture). */
    void wait(const Stream &s) const { check(cpool_stream_wait_event(s.get(), e_)); }
    /* Whether the recorded work has finished (CPOOL_ERR_NOT_READY: false). */
    bool query() const
    {
        cpool_status st = cpool_event_query(e_);
        if (st == CPOOL_ERR_NOT_READY)
            return false;
        check(st);
        return true;
    }
    void synchronize() const { check(cpool_event_synchronize(e_)); }
    float elapsed_ms_since(const Event &start) const
    {
        float ms = 0;
        check(cpool_event_elapsed_ms(start.e_, e_, &ms));
        return ms;
    }
    cpool_event *get() const noexcept { return e_; }

private:
    cpool_event *e_ = nullptr;
};

class Pool;

/* `count` elements of T in a pool's device memory (Pool::alloc), freed
 * (cpool_free, stream ordered on the stream it was allocated on) by the
 * destructor. It holds a reference to its pool, so it never outlives it;
 * the stream must outlive it (as in C, the free needs it). Movable only. */
template <typename T> class Buffer {
    static_assert(std::is_trivially_copyable<T>::value, "device buffers hold trivially copyable elements");

public:
    Buffer() noexcept = default;
    Buffer(Buffer &&o) noexcept
        : pool_(std::exchange(o.pool_, nullptr)), stream_(std::exchange(o.stream_, nullptr)),
          ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0))
    {
    }
    Buffer &operator=(Buffer &&o) noexcept
    {
        if (this != &o) {
            reset();
            pool_ = std::exchange(o.pool_, nullptr);
            stream_ = std::exchange(o.stream_, nullptr);
            ptr_ = std::exchange(o.ptr_, nullptr);
            count_ = std::exchange(o.count_, 0);
        }
        return *this;
    }
    Buffer(const Buffer &) = delete;
    Buffer &operator=(const Buffer &) = delete;
    ~Buffer() { reset(); }

    /* Frees the memory now (stream ordered); the buffer is then empty. */
    void reset() noexcept
    {
        if (ptr_ != nullptr)
            (void)cpool_free(pool_, ptr_, stream_); /* nothing to report from a destructor */
        cpool_pool_release(pool_);
        pool_ = nullptr;
        stream_ = nullptr;
        ptr_ = nullptr;
        count_ = 0;
    }

    T *data() const noexcept { return ptr_; }
    size_t size() const noexcept { return count_; }
    size_t bytes() const noexcept { return count_ * sizeof(T); }
    bool empty() const noexcept { return count_ == 0; }

    /* Stream-ordered copies and fills on `s` (captured like any work). */
    void copy_from_host(const T *src, const Stream &s) const { s.memcpy_async(ptr_, src, bytes()); }
    void copy_to_host(T *dst, const Stream &s) const { s.memcpy_async(dst, ptr_, bytes()); }
    void copy_from(const Buffer &src, const Stream &s) const
    {
        if (src.count_ != count_)
            throw Error(CPOOL_ERR_INVALID_ARGUMENT, "cpool::Buffer::copy_from: buffers of different sizes");
        s.memcpy_async(ptr_, src.ptr_, bytes());
    }
    void fill_bytes(int value, const Stream &s) const { s.memset_async(ptr_, value, bytes()); }

private:
    friend class Pool;
    Buffer(cpool_pool *pool, cpool_stream *s, T *ptr, size_t count) noexcept
        : pool_(pool), stream_(s), ptr_(ptr), count_(count)
    {
    }
    cpool_pool *pool_ = nullptr; /* a reference of the buffer's own */
    cpool_stream *stream_ = nullptr;
    T *ptr_ = nullptr;
    size_t count_ = 0;
};

/* A capture pool reference (cpool_pool_create / cpool_pool_release):
 * copies retain (cpool_pool_retain), destructors release. */
class Pool {
public:
    explicit Pool(const Device &dev, const cpool_pool_options *opts = nullptr)
    {
        check(cpool_pool_create(dev.get(), opts, &p_));
    }
    Pool(const Device &dev, const cpool_pool_options &opts) : Pool(dev, &opts) {}
    /* Takes one more reference of an existing pool (e.g. cpool_graph_pool's). */
    static Pool retain(cpool_pool *p)
    {
        cpool_pool *r = cpool_pool_retain(p);
        if (r == nullptr)
            throw Error(CPOOL_ERR_INVALID_ARGUMENT, cpool_last_error());
        return Pool(r);
    }
    Pool(const Pool &o) : p_(cpool_pool_retain(o.p_)) {}
    Pool(Pool &&o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
    Pool &operator=(Pool o) noexcept
    {
        std::swap(p_, o.p_);
        return *this;
    }
    ~Pool() { cpool_pool_release(p_); }

    void seal() const noexcept { cpool_pool_seal(p_); }
    void unseal() const noexcept { cpool_pool_unseal(p_); }
    bool sealed() const noexcept { return cpool_pool_is_sealed(p_); }
    bool grows_in_place() const noexcept { return cpool_pool_grows_in_place(p_); }

    /* cpool_pool_record: the pool calls drop(object) once, at a clear or its end. */
    size_t record(void *object, void (*drop)(void *)) const
    {
        size_t index = 0;
        check(cpool_pool_record(p_, object, drop, &index));
        return index;
    }
    /* Hands the pool a C++ object to own: deleted at a clear or the pool's
     * end, in registration order. An exception out of its destructor ends
     * the program (destructors are noexcept). */
    template <typename T> size_t record(T *owned) const
    {
        try {
            return record(owned, [](void *o) { delete static_cast<T *>(o); });
        } catch (...) {
            delete owned; /* on failure the pool does not take it */
            throw;
        }
    }
    size_t buffer_count() const noexcept { return cpool_pool_buffer_count(p_); }
    void clear_buffers() const noexcept { cpool_pool_clear_buffers(p_); }

    void *alloc_bytes(size_t bytes, const Stream &s) const
    {
        void *ptr = nullptr;
        check(cpool_alloc(p_, bytes, s.get(), &ptr));
        return ptr;
    }
    void free_bytes(void *ptr, const Stream &s) const { check(cpool_free(p_, ptr, s.get())); }

    /* `count` elements of T, stream ordered on `s` (under capture: graph memory). */
    template <typename T> Buffer<T> alloc(size_t count, const Stream &s) const { return typed<T>(count, s, false); }
    /* For a graph's output (cpool_alloc_output). */
    template <typename T> Buffer<T> alloc_output(size_t count, const Stream &s) const
    {
        return typed<T>(count, s, true);
    }

    cpool_pool_stats stats() const
    {
        cpool_pool_stats st = CPOOL_POOL_STATS_INIT;
        check(cpool_pool_get_stats(p_, &st));
        return st;
    }
    void trim() const { check(cpool_pool_trim(p_)); }
    void suspend(cpool_suspend_mode mode = CPOOL_SUSPEND_KEEP_CONTENTS) const
    {
        check(cpool_pool_suspend(p_, mode));
    }
    void resume() const { check(cpool_pool_resume(p_)); }
    bool suspended() const noexcept { return cpool_pool_is_suspended(p_); }
    void write_snapshot(const std::string &path) const { check(cpool_pool_write_snapshot(p_, path.c_str())); }
    cpool_pool *get() const noexcept { return p_; }

private:
    explicit Pool(cpool_pool *p) noexcept : p_(p) {}
    template <typename T> Buffer<T> typed(size_t count, const Stream &s, bool output) const
    {
        if (count > SIZE_MAX / sizeof(T))
            throw Error(CPOOL_ERR_OUT_OF_MEMORY, "cpool::Pool::alloc: the size overflows size_t");
        void *ptr = nullptr;
        check(output ? cpool_alloc_output(p_, count * sizeof(T), s.get(), &ptr)
                     : cpool_alloc(p_, count * sizeof(T), s.get(), &ptr));
        return Buffer<T>(cpool_pool_retain(p_), s.get(), static_cast<T *>(ptr), count);
    }
    cpool_pool *p_ = nullptr;
};

/* A graph reference (cpool_capture_end, Capture::end, capture(),
 * graphed_call() / cpool_graph_release): copies retain, destructors release. */
class Graph {
public:
    Graph() noexcept = default;
    /* Adopts a reference the caller owns (e.g. from cpool_capture_end). */
    static Graph adopt(cpool_graph *g) noexcept { return Graph(g); }
    Graph(const Graph &o) noexcept : g_(o.g_ ? cpool_graph_retain(o.g_) : nullptr) {}
    Graph(Graph &&o) noexcept : g_(std::exchange(o.g_, nullptr)) {}
    Graph &operator=(Graph o) noexcept
    {
        std::swap(g_, o.g_);
        return *this;
    }
    ~Graph() { cpool_graph_release(g_); }

    void launch(const Stream &s) const { check(cpool_graph_launch(g_, s.get())); }
    void upload(const Stream &s) const { check(cpool_graph_upload(g_, s.get())); }
    uint64_t replays() const noexcept { return cpool_graph_replays(g_); }
    uint64_t id() const noexcept { return cpool_graph_id(g_); }
    size_t pool_buffer_count() const noexcept { return cpool_graph_pool_buffer_count(g_); }
    cpool_graph_stats stats() const
    {
        cpool_graph_stats st = CPOOL_GRAPH_STATS_INIT;
        check(cpool_graph_get_stats(g_, &st));
        return st;
    }
    void dump_dot(const std::string &path) const { check(cpool_graph_dump_dot(g_, path.c_str())); }
    explicit operator bool() const noexcept { return g_ != nullptr; }
    cpool_graph *get() const noexcept { return g_; }

private:
    explicit Graph(cpool_graph *g) noexcept : g_(g) {}
    cpool_graph *g_ = nullptr;
};

/* A capture in a scope (cpool_capture_begin): end() instantiates its graph;
 * destroyed without end() (an exception, an early return) it ends the
 * capture and discards the graph, leaving the stream usable. */
class Capture {
public:
    Capture(const Stream &s, const Pool &pool, cpool_capture_mode mode = CPOOL_CAPTURE_GLOBAL) : s_(&s)
    {
        check(cpool_capture_begin(s.get(), pool.get(), mode));
    }
    /* A capture without a pool. */
    explicit Capture(const Stream &s, cpool_capture_mode mode = CPOOL_CAPTURE_GLOBAL) : s_(&s)
    {
        check(cpool_capture_begin(s.get(), nullptr, mode));
    }
    Capture(const Capture &) = delete;
    Capture &operator=(const Capture &) = delete;
    ~Capture()
    {
        if (s_ != nullptr) {
            cpool_graph *g = nullptr;
            (void)cpool_capture_end(s_->get(), &g); /* discarded */
            cpool_graph_release(g);
        }
    }

    Graph end()
    {
        const Stream *s = std::exchange(s_, nullptr);
        if (s == nullptr)
            throw Error(CPOOL_ERR_NOT_CAPTURING, "cpool::Capture::end: already ended");
        cpool_graph *g = nullptr;
        check(cpool_capture_end(s->get(), &g));
        return Graph::adopt(g);
    }
    bool active() const noexcept { return s_ != nullptr; }

private:
    const Stream *s_;
};

namespace detail {
/* A C++ callable behind a cpool_capture_fn: the callable gets the Stream;
 * a thrown exception is kept, becomes a failing status for C (it never
 * crosses the C frames), and is thrown again once the C call returned. */
template <typename F> struct Body {
    const Stream &stream;
    F &fn;
    std::exception_ptr error;

    static cpool_status call(cpool_stream *, void *ctx) noexcept
    {
        Body *b = static_cast<Body *>(ctx);
        try {
            b->fn(b->stream);
            return CPOOL_OK;
        } catch (const Error &e) {
            b->error = std::current_exception();
            return e.status() == CPOOL_OK ? CPOOL_ERR_INVALID_ARGUMENT : e.status();
        } catch (...) {
            b->error = std::current_exception();
            return CPOOL_ERR_INVALID_ARGUMENT;
        }
    }
    void finish(cpool_status st) const
    {
        if (error)
            std::rethrow_exception(error);
        check(st);
    }
};
} // namespace detail

/* Scoped capture (cpool_capture): body(stream) is captured; an exception
 * out of it discards the capture and is rethrown. */
template <typename F> Graph capture(const Stream &s, const Pool &pool, F &&body, cpool_capture_mode mode = CPOOL_CAPTURE_GLOBAL)
{
    detail::Body<F> b{s, body, nullptr};
    cpool_graph *g = nullptr;
    cpool_status st = cpool_capture(s.get(), pool.get(), mode, &detail::Body<F>::call, &b, &g);
    b.finish(st);
    return Graph::adopt(g);
}

/* A graphed call (cpool_graphed_call): body runs eagerly warmup_runs times,
 * then is captured once into pool. */
template <typename F>
Graph graphed_call(const Stream &s, const Pool &pool, int warmup_runs, F &&body,
                   cpool_capture_mode mode = CPOOL_CAPTURE_GLOBAL)
{
    detail::Body<F> b{s, body, nullptr};
    cpool_graph *g = nullptr;
    cpool_status st = cpool_graphed_call(s.get(), pool.get(), mode, warmup_runs, &detail::Body<F>::call, &b, &g);
    b.finish(st);
    return Graph::adopt(g);
}

/* A graph cache's bounds and eviction hook (GraphCache; the fields of
 * cpool_graph_cache_options). */
struct GraphCacheOptions {
    /* Bound on the pool's graph_reserved_bytes after each launch, in bytes
     * (physical, see cpool_pool_stats); 0: none. */
    uint64_t max_bytes = 0;
    /* Bound on the graphs kept; 0: none. */
    uint32_t max_graphs = 0;
    /* Called as a graph leaves the cache (evicted, or the cache destroyed),
     * before the cache's reference goes, with a Graph holding a reference of
     * its own: where the caller frees that graph's outputs. Empty: no hook. */
    std::function<void(uint64_t key, Graph &graph)> on_evict;
};

namespace detail {
/* One call of a GraphCache that may run on_evict (launch, evict, the
 * cache's end), on this thread. The C library runs on_evict inside that
 * call, on its thread: an exception out of on_evict is kept in the
 * innermost frame of its cache (the first one, where several graphs leave
 * in one call) and thrown once the C call returned. Frames nest where
 * on_evict calls another cache. */
struct EvictFrame {
    explicit EvictFrame(const void *owner_) noexcept : owner(owner_), outer(top()) { top() = this; }
    EvictFrame(const EvictFrame &) = delete;
    EvictFrame &operator=(const EvictFrame &) = delete;
    ~EvictFrame() { top() = outer; }

    void rethrow()
    {
        if (error)
            std::rethrow_exception(std::exchange(error, nullptr));
    }
    static EvictFrame *&top() noexcept
    {
        static thread_local EvictFrame *frame = nullptr;
        return frame;
    }

    const void *owner; /* the cache's hook */
    EvictFrame *outer;
    std::exception_ptr error;
};
} // namespace detail

/* Graphs of one pool kept by the caller's key, under a byte budget
 * (cpool_graph_cache_create / cpool_graph_cache_destroy). launch(key, s,
 * body) launches the key's graph, capturing body first on a miss, then
 * evicts the least recently launched other graphs until max_bytes and
 * max_graphs hold (capturepool.h states the promises; docs/GUIDE.md,
 * "Graph cache").
 *
 * Move-only (a cache is not shared by copy); the destructor ends it, which
 * runs on_evict for every graph kept. Safe to call from several threads
 * (the methods are const): on_evict then runs on whichever thread's call
 * evicts, possibly on two at once.
 *
 * Exceptions: one thrown by body discards the capture (nothing is kept,
 * evicted or counted) and is rethrown by launch. One thrown by on_evict
 * never crosses the C library either: the eviction goes on as if on_evict
 * had returned (the graph leaves, the next ones are evicted, the launch
 * runs), and the first such exception is rethrown once the C call
 * returned, before any failing status is thrown, so the cache's state and
 * counters are those of a completed call. The destructor (noexcept) calls
 * std::terminate where on_evict throws in it: reset() ends the cache and
 * rethrows instead. */
class GraphCache {
public:
    explicit GraphCache(const Pool &pool, GraphCacheOptions opts = GraphCacheOptions())
    {
        cpool_graph_cache_options o = CPOOL_GRAPH_CACHE_OPTIONS_INIT;
        o.max_bytes = opts.max_bytes;
        o.max_graphs = opts.max_graphs;
        if (opts.on_evict) {
            hook_.reset(new Hook(std::move(opts.on_evict)));
            o.on_evict = &GraphCache::evict_hook;
            o.user = hook_.get();
        }
        check(cpool_graph_cache_create(pool.get(), &o, &c_));
    }
    GraphCache(GraphCache &&o) noexcept : c_(std::exchange(o.c_, nullptr)), hook_(std::move(o.hook_)) {}
    GraphCache &operator=(GraphCache &&o) noexcept
    {
        if (this != &o) {
            end_or_terminate();
            c_ = std::exchange(o.c_, nullptr);
            hook_ = std::move(o.hook_);
        }
        return *this;
    }
    GraphCache(const GraphCache &) = delete;
    GraphCache &operator=(const GraphCache &) = delete;
    ~GraphCache() { end_or_terminate(); }

    /* Ends the cache now (on_evict for every graph kept, then its
     * references go); it is then empty, and calls on it throw
     * CPOOL_ERR_INVALID_ARGUMENT. Rethrows the first exception of on_evict,
     * after every graph left. */
    void reset()
    {
        detail::EvictFrame frame(hook_.get());
        cpool_graph_cache_destroy(std::exchange(c_, nullptr));
        hook_.reset();
        frame.rethrow();
    }

    /* Launches the graph kept under key on s; on a miss, first captures
     * body(s) (any callable taking const cpool::Stream &, as capture()) and
     * keeps it. Returns whether it was a hit. Threads that may capture at
     * the same time must pass CPOOL_CAPTURE_THREAD_LOCAL as mode (CUDA's
     * rule: a global-mode capture makes the other threads' instantiates
     * fail). */
    template <typename F>
    bool launch(uint64_t key, const Stream &s, F &&body, cpool_capture_mode mode = CPOOL_CAPTURE_GLOBAL) const
    {
        detail::Body<F> b{s, body, nullptr};
        detail::EvictFrame frame(hook_.get());
        bool hit = false;
        cpool_status st = cpool_graph_cache_launch(c_, key, s.get(), mode, &detail::Body<F>::call, &b, &hit);
        if (!b.error)
            frame.rethrow(); /* a failed body evicted nothing: its exception goes first */
        b.finish(st);
        return hit;
    }

    /* The graph kept under key, with a reference of its own; an empty Graph
     * (false) if none. Not a launch: the order of eviction and the counters
     * stay. */
    Graph get(uint64_t key) const
    {
        cpool_graph *g = nullptr;
        check(cpool_graph_cache_get(c_, key, &g));
        return Graph::adopt(g);
    }

    /* Evicts the graph kept under key (on_evict first); nothing where none. */
    void evict(uint64_t key) const
    {
        detail::EvictFrame frame(hook_.get());
        cpool_status st = cpool_graph_cache_evict(c_, key);
        frame.rethrow();
        check(st);
    }

    cpool_graph_cache_stats stats() const
    {
        cpool_graph_cache_stats st = CPOOL_GRAPH_CACHE_STATS_INIT;
        check(cpool_graph_cache_get_stats(c_, &st));
        return st;
    }

    /* The pool's graph_reserved_bytes with one more graph that allocates
     * output_bytes of outputs and then scratch_bytes of scratch
     * (cpool_graph_cache_predict_bytes). */
    uint64_t predict_bytes(uint64_t scratch_bytes, uint64_t output_bytes) const
    {
        uint64_t bytes = 0;
        check(cpool_graph_cache_predict_bytes(c_, scratch_bytes, output_bytes, &bytes));
        return bytes;
    }

    explicit operator bool() const noexcept { return c_ != nullptr; }
    /* The C handle (as the other classes' get()); get(key) looks a graph up. */
    cpool_graph_cache *get() const noexcept { return c_; }

private:
    using Hook = std::function<void(uint64_t, Graph &)>;

    static void evict_hook(uint64_t key, cpool_graph *graph, void *user) noexcept
    {
        try {
            Graph g = Graph::adopt(cpool_graph_retain(graph));
            (*static_cast<Hook *>(user))(key, g);
        } catch (...) {
            for (detail::EvictFrame *f = detail::EvictFrame::top(); f != nullptr; f = f->outer) {
                if (f->owner == user) {
                    if (!f->error)
                        f->error = std::current_exception();
                    return;
                }
            }
            std::terminate(); /* no call of this cache on this thread to hand it to */
        }
    }

    void end_or_terminate() noexcept
    {
        detail::EvictFrame frame(hook_.get());
        cpool_graph_cache_destroy(std::exchange(c_, nullptr));
        hook_.reset();
        if (frame.error)
            std::terminate(); /* an exception out of on_evict in a destructor */
    }

    cpool_graph_cache *c_ = nullptr;
    std::unique_ptr<Hook> hook_; /* on_evict's user: its address stays across moves */
};

} // namespace cpool

#endif /* CAPTUREPOOL_HPP */
