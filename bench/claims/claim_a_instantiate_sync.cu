// Claim a, as found in CUDA-graph tutorials and posts:
// "cudaGraphInstantiate forces a synchronization of the current stream
// (equivalent to cudaStreamSynchronize), blocking the host until all prior work is done."
//
// Method: put a 200 ms spin kernel in flight, then instantiate a graph (10 and 1,000 kernel
// nodes) and time the host call. If instantiate synchronized, the call would take ~200 ms and
// the kernel would be finished when it returns. Cases: the kernel on a non-blocking stream, on
// another non-blocking stream, on the legacy default stream; instantiation with
// cudaGraphInstantiateFlagUpload on the busy stream; cudaGraphUpload on the busy stream.
// Baseline: the same instantiations with the GPU idle (median of 20).
#include "common.cuh"

static const double SPIN_MS = 200.0;
static const unsigned LEN = 256;

struct Case {
  double host_us;
  bool still_running;
  double spin_ms;
};

int main() {
  header("a", "cudaGraphInstantiate synchronizes the stream", "bench/claims/claim_a_instantiate_sync.cu");
  float* x;
  CK(cudaMalloc(&x, LEN * sizeof(float)));
  cudaStream_t s1, s2;
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaGraph_t small = build_chain(10, x, 1.0f, LEN);
  cudaGraph_t big = build_chain(1000, x, 1.0f, LEN);
  Spin spin;
  spin.launch(s1, 10); // warm-up: module load, timer
  spin.wait_ms();

  // Baseline: instantiation with nothing in flight.
  double idle[2];
  cudaGraph_t graphs[2] = {small, big};
  for (int gi = 0; gi < 2; ++gi) {
    std::vector<double> t;
    for (int r = 0; r < 21; ++r) {
      cudaGraphExec_t e;
      double t0 = now_us();
      CK(cudaGraphInstantiate(&e, graphs[gi], 0));
      double t1 = now_us();
      CK(cudaGraphExecDestroy(e));
      if (r > 0) t.push_back(t1 - t0);
    }
    idle[gi] = median(t);
  }
  std::printf("  idle GPU: instantiate 10 nodes %.1f us, 1,000 nodes %.1f us (medians of 20)\n", idle[0], idle[1]);

  // Each case: spin on `busy`, then the host call; was the kernel still running on return?
  auto run_case = [&](const char* what, cudaStream_t busy, int gi, int mode) {
    spin.launch(busy, SPIN_MS);
    cudaGraphExec_t e = nullptr;
    double t0 = now_us();
    if (mode == 0) {
      CK(cudaGraphInstantiate(&e, graphs[gi], 0));
    } else if (mode == 1) {
      cudaGraphInstantiateParams ip = {};
      ip.flags = cudaGraphInstantiateFlagUpload;
      ip.uploadStream = busy;
      CK(cudaGraphInstantiateWithParams(&e, graphs[gi], &ip));
      if (ip.result_out != cudaGraphInstantiateSuccess) std::printf("    instantiate result_out %d\n", (int)ip.result_out);
    }
    double t1 = now_us();
    bool running = spin.running();
    double ms = spin.wait_ms();
    if (mode == 2) { // upload of an existing executable onto the busy stream
      CK(cudaGraphInstantiate(&e, graphs[gi], 0));
      spin.launch(busy, SPIN_MS);
      t0 = now_us();
      CK(cudaGraphUpload(e, busy));
      t1 = now_us();
      running = spin.running();
      ms = spin.wait_ms();
    }
    CK(cudaStreamSynchronize(busy));
    CK(cudaGraphExecDestroy(e));
    std::printf("  %-68s host %9.1f us; %.0f ms kernel still running on return: %s\n", what, t1 - t0, ms,
                running ? "yes" : "NO");
    return Case{t1 - t0, running, ms};
  };

  std::vector<Case> cases;
  cases.push_back(run_case("instantiate 10 nodes, kernel on stream s1", s1, 0, 0));
  cases.push_back(run_case("instantiate 1,000 nodes, kernel on stream s1", s1, 1, 0));
  cases.push_back(run_case("instantiate 1,000 nodes, kernel on another stream s2", s2, 1, 0));
  cases.push_back(run_case("instantiate 1,000 nodes, kernel on the legacy default stream", 0, 1, 0));
  cases.push_back(run_case("instantiate 1,000 nodes with FlagUpload onto busy s1", s1, 1, 1));
  cases.push_back(run_case("cudaGraphUpload 1,000 nodes onto busy s1", s1, 1, 2));

  // A captured graph, instantiated while the capturing stream's earlier work still runs.
  {
    spin.launch(s1, SPIN_MS);
    cudaGraph_t g;
    cudaError_t begin = cudaStreamBeginCapture(s1, cudaStreamCaptureModeThreadLocal);
    if (begin != cudaSuccess) { // capture on a stream with pending work refused: use another stream
      std::printf("    cudaStreamBeginCapture on the busy stream -> %s; capturing on s2 instead\n", cudaGetErrorName(begin));
      (void)cudaGetLastError();
    }
    cudaStream_t cs = begin == cudaSuccess ? s1 : s2;
    if (begin != cudaSuccess) CK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < 100; ++i) add_scalar<<<1, 256, 0, cs>>>(x, 1.0f, LEN);
    CK(cudaGetLastError());
    CK(cudaStreamEndCapture(cs, &g));
    cudaGraphExec_t e;
    double t0 = now_us();
    CK(cudaGraphInstantiate(&e, g, 0));
    double t1 = now_us();
    bool running = spin.running();
    double ms = spin.wait_ms();
    std::printf("  %-68s host %9.1f us; %.0f ms kernel still running on return: %s\n",
                "capture 100 launches on busy s1, then instantiate", t1 - t0, ms, running ? "yes" : "NO");
    cases.push_back(Case{t1 - t0, running, ms});
    CK(cudaGraphExecDestroy(e));
    CK(cudaGraphDestroy(g));
  }

  int blocked = 0;
  double worst = 0;
  for (const Case& c : cases) {
    if (!c.still_running || c.host_us > 0.5 * c.spin_ms * 1e3) ++blocked;
    worst = std::max(worst, c.host_us);
  }
  if (blocked == 0)
    verdict("a", "false",
            "in %zu cases with a %.0f ms kernel in flight, instantiate/upload returned in at most %.1f us (idle: %.1f us "
            "for 10 nodes, %.1f us for 1,000) and the kernel was still running every time: no stream synchronization",
            cases.size(), SPIN_MS, worst, idle[0], idle[1]);
  else if (blocked == (int)cases.size())
    verdict("a", "true", "every case waited for the %.0f ms kernel (longest call %.1f us)", SPIN_MS, worst);
  else
    verdict("a", "partly", "%d of %zu cases waited for the %.0f ms kernel (longest call %.1f us); see the lines above",
            blocked, cases.size(), SPIN_MS, worst);

  CK(cudaGraphDestroy(small));
  CK(cudaGraphDestroy(big));
  CK(cudaStreamDestroy(s1));
  CK(cudaStreamDestroy(s2));
  CK(cudaFree(x));
  return 0;
}
