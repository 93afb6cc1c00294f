// include/capturepool.hpp: the RAII classes end their handles, copies
// retain, Capture discards unless ended, every failure throws cpool::Error
// with the C status and cpool_last_error()'s text, exceptions from capture
// bodies cross no C frame; GraphCache counts, bounds, evicts through
// on_evict and carries body and on_evict exceptions past the C frames.
// Built with -Wall -Wextra -Werror (g++ and clang++).
#include <capturepool.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

static int failures = 0;

#define EXPECT(cond)                                                                                         \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            std::fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond);                          \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

// Expects `expr` to throw cpool::Error with `status`; returns its message.
#define EXPECT_THROWS(expr, st)                                                                              \
    [&]() -> std::string {                                                                                   \
        try {                                                                                                \
            (void)(expr);                                                                                    \
        } catch (const cpool::Error &e_) {                                                                   \
            if (e_.status() != (st)) {                                                                       \
                std::fprintf(stderr, "%s:%d: %s threw %s (%s), expected %s\n", __FILE__, __LINE__, #expr,    \
                             cpool_status_string(e_.status()), e_.what(), #st);                              \
                failures++;                                                                                  \
            }                                                                                                \
            return e_.what();                                                                                \
        }                                                                                                    \
        std::fprintf(stderr, "%s:%d: %s did not throw\n", __FILE__, __LINE__, #expr);                        \
        failures++;                                                                                          \
        return std::string();                                                                                \
    }()

static std::vector<int> drops;

struct Tracked {
    int id;
    ~Tracked() { drops.push_back(id); }
};

static void raii_and_copies(const cpool::Device &dev)
{
    drops.clear();
    {
        cpool::Pool pool(dev);
        EXPECT(pool.record(new Tracked{0}) == 0);
        EXPECT(pool.record(new Tracked{1}) == 1);
        EXPECT(pool.buffer_count() == 2);
        cpool::Pool copy = pool; // cpool_pool_retain
        {
            cpool::Pool moved = std::move(pool);
            EXPECT(pool.get() == nullptr);
        }
        EXPECT(drops.empty()); // the copy holds a reference
        EXPECT(copy.buffer_count() == 2);
    }
    EXPECT((drops == std::vector<int>{0, 1})); // the last reference dropped them, in order
    cpool::Device again = dev;                 // another reference of the same device
    EXPECT(again.get() == dev.get());
    EXPECT(again.backend() == dev.backend());
}

static void buffers_free_themselves(const cpool::Device &dev)
{
    cpool::Stream s(dev);
    cpool::Pool pool(dev);
    {
        auto a = pool.alloc<int>(1000, s);
        auto b = pool.alloc<int>(1000, s);
        EXPECT(a.size() == 1000 && a.bytes() == 4000);
        std::vector<int> host(1000), back(1000);
        for (int i = 0; i < 1000; i++)
            host[i] = i * 3;
        a.copy_from_host(host.data(), s);
        b.copy_from(a, s);
        b.copy_to_host(back.data(), s);
        s.synchronize();
        EXPECT(back == host);
        EXPECT(pool.stats().allocated_bytes == 8000);
        auto c = pool.alloc<int>(3, s);
        EXPECT_THROWS(c.copy_from(a, s), CPOOL_ERR_INVALID_ARGUMENT);
        cpool::Buffer<int> moved = std::move(c);
        EXPECT(c.data() == nullptr && moved.size() == 3);
    }
    s.synchronize();
    cpool_pool_stats st = pool.stats();
    EXPECT(st.allocated_bytes == 0);
    EXPECT(st.free_count == 3);
    // A buffer holds its pool: the pool's own handle may go first.
    cpool::Buffer<float> kept;
    {
        cpool::Pool p2(dev);
        kept = p2.alloc<float>(16, s);
    }
    kept.fill_bytes(0, s);
    s.synchronize();
}

static void errors_carry_status_and_message(const cpool::Device &dev)
{
    cpool::Stream s(dev);
    cpool::Pool pool(dev);
    pool.seal();
    EXPECT(pool.sealed());
    std::string msg = EXPECT_THROWS(pool.alloc<float>(4, s), CPOOL_ERR_SEALED);
    EXPECT(msg.find("cpool_alloc") != std::string::npos);
    pool.unseal();
    EXPECT_THROWS(pool.alloc<float>(0, s), CPOOL_ERR_INVALID_ARGUMENT);
    EXPECT_THROWS(pool.write_snapshot("/nonexistent-dir/x/y.json"), CPOOL_ERR_IO);
    EXPECT_THROWS(cpool::Device(CPOOL_BACKEND_HOST, -1), CPOOL_ERR_INVALID_ARGUMENT);
    try {
        pool.free_bytes(&msg, s);
        EXPECT(!"free of a foreign pointer did not throw");
    } catch (const std::runtime_error &e) { // cpool::Error is a std::runtime_error
        EXPECT(std::strlen(e.what()) > 0);
    }
}

static void captures(const cpool::Device &dev)
{
    cpool::Stream s(dev);
    cpool::Pool pool(dev);
    auto x = pool.alloc<unsigned char>(256, s);
    x.fill_bytes(1, s);

    // Scoped capture, ended: a graph that replays the work.
    cpool::Graph g;
    {
        cpool::Capture cap(s, pool);
        EXPECT(s.capture_state() == CPOOL_CAPTURE_ACTIVE);
        EXPECT_THROWS(cpool::Capture(s, pool), CPOOL_ERR_ALREADY_CAPTURING);
        auto tmp = pool.alloc<unsigned char>(256, s);
        tmp.fill_bytes(7, s);
        x.copy_from(tmp, s);
        tmp.reset(); // freed in the capture: scratch
        g = cap.end();
        EXPECT(!cap.active());
        EXPECT_THROWS(cap.end(), CPOOL_ERR_NOT_CAPTURING);
    }
    EXPECT(s.capture_state() == CPOOL_CAPTURE_NONE);
    std::vector<unsigned char> back(256);
    x.copy_to_host(back.data(), s);
    s.synchronize();
    EXPECT(back[0] == 1); // capture ran nothing
    g.upload(s);
    g.launch(s);
    x.copy_to_host(back.data(), s);
    s.synchronize();
    EXPECT(back[0] == 7 && back[255] == 7);
    cpool::Graph g2 = g; // cpool_graph_retain
    g2.launch(s);
    EXPECT(g.replays() == 2 && g.id() == g2.id());
    EXPECT(g.stats().pool_count == 1);

    // Destroyed without end(): discarded, the stream usable again.
    try {
        cpool::Capture cap(s, pool);
        pool.seal();
        auto never = pool.alloc<float>(4, s); // throws CPOOL_ERR_SEALED
        EXPECT(!"alloc on a sealed pool did not throw");
    } catch (const cpool::Error &e) {
        EXPECT(e.status() == CPOOL_ERR_SEALED);
    }
    pool.unseal();
    EXPECT(s.capture_state() == CPOOL_CAPTURE_NONE);
    s.synchronize();

    // A broken capture: end reports it.
    {
        cpool::Capture cap(s, pool);
        EXPECT_THROWS(s.synchronize(), CPOOL_ERR_CAPTURE_INVALIDATED);
        EXPECT_THROWS(cap.end(), CPOOL_ERR_CAPTURE_INVALIDATED);
    }

    // Suspended pools refuse launches; graphs are stale after a clear.
    if (pool.grows_in_place()) {
        pool.suspend();
        EXPECT(pool.suspended());
        EXPECT_THROWS(g.launch(s), CPOOL_ERR_SUSPENDED);
        EXPECT_THROWS(pool.alloc<int>(1, s), CPOOL_ERR_SUSPENDED);
        pool.resume();
        g.launch(s);
    }
    pool.record(new Tracked{5});
    cpool::Graph g3 = cpool::capture(s, pool, [&](const cpool::Stream &st) { x.fill_bytes(3, st); });
    pool.clear_buffers();
    EXPECT_THROWS(g3.launch(s), CPOOL_ERR_STALE_GRAPH);

    // Exceptions from a body: discarded capture, the exception rethrown.
    try {
        cpool::capture(s, pool, [](const cpool::Stream &) { throw std::logic_error("from the body"); });
        EXPECT(!"capture did not rethrow");
    } catch (const std::logic_error &e) {
        EXPECT(std::string(e.what()) == "from the body");
    }
    EXPECT(s.capture_state() == CPOOL_CAPTURE_NONE);
    EXPECT_THROWS(cpool::capture(s, pool, [&](const cpool::Stream &st) { (void)pool.alloc<char>(0, st); }),
                  CPOOL_ERR_INVALID_ARGUMENT);

    // Graphed call: two eager runs, one capture.
    int runs = 0;
    cpool::Graph gc = cpool::graphed_call(s, pool, 2, [&](const cpool::Stream &st) {
        runs++;
        x.fill_bytes(9, st);
    });
    EXPECT(runs == 3);
    gc.launch(s);
    s.synchronize();
}

static void events(const cpool::Device &dev)
{
    cpool::Stream s(dev);
    cpool::Event a(dev), b(dev);
    a.record(s);
    b.record(s);
    b.synchronize();
    EXPECT(b.query());
    EXPECT(b.elapsed_ms_since(a) >= 0.0f);
}

// ---- graph caches ----------------------------------------------------------------

static_assert(!std::is_copy_constructible<cpool::GraphCache>::value, "a cache is not shared by copy");
static_assert(!std::is_copy_assignable<cpool::GraphCache>::value, "a cache is not shared by copy");
static_assert(std::is_nothrow_move_constructible<cpool::GraphCache>::value, "a cache moves");

static const size_t KiB = 1024, MiB = 1024 * 1024;

static unsigned char pattern_of(uint64_t key) { return (unsigned char)(0x11 + key * 7); }

// Graphs by key, as a server has them: each allocates its output, then
// scratch that it fills and frees, and writes its key's byte into the
// output; on_evict counts and frees the output (the Buffer's destructor).
struct Keyed {
    const cpool::Pool &pool;
    std::map<uint64_t, size_t> out_bytes, scratch_bytes; // 64 KiB and 256 KiB where absent
    std::map<uint64_t, cpool::Buffer<unsigned char>> outputs;
    std::map<uint64_t, int> evicted;
    bool throw_on_evict = false;

    explicit Keyed(const cpool::Pool &p) : pool(p) {}
    size_t out_of(uint64_t key) const { return out_bytes.count(key) ? out_bytes.at(key) : 64 * KiB; }
    size_t scratch_of(uint64_t key) const { return scratch_bytes.count(key) ? scratch_bytes.at(key) : 256 * KiB; }

    cpool::GraphCacheOptions options(uint64_t max_bytes, uint32_t max_graphs)
    {
        cpool::GraphCacheOptions o;
        o.max_bytes = max_bytes;
        o.max_graphs = max_graphs;
        o.on_evict = [this](uint64_t key, cpool::Graph &graph) {
            EXPECT(graph);
            EXPECT(graph.stats().live_outputs == (outputs.count(key) ? 1u : 0u));
            evicted[key]++;
            outputs.erase(key); // frees the output, stream ordered
            if (throw_on_evict)
                throw std::runtime_error("from on_evict " + std::to_string(key));
        };
        return o;
    }
    auto body(uint64_t key)
    {
        return [this, key](const cpool::Stream &st) {
            auto out = pool.alloc<unsigned char>(out_of(key), st);
            auto scratch = pool.alloc<unsigned char>(scratch_of(key), st);
            scratch.fill_bytes(0xEE, st);
            out.fill_bytes(pattern_of(key), st);
            scratch.reset();
            outputs[key] = std::move(out);
        };
    }
    // After a synchronize: every kept key has its output, and every output
    // holds its key's byte (a byte another graph wrote shows).
    void check_kept(const cpool::GraphCache &cache, const cpool::Stream &s, const std::vector<uint64_t> &keys)
    {
        for (uint64_t key : keys) {
            bool kept = static_cast<bool>(cache.get(key));
            EXPECT(kept == (outputs.count(key) == 1));
            if (!kept || !outputs.count(key))
                continue;
            const cpool::Buffer<unsigned char> &out = outputs.at(key);
            std::vector<unsigned char> back(out.size());
            out.copy_to_host(back.data(), s);
            s.synchronize();
            if (back != std::vector<unsigned char>(out.size(), pattern_of(key))) {
                std::fprintf(stderr, "key %llu: its output lost its bytes\n", (unsigned long long)key);
                failures++;
            }
        }
    }
    size_t output_bytes() const
    {
        size_t n = 0;
        for (const auto &o : outputs)
            n += o.second.bytes();
        return n;
    }
};

static void cache_counts_and_evicts(const cpool::Device &dev)
{
    cpool::Stream s(dev);
    cpool::Pool pool(dev);
    Keyed k(pool);
    const std::vector<uint64_t> keys = {1, 2, 3, 4, 5};
    {
        cpool::GraphCache cache(pool, k.options(0, 3));
        EXPECT(!cache.launch(1, s, k.body(1)));
        EXPECT(!cache.launch(2, s, k.body(2)));
        EXPECT(!cache.launch(3, s, k.body(3), CPOOL_CAPTURE_THREAD_LOCAL));
        EXPECT(cache.launch(1, s, k.body(1)));
        EXPECT(!cache.launch(4, s, k.body(4))); // evicts 2, the least recently launched
        EXPECT(k.evicted == (std::map<uint64_t, int>{{2, 1}}));
        cpool_graph_cache_stats st = cache.stats();
        EXPECT(st.graphs == 3 && st.hits == 1 && st.misses == 4 && st.evictions == 1);
        s.synchronize();
        k.check_kept(cache, s, keys);
        EXPECT(pool.stats().allocated_bytes == k.output_bytes()); // 2's output was freed
        // get is no launch: 3 stays the least recent, and nothing is counted.
        for (int i = 0; i < 3; i++)
            EXPECT(cache.get(3).replays() == 1);
        EXPECT(!cache.get(42));
        EXPECT(!cache.launch(5, s, k.body(5)));
        EXPECT(!cache.get(3) && k.evicted[3] == 1);
        st = cache.stats();
        EXPECT(st.graphs == 3 && st.hits == 1 && st.misses == 5 && st.evictions == 2);
        EXPECT(st.graph_bytes == pool.stats().graph_reserved_bytes);
        // evict: on_evict, then the graph leaves; an absent key is no error.
        cache.evict(4);
        cache.evict(4);
        cache.evict(40);
        EXPECT(k.evicted[4] == 1 && cache.stats().graphs == 2 && cache.stats().evictions == 3);
        s.synchronize();
        k.check_kept(cache, s, keys);
        EXPECT(pool.stats().allocated_bytes == k.output_bytes());
    } // the cache's end: on_evict for each graph kept (1 and 5)
    for (uint64_t key : keys)
        EXPECT(k.evicted[key] == 1);
    EXPECT(k.outputs.empty());
    s.synchronize();
    EXPECT(pool.stats().allocated_bytes == 0);

    // Without on_evict; a stream that captures is refused.
    cpool::GraphCache plain(pool, cpool::GraphCacheOptions{0, 1, nullptr});
    auto scratch_only = [&](const cpool::Stream &st) { pool.alloc<int>(1024, st).fill_bytes(1, st); };
    EXPECT(!plain.launch(7, s, scratch_only));
    EXPECT(plain.launch(7, s, scratch_only));
    EXPECT(!plain.launch(8, s, scratch_only));
    EXPECT(plain.stats().evictions == 1 && !plain.get(7));
    {
        cpool::Capture cap(s, pool);
        EXPECT_THROWS(plain.launch(8, s, scratch_only), CPOOL_ERR_INVALID_ARGUMENT);
    }
    s.synchronize();
}

// After each launch (and a synchronize, so that the launches before the
// next eviction are over) both bounds hold and the kept outputs are right.
// The first pass is held by max_graphs as much as by bytes, the second by
// bytes alone.
static void cache_bounds_hold(const cpool::Device &dev)
{
    const uint64_t budgets[] = {12 * MiB, 7 * MiB};
    const uint32_t max_graphs[] = {4, 0};
    for (int pass = 0; pass < 2; pass++) {
        cpool::Stream s(dev);
        cpool::Pool pool(dev);
        Keyed k(pool);
        std::vector<uint64_t> keys;
        for (uint64_t key = 0; key < 12; key++) {
            keys.push_back(key);
            k.out_bytes[key] = (key % 3 + 1) * 128 * KiB;
            k.scratch_bytes[key] = (key % 4 + 1) * MiB - key * 4096;
        }
        cpool::GraphCache cache(pool, k.options(budgets[pass], max_graphs[pass]));
        uint64_t rng = 12345 + pass, hits = 0, most = 0, fewest = ~0ull, alone = 0;
        const int launches = 80;
        for (int i = 0; i < launches; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t key = (rng >> 33) % keys.size();
            hits += cache.launch(key, s, k.body(key));
            s.synchronize();
            cpool_graph_cache_stats st = cache.stats();
            if (max_graphs[pass])
                EXPECT(st.graphs <= max_graphs[pass]);
            // A graph that alone needs more than the budget is kept alone
            // (an output that straddles a page of the packed outputs does).
            EXPECT(st.graph_bytes <= budgets[pass] || st.graphs == 1);
            alone += st.graph_bytes > budgets[pass];
            EXPECT(st.graph_bytes == pool.stats().graph_reserved_bytes);
            EXPECT(st.graphs == k.outputs.size());
            most = st.graph_bytes > most ? st.graph_bytes : most;
            fewest = i > 10 && st.graphs < fewest ? st.graphs : fewest;
            k.check_kept(cache, s, keys);
            EXPECT(pool.stats().allocated_bytes == k.output_bytes());
        }
        cpool_graph_cache_stats st = cache.stats();
        EXPECT(st.hits == hits && st.hits + st.misses == (uint64_t)launches);
        int evicted = 0;
        for (const auto &e : k.evicted)
            evicted += e.second;
        EXPECT(st.evictions == (uint64_t)evicted);
        EXPECT(st.evictions > 0 && st.hits > 0);
        if (!max_graphs[pass])
            EXPECT(fewest < 3); // the bytes alone evicted
        std::printf("  graph cache, %llu MiB and %u graphs: %llu hits, %llu misses, %llu evictions, at most %llu MiB, "
                    "%llu launches with one graph over the budget\n",
                    (unsigned long long)(budgets[pass] / MiB), max_graphs[pass], (unsigned long long)st.hits,
                    (unsigned long long)st.misses, (unsigned long long)st.evictions, (unsigned long long)(most / MiB),
                    (unsigned long long)alone);
    }
}

static void cache_exceptions(const cpool::Device &dev)
{
    cpool::Stream s(dev);
    cpool::Pool pool(dev);
    Keyed k(pool);
    cpool::GraphCache cache(pool, k.options(0, 1));
    cache.launch(1, s, k.body(1));

    // A throwing body: the capture is discarded, nothing kept, evicted or
    // counted, the exception rethrown as it was.
    cpool_graph_cache_stats before = cache.stats();
    try {
        cache.launch(2, s, [&](const cpool::Stream &st) {
            pool.alloc<unsigned char>(4096, st).fill_bytes(1, st);
            throw std::logic_error("from the body");
        });
        EXPECT(!"launch did not rethrow");
    } catch (const std::logic_error &e) {
        EXPECT(std::string(e.what()) == "from the body");
    }
    EXPECT_THROWS(cache.launch(2, s,
                               [&](const cpool::Stream &st) {
                                   pool.seal();
                                   (void)pool.alloc<char>(4, st);
                               }),
                  CPOOL_ERR_SEALED);
    pool.unseal();
    cpool_graph_cache_stats after = cache.stats();
    EXPECT(after.graphs == before.graphs && after.misses == before.misses && after.hits == before.hits);
    EXPECT(after.evictions == 0 && k.evicted.empty());
    EXPECT(!cache.get(2) && cache.get(1));
    EXPECT(s.capture_state() == CPOOL_CAPTURE_NONE);

    // A throwing on_evict: the launch completes (2 kept and launched, 1
    // gone), then the exception comes.
    k.throw_on_evict = true;
    try {
        cache.launch(2, s, k.body(2));
        EXPECT(!"launch did not rethrow on_evict's exception");
    } catch (const std::runtime_error &e) {
        EXPECT(std::string(e.what()) == "from on_evict 1");
    }
    after = cache.stats();
    EXPECT(after.graphs == 1 && after.misses == 2 && after.evictions == 1);
    EXPECT(!cache.get(1) && cache.get(2).replays() == 1);
    s.synchronize();
    k.check_kept(cache, s, {1, 2});
    EXPECT(cache.launch(2, s, k.body(2))); // a hit evicts nothing: no exception
    try {
        cache.evict(2);
        EXPECT(!"evict did not rethrow on_evict's exception");
    } catch (const std::runtime_error &e) {
        EXPECT(std::string(e.what()) == "from on_evict 2");
    }
    EXPECT(cache.stats().graphs == 0 && !cache.get(2));

    // Several exceptions in one call (the end): every graph leaves, the
    // first exception is rethrown.
    cpool::GraphCache many(pool, k.options(0, 0));
    k.throw_on_evict = false;
    for (uint64_t key = 3; key < 6; key++)
        many.launch(key, s, k.body(key));
    k.throw_on_evict = true;
    try {
        many.reset();
        EXPECT(!"reset did not rethrow on_evict's exception");
    } catch (const std::runtime_error &e) {
        EXPECT(std::string(e.what()).find("from on_evict ") == 0);
    }
    EXPECT(!many && k.evicted[3] == 1 && k.evicted[4] == 1 && k.evicted[5] == 1 && k.outputs.empty());
    EXPECT_THROWS(many.stats(), CPOOL_ERR_INVALID_ARGUMENT);
    many.reset(); // ended already: nothing

    // Nested: on_evict of one cache evicts from another, whose on_evict
    // throws; the exception crosses both C calls, each after it returned.
    k.throw_on_evict = false;
    Keyed inner_keys(pool);
    inner_keys.throw_on_evict = true;
    cpool::GraphCache inner(pool, inner_keys.options(0, 0));
    inner.launch(10, s, inner_keys.body(10));
    cpool::GraphCacheOptions o = k.options(0, 1);
    o.on_evict = [&](uint64_t key, cpool::Graph &) {
        k.evicted[key]++;
        k.outputs.erase(key);
        inner.evict(10);
    };
    cpool::GraphCache outer(pool, o);
    outer.launch(11, s, k.body(11));
    try {
        outer.launch(12, s, k.body(12));
        EXPECT(!"launch did not rethrow the nested exception");
    } catch (const std::runtime_error &e) {
        EXPECT(std::string(e.what()) == "from on_evict 10");
    }
    EXPECT(inner_keys.evicted[10] == 1 && k.evicted[11] == 1 && outer.get(12) && !outer.get(11));
    s.synchronize();
}

static void cache_moves(const cpool::Device &dev)
{
    cpool::Stream s(dev);
    cpool::Pool pool(dev);
    Keyed k(pool);
    {
        cpool::GraphCache cache(pool, k.options(0, 2));
        cache.launch(1, s, k.body(1));
        cpool::GraphCache moved = std::move(cache);
        EXPECT(!cache && moved);
        EXPECT_THROWS(cache.stats(), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT_THROWS(cache.launch(2, s, k.body(2)), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT_THROWS(cache.get(1), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(moved.launch(1, s, k.body(1)));
        moved.launch(2, s, k.body(2));
        moved.launch(3, s, k.body(3)); // on_evict through the moved cache
        EXPECT(k.evicted[1] == 1);
        cpool::GraphCache other(pool, k.options(0, 0));
        other.launch(4, s, k.body(4));
        other = std::move(moved); // other's own cache ends: 4 leaves
        EXPECT(k.evicted[4] == 1 && !moved && other.stats().graphs == 2);
    }
    EXPECT(k.evicted[2] == 1 && k.evicted[3] == 1 && k.outputs.empty());
    s.synchronize();
    EXPECT(pool.stats().allocated_bytes == 0);
}

static void cache_prediction(const cpool::Device &dev)
{
    cpool::Stream s(dev);
    const size_t scratch[] = {3 * MiB + 4096, 5 * MiB, 1 * MiB, 9 * MiB - 512};
    const size_t outs[] = {256 * KiB, 1 * MiB, 64 * KiB, 3 * MiB};
    for (size_t i = 0; i < 4; i++) {
        cpool::Pool pool(dev); // empty
        Keyed k(pool);
        k.scratch_bytes[i] = scratch[i];
        k.out_bytes[i] = outs[i];
        cpool::GraphCache cache(pool, k.options(0, 0));
        uint64_t predicted = cache.predict_bytes(scratch[i], outs[i]);
        EXPECT(predicted >= outs[i]);
        EXPECT(!cache.launch(i, s, k.body(i)));
        s.synchronize();
        uint64_t got = cache.stats().graph_bytes;
        uint64_t off = got > predicted ? got - predicted : predicted - got;
        if (off > 2 * MiB) {
            std::fprintf(stderr, "scratch %zu, output %zu: predicted %llu, measured %llu\n", scratch[i], outs[i],
                         (unsigned long long)predicted, (unsigned long long)got);
            failures++;
        }
        EXPECT(cache.predict_bytes(0, 0) >= got - 2 * MiB); // changes nothing
        EXPECT(cache.stats().graph_bytes == got);
    }
}

int main()
{
    try {
        cpool::Device dev(CPOOL_BACKEND_AUTO);
        std::printf("capturepool %s, %s backend\n", cpool::version_string(),
                    dev.backend() == CPOOL_BACKEND_CUDA ? "CUDA" : "host");
        raii_and_copies(dev);
        buffers_free_themselves(dev);
        errors_carry_status_and_message(dev);
        captures(dev);
        events(dev);
        cache_counts_and_evicts(dev);
        cache_bounds_hold(dev);
        cache_exceptions(dev);
        cache_moves(dev);
        cache_prediction(dev);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "unexpected exception: %s\n", e.what());
        return 1;
    }
    cpool::wait_deferred();
    if (failures) {
        std::fprintf(stderr, "%d failure(s)\n", failures);
        return 1;
    }
    std::printf("OK\n");
    return 0;
}
