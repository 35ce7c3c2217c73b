// Claim d, as found in CUDA-graph tutorials and posts:
// "the same executable (cudaGraphExec_t) cannot be launched concurrently:
// synchronize explicitly or keep one per thread."
//
// Method: a graph of one kernel that records, in a slot of its own (atomic counter), the GPU
// global-timer time it starts and ends, spinning 50 ms in between. Launch it twice back to back
// on two different streams with no dependency between them, and measure whether the two runs
// overlap on the GPU:
//   1. one executable, two streams, one thread;
//   2. one executable, two streams, two threads (their launch calls serialized by a mutex);
//   3. two executables of the same graph, two streams (control: may overlap);
//   4. the kernel launched directly on two streams (control: may overlap).
// Also: every launch's return code (is the second launch refused?).
#include <mutex>
#include <thread>

#include "common.cuh"

static const double SPIN_MS = 50.0;
static const int SLOTS = 16;

__global__ void spin_record(unsigned long long ns, unsigned* counter, unsigned long long* starts,
                            unsigned long long* ends) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  unsigned slot = atomicAdd(counter, 1u) % SLOTS;
  unsigned long long t0 = global_ns();
  starts[slot] = t0;
  while (global_ns() - t0 < ns) {
  }
  ends[slot] = global_ns();
}

struct Rec {
  unsigned* counter;
  unsigned long long* starts;
  unsigned long long* ends;
  void reset() {
    CK(cudaMemset(counter, 0, sizeof(unsigned)));
    CK(cudaMemset(starts, 0, SLOTS * sizeof(unsigned long long)));
    CK(cudaMemset(ends, 0, SLOTS * sizeof(unsigned long long)));
  }
  // Overlap of the first two runs in ms (negative: the gap between them), and the span.
  std::pair<double, double> read(int* runs) {
    unsigned n = 0;
    unsigned long long s[SLOTS], e[SLOTS];
    CK(cudaMemcpy(&n, counter, sizeof n, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(s, starts, sizeof s, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(e, ends, sizeof e, cudaMemcpyDeviceToHost));
    *runs = (int)n;
    if (n < 2) return {NAN, NAN};
    long long overlap_ns = (long long)std::min(e[0], e[1]) - (long long)std::max(s[0], s[1]);
    long long span_ns = (long long)std::max(e[0], e[1]) - (long long)std::min(s[0], s[1]);
    double overlap = overlap_ns / 1e6, span = span_ns / 1e6;
    return {overlap, span};
  }
};

int main() {
  header("d", "one executable cannot be launched concurrently", "bench/claims/claim_d_concurrent_exec.cu");
  Rec rec;
  CK(cudaMalloc(&rec.counter, sizeof(unsigned)));
  CK(cudaMalloc(&rec.starts, SLOTS * sizeof(unsigned long long)));
  CK(cudaMalloc(&rec.ends, SLOTS * sizeof(unsigned long long)));
  cudaStream_t s1, s2;
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));

  unsigned long long ns = (unsigned long long)(SPIN_MS * 1e6);
  void* args[] = {&ns, &rec.counter, &rec.starts, &rec.ends};
  cudaKernelNodeParams p = {};
  p.func = (void*)spin_record;
  p.gridDim = dim3(1);
  p.blockDim = dim3(32);
  p.kernelParams = args;
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t node;
  CK(cudaGraphAddKernelNode(&node, g, nullptr, 0, &p));
  cudaGraphExec_t e1, e2;
  CK(cudaGraphInstantiate(&e1, g, 0));
  CK(cudaGraphInstantiate(&e2, g, 0));
  // Warm-up.
  CK(cudaGraphLaunch(e1, s1));
  CK(cudaGraphLaunch(e2, s2));
  CK(cudaDeviceSynchronize());

