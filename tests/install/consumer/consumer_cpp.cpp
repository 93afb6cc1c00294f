// A user's C++ program against the installed capturepool.hpp: a pool, a
// typed buffer, a scoped capture and a replay; prints the backend.
#include <capturepool.hpp>

#include <cstdio>
#include <vector>

int main()
{
    try {
        cpool::Device dev(CPOOL_BACKEND_AUTO);
        cpool::Stream s(dev);
        cpool::Pool pool(dev);
        auto buf = pool.alloc<unsigned char>(64, s);
        cpool::Graph g;
        {
            cpool::Capture cap(s, pool);
            buf.fill_bytes(0x5a, s);
            g = cap.end();
        }
        g.launch(s);
        std::vector<unsigned char> host(64);
        buf.copy_to_host(host.data(), s);
        s.synchronize();
        bool ok = host[0] == 0x5a && host[63] == 0x5a;
        std::printf("consumer_cpp: capturepool %s, %s backend, %s\n", cpool::version_string(),
                    dev.backend() == CPOOL_BACKEND_CUDA ? "CUDA" : "host", ok ? "OK" : "FAIL");
        return ok ? 0 : 1;
    } catch (const cpool::Error &e) {
        std::fprintf(stderr, "consumer_cpp: %s\n", e.what());
        return 1;
    }
}
