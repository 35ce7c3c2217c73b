// Claim f, as found in CUDA-graph tutorials and posts:
// "flags = 0 gives the default synchronous semantics; for asynchronous
// instantiation (CUDA 12.0+) set cudaGraphInstantiateFlagAutoFreeOnLaunch."
//
// Method: two graphs: P, a chain of 100 kernels; M, captured from cudaMallocAsync + a kernel
// writing the allocation, with no free (a graph with an unfreed memory-allocation node, the case
// the flag exists for). For each graph and each flag (0, AutoFreeOnLaunch): the host time of
// instantiation with the GPU idle (median of 10) and with a 200 ms kernel in flight, and whether
// that kernel was still running when the call returned. Then what the flag really does: launch
// M twice without freeing its allocation in between, with and without the flag.
#include "common.cuh"

static const double SPIN_MS = 200.0;
static const size_t BYTES = 1 << 20;

__global__ void fill_bytes(unsigned char* p, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x) p[i] = 1;
}

int main() {
  header("f", "cudaGraphInstantiateFlagAutoFreeOnLaunch makes instantiation asynchronous", "bench/claims/claim_f_autofree.cu");
  float* x;
  CK(cudaMalloc(&x, 256 * sizeof(float)));
  cudaStream_t s, busy;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking));
  cudaGraph_t P = build_chain(100, x, 1.0f, 256);

  cudaGraph_t M;
  void* mptr = nullptr;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  CK(cudaMallocAsync(&mptr, BYTES, s));
  fill_bytes<<<8, 256, 0, s>>>((unsigned char*)mptr, BYTES);
  CK(cudaGetLastError());
  CK(cudaStreamEndCapture(s, &M));
  size_t nodes = 0;
  CK(cudaGraphGetNodes(M, nullptr, &nodes));
  std::printf("  graph M: %zu nodes (memory allocation + kernel, no free), allocation at %p\n", nodes, mptr);

  Spin spin;
  spin.launch(busy, 5);
  spin.wait_ms();

  struct Row {
    const char* graph;
    unsigned long long flags;
    double idle_us, busy_us;
    bool running;
  };
  std::vector<Row> rows;
  const char* names[2] = {"P (100 kernels)", "M (alloc + kernel)"};
  cudaGraph_t graphs[2] = {P, M};
  unsigned long long flags[2] = {0, cudaGraphInstantiateFlagAutoFreeOnLaunch};
  for (int gi = 0; gi < 2; ++gi) {
    for (unsigned long long f : flags) {
      std::vector<double> t;
      for (int r = 0; r < 11; ++r) {
        cudaGraphExec_t e;
        double t0 = now_us();
        CK(cudaGraphInstantiateWithFlags(&e, graphs[gi], f));
        double t1 = now_us();
        CK(cudaGraphExecDestroy(e)); // a graph with allocation nodes may have one executable at a time
        if (r > 0) t.push_back(t1 - t0);
      }
      spin.launch(busy, SPIN_MS);
      cudaGraphExec_t e;
      double t0 = now_us();
      CK(cudaGraphInstantiateWithFlags(&e, graphs[gi], f));
      double t1 = now_us();
      bool running = spin.running();
      spin.wait_ms();
      CK(cudaGraphExecDestroy(e));
      rows.push_back({names[gi], f, median(t), t1 - t0, running});
      std::printf("  %-20s flags %-22s idle %8.1f us; with a %.0f ms kernel in flight %8.1f us, kernel still running: %s\n",
                  names[gi], f ? "AutoFreeOnLaunch" : "0", median(t), SPIN_MS, t1 - t0, running ? "yes" : "NO");
    }
  }

  // What the flag is for: relaunching a graph whose allocation was not freed.
  std::printf("  relaunching M without freeing its allocation in between:\n");
  cudaError_t second[2];
  for (int i = 0; i < 2; ++i) {
    cudaGraphExec_t e;
    CK(cudaGraphInstantiateWithFlags(&e, M, flags[i]));
    std::printf("   flags %s:\n", flags[i] ? "AutoFreeOnLaunch" : "0");
    TRY(cudaGraphLaunch(e, s));
    CK(cudaStreamSynchronize(s));
    second[i] = TRY(cudaGraphLaunch(e, s));
    TRY(cudaStreamSynchronize(s));
    CK(cudaFreeAsync(mptr, s)); // free the live allocation before the next executable
    CK(cudaStreamSynchronize(s));
    CK(cudaGraphExecDestroy(e));
  }

  bool any_blocked = false;
  double ratio_p = rows[1].idle_us / rows[0].idle_us, ratio_m = rows[3].idle_us / rows[2].idle_us;
  for (const Row& r : rows) any_blocked |= !r.running;
  if (!any_blocked)
    verdict("f", "false",
            "instantiation never waited for the GPU, with or without the flag (with a %.0f ms kernel in flight: %.1f/%.1f us "
            "for P, %.1f/%.1f us for M, flag off/on); the flag changed idle instantiation time by %.2fx (P) and %.2fx (M). "
            "What it does: a second launch of M with its allocation still live returned %s without the flag and %s with it",
            SPIN_MS, rows[0].busy_us, rows[1].busy_us, rows[2].busy_us, rows[3].busy_us, ratio_p, ratio_m,
            cudaGetErrorName(second[0]), cudaGetErrorName(second[1]));
  else
    verdict("f", "partly", "some instantiation waited for the in-flight kernel (see the lines above); relaunch codes %s / %s",
            cudaGetErrorName(second[0]), cudaGetErrorName(second[1]));
  CK(cudaGraphDestroy(P));
  CK(cudaGraphDestroy(M));
  CK(cudaFree(x));
  return 0;
}
