// include/capturepool.hpp: the RAII classes end their handles, copies
// retain, Capture discards unless ended, every failure throws cpool::Error
// with the C status and cpool_last_error()'s text, exceptions from capture
// bodies cross no C frame. Built with -Wall -Wextra -Werror (g++ and clang++).
#include <capturepool.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
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