  struct Out {
    const char* what;
    cudaError_t rc1, rc2;
    double overlap, span, host_ms;
    int runs;
  };
  std::vector<Out> outs;
  auto measure = [&](const char* what, auto launch_both) {
    rec.reset();
    CK(cudaDeviceSynchronize());
    cudaError_t rc1 = cudaSuccess, rc2 = cudaSuccess;
    double t0 = now_us();
    launch_both(&rc1, &rc2);
    CK(cudaDeviceSynchronize());
    double host_ms = (now_us() - t0) / 1e3;
    int runs = 0;
    auto ov = rec.read(&runs);
    std::printf("  %-52s launches: %s, %s; runs: %d; GPU overlap %.2f ms, span %.1f ms (one run: %.0f ms); host %.1f ms\n",
                what, cudaGetErrorName(rc1), cudaGetErrorName(rc2), runs, ov.first, ov.second, SPIN_MS, host_ms);
    outs.push_back({what, rc1, rc2, ov.first, ov.second, host_ms, runs});
  };

  measure("1. same exec on s1 and s2, one thread:", [&](cudaError_t* a, cudaError_t* b) {
    *a = cudaGraphLaunch(e1, s1);
    *b = cudaGraphLaunch(e1, s2);
  });
  measure("2. same exec on s1 and s2, two threads (mutex):", [&](cudaError_t* a, cudaError_t* b) {
    std::mutex m;
    std::thread t1([&] { std::lock_guard<std::mutex> l(m); *a = cudaGraphLaunch(e1, s1); });
    std::thread t2([&] { std::lock_guard<std::mutex> l(m); *b = cudaGraphLaunch(e1, s2); });
    t1.join();
    t2.join();
  });
  measure("3. two execs of one graph on s1 and s2:", [&](cudaError_t* a, cudaError_t* b) {
    *a = cudaGraphLaunch(e1, s1);
    *b = cudaGraphLaunch(e2, s2);
  });
  measure("4. the kernel launched directly on s1 and s2:", [&](cudaError_t* a, cudaError_t* b) {
    spin_record<<<1, 32, 0, s1>>>(ns, rec.counter, rec.starts, rec.ends);
    *a = cudaGetLastError();
    spin_record<<<1, 32, 0, s2>>>(ns, rec.counter, rec.starts, rec.ends);
    *b = cudaGetLastError();
  });

  bool refused = false, same_overlaps = false, controls_overlap = true;
  for (int i = 0; i < 2; ++i) {
    refused |= outs[i].rc1 != cudaSuccess || outs[i].rc2 != cudaSuccess || outs[i].runs != 2;
    same_overlaps |= outs[i].overlap > 0.5 * SPIN_MS;
  }
  for (int i = 2; i < 4; ++i) controls_overlap &= outs[i].overlap > 0.5 * SPIN_MS;
  if (refused)
    verdict("d", "true", "a second launch of one executable was refused or did not run: %s / %s, runs %d",
            cudaGetErrorName(outs[0].rc2), cudaGetErrorName(outs[1].rc2), outs[0].runs);
  else if (same_overlaps)
    verdict("d", "false", "two launches of one executable on two streams overlapped on the GPU by %.1f ms of %.0f ms",
            std::max(outs[0].overlap, outs[1].overlap), SPIN_MS);
  else
    verdict("d", "partly",
            "both launches of one executable on two independent streams were accepted (cudaSuccess) and both ran, but "
            "one after the other: overlap %.2f ms (one thread) and %.2f ms (two threads), span %.1f and %.1f ms for two "
            "%.0f ms runs; two executables of the same graph %s (overlap %.1f ms, span %.1f ms), like plain kernels "
            "(overlap %.1f ms). The driver serializes launches of one executable; it does not reject them. Calling "
            "cudaGraphLaunch on one executable from two threads at the same time is not thread-safe per the CUDA "
            "docs (not exercised: the calls here were serialized)",
            outs[0].overlap, outs[1].overlap, outs[0].span, outs[1].span, SPIN_MS,
            controls_overlap ? "ran concurrently" : "did NOT overlap either", outs[2].overlap, outs[2].span,
            outs[3].overlap);

  CK(cudaGraphExecDestroy(e1));
  CK(cudaGraphExecDestroy(e2));
  CK(cudaGraphDestroy(g));
  CK(cudaStreamDestroy(s1));
  CK(cudaStreamDestroy(s2));
  return 0;
}
