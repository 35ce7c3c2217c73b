// Claim i, as found in CUDA-graph tutorials and posts:
// "re-capturing a graph leaks: the old graph's nodes, events and kernel
// instances stay resident in the GPU context until cudaGraphDestroy; memory grows."
//
// Method: one cycle = capture a 10-kernel fork/join step (root, 2 branches on 2 streams, join,
// plus a memset), instantiate it, upload and launch it, wait. Device memory from cudaMemGetInfo
// and host memory (resident set, /proc/self/statm) are read before and after:
//   1. 10,000 cycles destroying the executable and the graph each time (the right way);
//   2. 2,000 cycles destroying nothing (a real leak, bounded), then destroying everything;
//   3. 2,000 cycles keeping only the graphs (executables destroyed), then destroying them;
//   4. 2,000 cycles keeping only the executables (graphs destroyed), then destroying them.
// Memory is read after a device synchronize; the leaking loops stop early if free device
// memory would drop under 2 GiB.
#include <unistd.h>

#include "common.cuh"

static const unsigned LEN = 256;

static double rss_mib() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return NAN;
  int got = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  return got == 2 ? resident * (double)sysconf(_SC_PAGESIZE) / (1 << 20) : NAN;
}

static double free_mib() {
  size_t fr = 0, total = 0;
  CK(cudaDeviceSynchronize());
  CK(cudaMemGetInfo(&fr, &total));
  return fr / (double)(1 << 20);
}

struct Step {
  cudaStream_t main, side[2];
  cudaEvent_t fork, join[2];
  float* buf[3];
  cudaGraph_t capture() {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(main, cudaStreamCaptureModeThreadLocal));
    CK(cudaMemsetAsync(buf[0], 0, LEN * sizeof(float), main));
    add_scalar<<<1, 256, 0, main>>>(buf[0], 1.0f, LEN);
    CK(cudaEventRecord(fork, main));
    for (int k = 0; k < 2; ++k) {
      CK(cudaStreamWaitEvent(side[k], fork, 0));
      for (int i = 0; i < 4; ++i) add_scalar<<<1, 256, 0, side[k]>>>(buf[k + 1], 1.0f, LEN);
      CK(cudaEventRecord(join[k], side[k]));
      CK(cudaStreamWaitEvent(main, join[k], 0));
    }
    add_scalar<<<1, 256, 0, main>>>(buf[0], 1.0f, LEN);
    CK(cudaGetLastError());
    CK(cudaStreamEndCapture(main, &g));
    return g;
  }
  cudaGraphExec_t instantiate_and_run(cudaGraph_t g) {
    cudaGraphExec_t e;
    CK(cudaGraphInstantiate(&e, g, 0));
    CK(cudaGraphUpload(e, main));
    CK(cudaGraphLaunch(e, main));
    CK(cudaStreamSynchronize(main));
    return e;
  }
};

