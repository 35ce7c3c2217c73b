// Plain CUDA C++ reference for a chain of N small kernels, as a C API, so that one process can
// time it and graphsmith turn by turn (crates/graphsmith-workloads/examples/interleaved.rs loads
// it as a shared library; bench/cpp/update_bench.cu includes it for its standalone program).
// Runtime API only; it runs in the current context (graphsmith uses the primary context, which is
// the runtime's too). Every CUDA call is checked; a failure prints the call and exits.
//
//   nvcc -O2 -arch=sm_90 -shared -Xcompiler -fPIC -o libchain_ref.so bench/cpp/chain_ref.cu
#include "../common.cuh"

struct ChainRef {
  int n;
  unsigned len;
  float* x;
  cudaStream_t stream;
  cudaEvent_t start, end;
  cudaGraph_t graph[2];                 // every node adds 0.5 (graph 0) or 0.25 (graph 1)
  std::vector<cudaGraphNode_t> nodes;   // graph 0's nodes, which address the executable's
  cudaGraphExec_t exec;
  bool own_stream, own_buffer;
  cudaStream_t sides[3];                // fork/join captures: the three side streams
  cudaEvent_t forks[3], joins[3];       // and the events that fork and join them
  std::vector<void*> spread;            // CHAIN_REF_SPREAD's host blocks, freed with the chain
};

// Branches of the fork/join capture (as graphsmith's bench: a root kernel, four branches of
// floor(n/4) kernels each, the main stream's first, a final kernel).
static const int kBranches = 4;

static cudaKernelNodeParams node_params(void** args, unsigned len) {
  cudaKernelNodeParams p = {};
  p.func = (void*)add_scalar;
  p.gridDim = dim3((len + 255) / 256);
  p.blockDim = dim3(256);
  p.kernelParams = args;
  return p;
}

// An experiment on the host heap's layout: with CHAIN_REF_SPREAD=K, K blocks of 64 bytes are
// allocated on the host after each node is added (kept until the chain is freed), as a library
// that keeps a few small records per node interleaves them with the driver's own.
static int spread_blocks() {
  const char* s = getenv("CHAIN_REF_SPREAD");
  return s ? atoi(s) : 0;
}

static cudaGraph_t build(ChainRef* c, float a, std::vector<cudaGraphNode_t>* nodes) {
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t last = nullptr;
  const int spread = spread_blocks();
  for (int i = 0; i < c->n; ++i) {
    void* args[] = {&c->x, &a, &c->len};
    cudaKernelNodeParams p = node_params(args, c->len);
    cudaGraphNode_t node;
    CK(cudaGraphAddKernelNode(&node, g, i ? &last : nullptr, i ? 1 : 0, &p));
    last = node;
    if (nodes) nodes->push_back(node);
    for (int k = 0; k < spread; ++k) c->spread.push_back(malloc(64));
  }
  return g;
}

extern "C" {

// A chain of n kernels over a buffer of 256 floats, built explicitly twice (adding 0.5 and
// 0.25), the executable instantiated from the first, uploaded, launched once. `stream` and
// `buffer` (256 floats), when not null, are used instead of a stream and buffer of its own (an
// experiment: which of them makes a difference); the caller keeps them alive.
ChainRef* chain_ref_new_with(int n, cudaStream_t stream, float* buffer) {
  ChainRef* c = new ChainRef();
  c->n = n;
  c->len = 256;
  c->own_buffer = buffer == nullptr;
  c->own_stream = stream == nullptr;
  if (c->own_buffer)
    CK(cudaMalloc(&c->x, c->len * sizeof(float)));
  else
    c->x = buffer;
  if (c->own_stream)
    CK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  else
    c->stream = stream;
  CK(cudaEventCreate(&c->start));
  CK(cudaEventCreate(&c->end));
  for (int k = 0; k < kBranches - 1; ++k) {
    CK(cudaStreamCreateWithFlags(&c->sides[k], cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&c->forks[k], cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&c->joins[k], cudaEventDisableTiming));
  }
  c->graph[0] = build(c, 0.5f, &c->nodes);
  c->graph[1] = build(c, 0.25f, nullptr);
  CK(cudaGraphInstantiate(&c->exec, c->graph[0], 0));
  CK(cudaGraphUpload(c->exec, c->stream));
  CK(cudaGraphLaunch(c->exec, c->stream));
  CK(cudaStreamSynchronize(c->stream));
  return c;
}

ChainRef* chain_ref_new(int n) { return chain_ref_new_with(n, nullptr, nullptr); }

void chain_ref_free(ChainRef* c) {
  CK(cudaStreamSynchronize(c->stream));
  CK(cudaGraphExecDestroy(c->exec));
  CK(cudaGraphDestroy(c->graph[0]));
  CK(cudaGraphDestroy(c->graph[1]));
  CK(cudaEventDestroy(c->start));
  CK(cudaEventDestroy(c->end));
  for (int k = 0; k < kBranches - 1; ++k) {
    CK(cudaStreamDestroy(c->sides[k]));
    CK(cudaEventDestroy(c->forks[k]));
    CK(cudaEventDestroy(c->joins[k]));
  }
  for (void* p : c->spread) {
    free(p);
  }
  if (c->own_stream) CK(cudaStreamDestroy(c->stream));
  if (c->own_buffer) CK(cudaFree(c->x));
  delete c;
}

// Host time to submit the chain eagerly (n launches adding 0.5) or as one replay, and the
// device time between events recorded around it; the stream is idle before and after.
static void timed(ChainRef* c, bool replay, double* submit_us, double* device_us) {
  CK(cudaEventRecord(c->start, c->stream));
  double t0 = now_us();
  if (replay) {
    CK(cudaGraphLaunch(c->exec, c->stream));
  } else {
    float a = 0.5f;
    for (int i = 0; i < c->n; ++i) add_scalar<<<(c->len + 255) / 256, 256, 0, c->stream>>>(c->x, a, c->len);
    CK(cudaGetLastError());
  }
  *submit_us = now_us() - t0;
  CK(cudaEventRecord(c->end, c->stream));
  CK(cudaEventSynchronize(c->end));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, c->start, c->end));
  *device_us = ms * 1e3;
}

