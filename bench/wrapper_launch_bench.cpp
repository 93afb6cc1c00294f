// The cost of launching through the C++ wrapper (cpool::Graph::launch) next
// to the C call (cpool_graph_launch) on the same graph, in alternating
// batches in one run; prints each median per launch and their ratio. The
// graph is one small fill, so the figure is the call's own cost.
// Usage: wrapper_launch_bench [--smoke]
#include <capturepool.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

int main(int argc, char **argv)
{
    bool smoke = argc > 1 && std::strcmp(argv[1], "--smoke") == 0;
    const int batch = smoke ? 10 : 2000, repeats = smoke ? 3 : 15;
    cpool::Device dev(CPOOL_BACKEND_AUTO);
    cpool::Stream s(dev);
    cpool::Pool pool(dev);
    auto buf = pool.alloc<unsigned char>(256, s);
    cpool::Graph g = cpool::capture(s, pool, [&](const cpool::Stream &st) { buf.fill_bytes(1, st); });
    g.launch(s);
    s.synchronize();

    using clock = std::chrono::steady_clock;
    std::vector<double> ours, raw;
    for (int r = 0; r < repeats; r++) {
        for (int which = 0; which < 2; which++) {
            bool wrapper = (which == 0) == (r % 2 == 0); // the order flips every repeat
            auto t0 = clock::now();
            for (int i = 0; i < batch; i++) {
                if (wrapper)
                    g.launch(s);
                else
                    cpool::check(cpool_graph_launch(g.get(), s.get()));
            }
            s.synchronize();
            double us = std::chrono::duration<double, std::micro>(clock::now() - t0).count() / batch;
            (wrapper ? ours : raw).push_back(us);
        }
    }
    auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    double o = median(ours), c = median(raw);
    std::printf("C++ launch: wrapper %.3f us, C %.3f us per launch (incl. the work), ratio %.3f (%s backend%s)\n", o,
                c, o / c, dev.backend() == CPOOL_BACKEND_CUDA ? "CUDA" : "host", smoke ? ", smoke run" : "");
    return 0;
}
