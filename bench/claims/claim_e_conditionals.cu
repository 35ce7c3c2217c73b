// Claim e, as found in CUDA-graph tutorials and posts:
// "replacing dynamic streams with graphs fails for loops with
// conditional branches: graphs have no conditional control flow (cudaErrorInvalidValue)."
//
// Method: build and run the three conditional node types CUDA has had since 12.4 (SWITCH since
// 12.8): cudaGraphConditionalHandleCreate, cudaGraphAddNode(cudaGraphNodeTypeConditional), and
// cudaGraphSetConditional called by a kernel of the graph, so the GPU decides at run time:
//   WHILE: the body increments a counter and keeps looping while counter < limit (limit read
//          from device memory, so the trip count changes between launches of one executable);
//   IF/ELSE: a kernel sets the condition from a flag in device memory; IF adds 100, ELSE adds 1;
//   SWITCH: 3 bodies add 1, 10, 100; a value outside 0..2 runs none.
// Each is instantiated once and launched several times with different device-side inputs.
#include "common.cuh"

__global__ void while_body(int* counter, const int* limit, cudaGraphConditionalHandle h) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  int v = *counter + 1;
  *counter = v;
  cudaGraphSetConditional(h, v < *limit ? 1u : 0u);
}

__global__ void set_cond(cudaGraphConditionalHandle h, const int* value) {
  if (blockIdx.x == 0 && threadIdx.x == 0) cudaGraphSetConditional(h, (unsigned)*value);
}

__global__ void add_int(int* x, int v) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *x += v;
}

static cudaError_t add_conditional(cudaGraphNode_t* node, cudaGraph_t g, const cudaGraphNode_t* deps, size_t ndeps,
                                   cudaGraphConditionalHandle h, cudaGraphConditionalNodeType type, unsigned size,
                                   cudaGraph_t** bodies) {
  cudaGraphNodeParams cp = {};
  cp.type = cudaGraphNodeTypeConditional;
  cp.conditional.handle = h;
  cp.conditional.type = type;
  cp.conditional.size = size;
#if CUDART_VERSION >= 13000
  cudaError_t e = cudaGraphAddNode(node, g, deps, nullptr, ndeps, &cp);
#else
  cudaError_t e = cudaGraphAddNode(node, g, deps, ndeps, &cp);
#endif
  *bodies = cp.conditional.phGraph_out;
  return e;
}

template <class... Args>
static void add_kernel(cudaGraph_t g, const cudaGraphNode_t* deps, size_t ndeps, cudaGraphNode_t* out, void* func,
                       Args*... args) {
  void* a[] = {args...};
  cudaKernelNodeParams p = {};
  p.func = func;
  p.gridDim = dim3(1);
  p.blockDim = dim3(32);
  p.kernelParams = a;
  cudaGraphNode_t n;
  CK(cudaGraphAddKernelNode(out ? out : &n, g, deps, ndeps, &p));
}

static int get(const int* d) {
  int h = -1;
  CK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
  return h;
}

static void put(int* d, int v) { CK(cudaMemcpy(d, &v, sizeof v, cudaMemcpyHostToDevice)); }