int main() {
  header("i", "re-capture leaks device memory", "bench/claims/claim_i_recapture_leak.cu");
  Step st;
  CK(cudaStreamCreateWithFlags(&st.main, cudaStreamNonBlocking));
  for (int k = 0; k < 2; ++k) {
    CK(cudaStreamCreateWithFlags(&st.side[k], cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&st.join[k], cudaEventDisableTiming));
  }
  CK(cudaEventCreateWithFlags(&st.fork, cudaEventDisableTiming));
  for (int k = 0; k < 3; ++k) CK(cudaMalloc(&st.buf[k], LEN * sizeof(float)));

  // Warm-up: 100 clean cycles, so one-time allocations are not counted.
  for (int i = 0; i < 100; ++i) {
    cudaGraph_t g = st.capture();
    cudaGraphExec_t e = st.instantiate_and_run(g);
    CK(cudaGraphExecDestroy(e));
    CK(cudaGraphDestroy(g));
  }
  const double floor_mib = 2048;

  // 1. The right way.
  const int CLEAN = 10000;
  double d0 = free_mib(), h0 = rss_mib(), t0 = now_us();
  for (int i = 0; i < CLEAN; ++i) {
    cudaGraph_t g = st.capture();
    cudaGraphExec_t e = st.instantiate_and_run(g);
    CK(cudaGraphExecDestroy(e));
    CK(cudaGraphDestroy(g));
  }
  double cycle_us = (now_us() - t0) / CLEAN;
  double d1 = free_mib(), h1 = rss_mib();
  double clean_dev = d0 - d1, clean_host = h1 - h0;
  std::printf("  1. %d cycles, destroying each graph and executable: device memory used %+.1f MiB, host RSS %+.1f MiB "
              "(%.1f us per cycle)\n", CLEAN, clean_dev, clean_host, cycle_us);

  // 2-4. Keeping things alive.
  const int LEAK = 2000;
  struct Out {
    double dev_per, host_per, dev_back, host_back;
    int cycles;
  } outs[3];
  const char* what[3] = {"2. keeping graphs and executables", "3. keeping only the graphs", "4. keeping only the executables"};
  for (int m = 0; m < 3; ++m) {
    bool keep_graph = m != 2, keep_exec = m != 1;
    std::vector<cudaGraph_t> graphs;
    std::vector<cudaGraphExec_t> execs;
    double a0 = free_mib(), b0 = rss_mib();
    int i = 0;
    for (; i < LEAK; ++i) {
      if (i % 100 == 0 && free_mib() < floor_mib) break;
      cudaGraph_t g = st.capture();
      cudaGraphExec_t e = st.instantiate_and_run(g);
      if (keep_exec) execs.push_back(e); else CK(cudaGraphExecDestroy(e));
      if (keep_graph) graphs.push_back(g); else CK(cudaGraphDestroy(g));
    }
    double a1 = free_mib(), b1 = rss_mib();
    for (cudaGraphExec_t e : execs) CK(cudaGraphExecDestroy(e));
    for (cudaGraph_t g : graphs) CK(cudaGraphDestroy(g));
    double a2 = free_mib(), b2 = rss_mib();
    int n = std::max(i, 1);
    outs[m] = {(a0 - a1) * 1024 / n, (b1 - b0) * 1024 / n, a2 - a0, b2 - b0, i};
    std::printf("  %s, %d cycles: device memory used %+.1f MiB (%.1f KiB per cycle), host RSS %+.1f MiB (%.1f KiB per "
                "cycle); after destroying them: device %+.1f MiB, host %+.1f MiB against the start\n",
                what[m], i, a0 - a1, outs[m].dev_per, b1 - b0, outs[m].host_per, a0 - a2, b2 - b0);
  }

  // cudaMemGetInfo moves in 2 MiB steps; call < 4 MiB over 10,000 cycles flat.
  bool flat = std::fabs(clean_dev) < 4.0 && clean_host < 16.0;
  bool leak_grows = outs[0].dev_per > 0.5 || outs[0].host_per > 0.5;
  const char* v = flat && leak_grows ? "partly" : (!flat ? "true" : "false");
  verdict("i", v,
          "capture+instantiate+launch+destroy x%d: device %+.1f MiB, host RSS %+.1f MiB (%s); not destroying anything "
          "grows by %.1f KiB device + %.1f KiB host per cycle (graphs only: %.1f + %.1f KiB; executables only: %.1f + "
          "%.1f KiB), all returned by cudaGraphExecDestroy/cudaGraphDestroy (device %+.1f MiB against the start). "
          "Re-capture itself does not leak; undestroyed graphs and executables hold memory until destroyed",
          CLEAN, clean_dev, clean_host, flat ? "flat" : "GROWS", outs[0].dev_per, outs[0].host_per, outs[1].dev_per,
          outs[1].host_per, outs[2].dev_per, outs[2].host_per, -outs[0].dev_back);
  return 0;
}
