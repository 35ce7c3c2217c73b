// Two graphs over one buffer on two streams, for `graphsmith trace --hazards` (races across
// graphs). The producer graph, captured on stream A, spins (so that a consumer that does not
// wait for it really reads the buffer before it is written) and then copies `src` into `x`; the
// consumer graph, captured on stream B, reads `x` into `y = 2 * x`.
//
//   races race    launches the producer on A and the consumer on B with no wait between them:
//                 the tracer must report exactly one race across graphs, on `x`, the producer's
//                 copy node writing and the consumer's kernel reading.
//   races fixed   the twin: cudaEventRecord on A after the producer's launch and
//                 cudaStreamWaitEvent on B before the consumer's: no race; `y` is checked
//                 bit for bit against the host's 2 * src.
//
// Each of the ITERATIONS rounds poisons `x` and `y` (NaN) first and ends with
// cudaStreamSynchronize on both streams. It prints the buffer's address ("races: x 0x... bytes
// N") for check.py, and, for the race, how many elements of `y` were stale (the data is
// reported, not tested: a race may or may not show).
//
// Build: nvcc -O1 -g -std=c++17 -lineinfo -o races races.cu
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK(call)                                                                        \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) {                                                           \
            std::fprintf(stderr, "races: %s failed at %s:%d: %s (%s)\n", #call, __FILE__,  \
                         __LINE__, cudaGetErrorName(e_), cudaGetErrorString(e_));          \
            std::exit(2);                                                                  \
        }                                                                                  \
    } while (0)

constexpr int N = 1 << 20;
constexpr int ITERATIONS = 3;
// About 10 ms at 2 GHz: far longer than the consumer's launch latency.
constexpr long long SPIN_CYCLES = 20'000'000;

__global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

__global__ void consume(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * 2.0f;
}

static cudaGraphExec_t capture_producer(cudaStream_t a, float* x, const float* src) {
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal));
    spin<<<1, 1, 0, a>>>(SPIN_CYCLES);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyAsync(x, src, N * sizeof(float), cudaMemcpyDeviceToDevice, a));
    CHECK(cudaStreamEndCapture(a, &g));
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    CHECK(cudaGraphDestroy(g));
    return e;
}

static cudaGraphExec_t capture_consumer(cudaStream_t b, const float* x, float* y) {
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(b, cudaStreamCaptureModeGlobal));
    consume<<<(N + 255) / 256, 256, 0, b>>>(x, y, N);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamEndCapture(b, &g));
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    CHECK(cudaGraphDestroy(g));
    return e;
}

int main(int argc, char** argv) {
    if (argc != 2 || (std::strcmp(argv[1], "race") != 0 && std::strcmp(argv[1], "fixed") != 0)) {
        std::fprintf(stderr, "usage: races race|fixed\n");
        return 64;
    }
    const bool fixed = std::strcmp(argv[1], "fixed") == 0;
    std::vector<float> host(N), out(N);
    for (int i = 0; i < N; ++i) host[i] = 1.0f + static_cast<float>(i % 977) * 0.25f;

    float *src, *x, *y;
    CHECK(cudaMalloc(&src, N * sizeof(float)));
    CHECK(cudaMalloc(&x, N * sizeof(float)));
    CHECK(cudaMalloc(&y, N * sizeof(float)));
    CHECK(cudaMemcpy(src, host.data(), N * sizeof(float), cudaMemcpyHostToDevice));
    std::printf("races: x %p bytes %zu\n", static_cast<void*>(x), N * sizeof(float));

    cudaStream_t a, b;
    CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    cudaEvent_t produced;
    CHECK(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming));
    cudaGraphExec_t producer = capture_producer(a, x, src);
    cudaGraphExec_t consumer = capture_consumer(b, x, y);

    long long stale = 0, wrong = 0;
    for (int it = 0; it < ITERATIONS; ++it) {
        // Poison: all-ones bytes are a NaN.
        CHECK(cudaMemset(x, 0xff, N * sizeof(float)));
        CHECK(cudaMemset(y, 0xff, N * sizeof(float)));
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaGraphLaunch(producer, a));
        if (fixed) {
            CHECK(cudaEventRecord(produced, a));
            CHECK(cudaStreamWaitEvent(b, produced, 0));
        }
        CHECK(cudaGraphLaunch(consumer, b));
        CHECK(cudaStreamSynchronize(a));
        CHECK(cudaStreamSynchronize(b));
        CHECK(cudaMemcpy(out.data(), y, N * sizeof(float), cudaMemcpyDeviceToHost));
        for (int i = 0; i < N; ++i) {
            const float want = host[i] * 2.0f;
            if (std::memcmp(&out[i], &want, sizeof(float)) != 0) {
                if (std::isnan(out[i])) {
                    ++stale;
                } else {
                    ++wrong;
                }
            }
        }
    }

    CHECK(cudaGraphExecDestroy(producer));
    CHECK(cudaGraphExecDestroy(consumer));
    CHECK(cudaEventDestroy(produced));
    CHECK(cudaStreamDestroy(a));
    CHECK(cudaStreamDestroy(b));
    CHECK(cudaFree(src));
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
    if (fixed) {
        if (stale != 0 || wrong != 0) {
            std::fprintf(stderr, "races: fixed: %lld stale and %lld wrong elements of y\n",
                         stale, wrong);
            return 1;
        }
        std::printf("races: fixed ok (%d rounds, y == 2 * src bit for bit)\n", ITERATIONS);
    } else {
        std::printf("races: race stale %lld of %lld (wrong %lld)\n", stale,
                    static_cast<long long>(N) * ITERATIONS, wrong);
        if (wrong != 0) return 1;
    }
    return 0;
}