int main() {
  header("e", "graphs have no conditionals", "bench/claims/claim_e_conditionals.cu");
  int *counter, *limit, *x, *flag;
  CK(cudaMalloc(&counter, sizeof(int)));
  CK(cudaMalloc(&limit, sizeof(int)));
  CK(cudaMalloc(&x, sizeof(int)));
  CK(cudaMalloc(&flag, sizeof(int)));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t t0, t1;
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  int passed = 0, total = 0;
  auto check = [&](const char* what, int got, int want) {
    ++total;
    passed += got == want;
    std::printf("    %-60s got %d, want %d: %s\n", what, got, want, got == want ? "ok" : "WRONG");
  };

  // WHILE.
  std::printf("  WHILE (do { ++counter } while (counter < limit)):\n");
  cudaGraph_t gw;
  CK(cudaGraphCreate(&gw, 0));
  cudaGraphConditionalHandle hw;
  cudaError_t rc = TRY(cudaGraphConditionalHandleCreate(&hw, gw, 1, cudaGraphCondAssignDefault));
  if (rc != cudaSuccess) {
    verdict("e", "true", "cudaGraphConditionalHandleCreate returned %s: no conditional nodes on this driver", cudaGetErrorName(rc));
    return 0;
  }
  cudaGraphNode_t cw;
  cudaGraph_t* bw = nullptr;
  rc = TRY(add_conditional(&cw, gw, nullptr, 0, hw, cudaGraphCondTypeWhile, 1, &bw));
  if (rc != cudaSuccess) {
    verdict("e", "true", "adding a WHILE conditional node returned %s", cudaGetErrorName(rc));
    return 0;
  }
  add_kernel(bw[0], nullptr, 0, nullptr, (void*)while_body, &counter, &limit, &hw);
  cudaGraphExec_t ew;
  CK(cudaGraphInstantiate(&ew, gw, 0));
  double per_iter_us = NAN;
  {
    int cases[][2] = {{0, 10}, {5, 10}, {0, 1000}, {0, 3}};
    for (auto& c : cases) {
      put(counter, c[0]);
      put(limit, c[1]);
      CK(cudaEventRecord(t0, s));
      CK(cudaGraphLaunch(ew, s));
      CK(cudaEventRecord(t1, s));
      CK(cudaStreamSynchronize(s));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, t0, t1));
      char what[128];
      std::snprintf(what, sizeof what, "counter %d, limit %d (%.1f us on the GPU):", c[0], c[1], ms * 1e3);
      check(what, get(counter), c[1]);
      if (c[1] == 1000) per_iter_us = ms * 1e3 / 1000;
    }
  }

  // IF/ELSE.
  std::printf("  IF/ELSE (a kernel sets the condition from a device flag):\n");
  cudaGraph_t gi;
  CK(cudaGraphCreate(&gi, 0));
  cudaGraphConditionalHandle hi;
  CK(cudaGraphConditionalHandleCreate(&hi, gi, 0, 0));
  cudaGraphNode_t setter, ci;
  add_kernel(gi, nullptr, 0, &setter, (void*)set_cond, &hi, &flag);
  cudaGraph_t* bi = nullptr;
  rc = TRY(add_conditional(&ci, gi, &setter, 1, hi, cudaGraphCondTypeIf, 2, &bi));
  bool if_ok = rc == cudaSuccess;
  if (if_ok) {
    int hundred = 100, one = 1;
    add_kernel(bi[0], nullptr, 0, nullptr, (void*)add_int, &x, &hundred);
    add_kernel(bi[1], nullptr, 0, nullptr, (void*)add_int, &x, &one);
    cudaGraphExec_t ei;
    CK(cudaGraphInstantiate(&ei, gi, 0));
    for (int f : {1, 0, 1}) {
      put(x, 0);
      put(flag, f);
      CK(cudaGraphLaunch(ei, s));
      CK(cudaStreamSynchronize(s));
      char what[64];
      std::snprintf(what, sizeof what, "flag %d:", f);
      check(what, get(x), f ? 100 : 1);
    }
    CK(cudaGraphExecDestroy(ei));
  }

  // SWITCH.
  std::printf("  SWITCH (3 bodies):\n");
  cudaGraph_t gs;
  CK(cudaGraphCreate(&gs, 0));
  cudaGraphConditionalHandle hs;
  CK(cudaGraphConditionalHandleCreate(&hs, gs, 0, 0));
  cudaGraphNode_t setter2, cs;
  add_kernel(gs, nullptr, 0, &setter2, (void*)set_cond, &hs, &flag);
  cudaGraph_t* bs = nullptr;
  rc = TRY(add_conditional(&cs, gs, &setter2, 1, hs, cudaGraphCondTypeSwitch, 3, &bs));
  bool switch_ok = rc == cudaSuccess;
  if (switch_ok) {
    int adds[3] = {1, 10, 100};
    for (int i = 0; i < 3; ++i) add_kernel(bs[i], nullptr, 0, nullptr, (void*)add_int, &x, &adds[i]);
    cudaGraphExec_t es;
    CK(cudaGraphInstantiate(&es, gs, 0));
    for (int v : {0, 1, 2, 7}) {
      put(x, 0);
      put(flag, v);
      CK(cudaGraphLaunch(es, s));
      CK(cudaStreamSynchronize(s));
      char what[64];
      std::snprintf(what, sizeof what, "value %d:", v);
      check(what, get(x), v < 3 ? adds[v] : 0);
    }
    CK(cudaGraphExecDestroy(es));
  }

  if (passed == total && if_ok && switch_ok)
    verdict("e", "false",
            "WHILE, IF/ELSE and SWITCH conditional nodes built, instantiated once and ran with GPU-decided control flow: "
            "%d of %d checks right (WHILE trip counts 10, 5, 1000 and 3 from one executable; %.2f us per WHILE iteration)",
            passed, total, per_iter_us);
  else
    verdict("e", "partly", "%d of %d checks right; IF/ELSE node %s, SWITCH node %s", passed, total,
            if_ok ? "built" : "refused", switch_ok ? "built" : "refused");
  CK(cudaGraphExecDestroy(ew));
  CK(cudaGraphDestroy(gw));
  CK(cudaGraphDestroy(gi));
  CK(cudaGraphDestroy(gs));
  return 0;
}
