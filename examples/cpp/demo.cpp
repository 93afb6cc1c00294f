// examples/demo.c in C++ (include/capturepool.hpp), smaller: a step of
// dependent stream work whose intermediates are allocated from a capture
// pool inside the step, run eagerly K times, captured once, replayed K times
// from the same start, and checked to give bitwise the same state.
//
// The step on a state x of n floats is host functions (cpool_launch_host)
// that stand in for kernels: they read and write pool memory through raw
// pointers, so the demo opens the host backend, where pool memory is host
// memory. On CUDA pool memory is device memory, which a host function cannot
// touch: a program launches kernels on s.native() instead, as examples/demo.c
// does on the GPU (this file is built without a CUDA compiler). The step:
//   t1 = 1.5 * x + 0.25;  t2 = relu(t1 - 1) (t1 freed);  x = 0.5 * x + 0.5 * tanh(t2) (t2 freed)
// Usage: cpp_demo [steps]. Exit status 0 when the replays match.
#include <capturepool.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

struct Op {
    float *out;
    const float *a, *b;
    size_t n;
    int kind;
};

void run_op(void *arg)
{
    const Op *op = static_cast<const Op *>(arg);
    for (size_t i = 0; i < op->n; i++) {
        float a = op->a[i], b = op->b[i];
        op->out[i] = op->kind == 0 ? a * 1.5f + 0.25f : op->kind == 1 ? std::fmax(a - 1.0f, 0.0f)
                                                                      : 0.5f * a + 0.5f * std::tanh(b);
    }
}

// Enqueues one op; its arguments are owned by the pool (a captured host
// function reads them at every replay), eager ones too, for simplicity.
void enqueue(const cpool::Stream &s, const cpool::Pool &pool, Op op)
{
    Op *arg = new Op(op);
    pool.record(arg);
    s.launch_host(run_op, arg);
}

void step(const cpool::Stream &s, const cpool::Pool &pool, const cpool::Buffer<float> &x)
{
    size_t n = x.size();
    auto t1 = pool.alloc<float>(n, s);
    enqueue(s, pool, {t1.data(), x.data(), x.data(), n, 0});
    auto t2 = pool.alloc<float>(n, s);
    enqueue(s, pool, {t2.data(), t1.data(), t1.data(), n, 1});
    t1.reset();
    enqueue(s, pool, {x.data(), x.data(), t2.data(), n, 2});
}

double seconds_since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

} // namespace

int main(int argc, char **argv)
{
    int steps = argc > 1 ? std::atoi(argv[1]) : 50;
    const size_t n = 4096;
    try {
        // The host backend whatever the machine: the step's host functions
        // dereference pool memory, which on CUDA is device memory.
        cpool::Device dev(CPOOL_BACKEND_HOST);
        cpool::Stream s(dev);
        cpool::Pool pool(dev);
        std::printf("capturepool %s (host backend), n = %zu floats, %d steps\n", cpool::version_string(), n, steps);
        std::printf("host backend on purpose: host functions stand in for kernels here; on CUDA a program launches "
                    "kernels on s.native() (examples/demo.c runs its step on the GPU)\n");
        std::vector<float> x0(n), eager(n), replayed(n);
        for (size_t i = 0; i < n; i++)
            x0[i] = static_cast<float>((i * 7919) % 1000) / 250.0f - 2.0f;
        auto x = pool.alloc<float>(n, s);

        x.copy_from_host(x0.data(), s);
        auto t0 = std::chrono::steady_clock::now();
        for (int k = 0; k < steps; k++)
            step(s, pool, x);
        x.copy_to_host(eager.data(), s);
        s.synchronize();
        double eager_s = seconds_since(t0);

        x.copy_from_host(x0.data(), s);
        cpool::Graph g = cpool::capture(s, pool, [&](const cpool::Stream &st) { step(st, pool, x); });
        t0 = std::chrono::steady_clock::now();
        for (int k = 0; k < steps; k++)
            g.launch(s);
        x.copy_to_host(replayed.data(), s);
        s.synchronize();
        double graph_s = seconds_since(t0);

        cpool_pool_stats st = pool.stats();
        std::printf("eager %.1f us/step, graph %.1f us/step; pool: %llu B reserved, %llu B for graphs\n",
                    eager_s * 1e6 / steps, graph_s * 1e6 / steps, (unsigned long long)st.reserved_bytes,
                    (unsigned long long)st.graph_reserved_bytes);
        bool same = std::memcmp(eager.data(), replayed.data(), n * sizeof(float)) == 0;
        std::printf("%llu replays: %s\n", (unsigned long long)g.replays(),
                    same ? "bitwise equal to eager: OK" : "DIFFER: FAIL");
        return same ? 0 : 1;
    } catch (const cpool::Error &e) {
        std::fprintf(stderr, "cpp_demo: %s (%s)\n", e.what(), cpool_status_string(e.status()));
        return 2;
    }
}