void chain_ref_eager(ChainRef* c, double* submit_us, double* device_us) { timed(c, false, submit_us, device_us); }
void chain_ref_replay(ChainRef* c, double* submit_us, double* device_us) { timed(c, true, submit_us, device_us); }

// Host time of setting every kernel node of the executable to add `a`.
double chain_ref_per_node_update(ChainRef* c, float a) {
  double t0 = now_us();
  for (cudaGraphNode_t node : c->nodes) {
    void* args[] = {&c->x, &a, &c->len};
    cudaKernelNodeParams p = node_params(args, c->len);
    CK(cudaGraphExecKernelNodeSetParams(c->exec, node, &p));
  }
  return now_us() - t0;
}

// Host time of a whole-graph update to graph `which` (0: adds 0.5, 1: adds 0.25).
double chain_ref_whole_update(ChainRef* c, int which) {
  cudaGraphExecUpdateResultInfo info;
  double t0 = now_us();
  CK(cudaGraphExecUpdate(c->exec, c->graph[which], &info));
  return now_us() - t0;
}

// Host time of instantiating graph 0 afresh (the fresh executable is then destroyed, untimed).
double chain_ref_instantiate(ChainRef* c) {
  cudaGraphExec_t fresh;
  double t0 = now_us();
  CK(cudaGraphInstantiate(&fresh, c->graph[0], 0));
  double t = now_us() - t0;
  CK(cudaGraphExecDestroy(fresh));
  return t;
}

// Host time of capturing the workload into a graph, from cudaStreamBeginCapture to
// cudaStreamEndCapture (the graph is then destroyed, untimed): the chain of n kernels on the
// stream, or (forkjoin) a root kernel, three side streams forked from the stream with an event
// each, floor(n/4) kernels on each of the four streams, the sides joined back, a final kernel.
double chain_ref_capture(ChainRef* c, int forkjoin) {
  const unsigned grid = (c->len + 255) / 256;
  float a = 0.5f;
  cudaGraph_t g;
  double t0 = now_us();
  CK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
  if (!forkjoin) {
    for (int i = 0; i < c->n; ++i) add_scalar<<<grid, 256, 0, c->stream>>>(c->x, a, c->len);
  } else {
    add_scalar<<<grid, 256, 0, c->stream>>>(c->x, a, c->len);
    for (int k = 0; k < kBranches - 1; ++k) {
      CK(cudaEventRecord(c->forks[k], c->stream));
      CK(cudaStreamWaitEvent(c->sides[k], c->forks[k], 0));
    }
    const int per_branch = c->n / kBranches;
    for (int k = 0; k < kBranches; ++k) {
      cudaStream_t s = k == 0 ? c->stream : c->sides[k - 1];
      for (int i = 0; i < per_branch; ++i) add_scalar<<<grid, 256, 0, s>>>(c->x, a, c->len);
    }
    for (int k = 0; k < kBranches - 1; ++k) {
      CK(cudaEventRecord(c->joins[k], c->sides[k]));
      CK(cudaStreamWaitEvent(c->stream, c->joins[k], 0));
    }
    add_scalar<<<grid, 256, 0, c->stream>>>(c->x, a, c->len);
  }
  CK(cudaGetLastError());
  CK(cudaStreamEndCapture(c->stream, &g));
  double t = now_us() - t0;
  CK(cudaGraphDestroy(g));
  return t;
}

// Sets every element to `start`, replays once, and returns 1 when every element equals `want`.
int chain_ref_check_replay(ChainRef* c, float start, float want) {
  std::vector<float> host(c->len, start);
  CK(cudaMemcpyAsync(c->x, host.data(), c->len * sizeof(float), cudaMemcpyHostToDevice, c->stream));
  CK(cudaGraphLaunch(c->exec, c->stream));
  CK(cudaMemcpyAsync(host.data(), c->x, c->len * sizeof(float), cudaMemcpyDeviceToHost, c->stream));
  CK(cudaStreamSynchronize(c->stream));
  for (float v : host)
    if (v != want) return 0;
  return 1;
}

}  // extern "C"
