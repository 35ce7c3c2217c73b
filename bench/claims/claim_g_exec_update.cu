// Claim g, as found in CUDA-graph tutorials and posts:
// "cudaGraphExecUpdate requires the same node count, node types,
// dependency order and kernel parameter layout; a change of kernelNodeParams::func or the grid
// size triggers cudaErrorInvalidValue; a failed update gives no precise location" (and the
// code given with it checks `err == cudaErrorInvalidValue` and passes &errorNode).
//
// Method: an executable of a 3-kernel chain n0 -> n1 -> n2 (x += 1 each). Build variants node by
// node and call cudaGraphExecUpdate with each; report the return code, the
// cudaGraphExecUpdateResult, and which node errorNode / errorFromNode name. After each
// successful update, launch and check the result; after each failed one, launch and check that
// the executable still computes what it did before.
#include "common.cuh"

static const unsigned LEN = 256;

extern "C" __global__ void scale(float* x, float a, unsigned n) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) x[i] *= a;
}

struct Spec {             // one kernel node
  void* func = (void*)add_scalar;
  float* buf = nullptr;
  float a = 1.0f;
  unsigned blocks = 1, threads = 256;
  bool memset = false;    // a memset node instead of a kernel
};

struct Built {
  cudaGraph_t g;
  std::vector<cudaGraphNode_t> nodes;
};

// Nodes in order; edges as pairs (from, to); default edges: a chain.
static Built build(std::vector<Spec> specs, std::vector<std::pair<int, int>> edges = {}) {
  if (edges.empty())
    for (int i = 1; i < (int)specs.size(); ++i) edges.push_back({i - 1, i});
  Built b;
  CK(cudaGraphCreate(&b.g, 0));
  unsigned len = LEN;
  for (Spec& s : specs) {
    cudaGraphNode_t n;
    if (s.memset) {
      cudaMemsetParams m = {};
      m.dst = s.buf;
      m.value = 0;
      m.elementSize = 4;
      m.width = LEN;
      m.height = 1;
      m.pitch = 0;
      CK(cudaGraphAddMemsetNode(&n, b.g, nullptr, 0, &m));
    } else {
      void* args[] = {&s.buf, &s.a, &len};
      cudaKernelNodeParams p = {};
      p.func = s.func;
      p.gridDim = dim3(s.blocks);
      p.blockDim = dim3(s.threads);
      p.kernelParams = args;
      CK(cudaGraphAddKernelNode(&n, b.g, nullptr, 0, &p));
    }
    b.nodes.push_back(n);
  }
  for (auto& e : edges) {
#if CUDART_VERSION >= 13000
    CK(cudaGraphAddDependencies(b.g, &b.nodes[e.first], &b.nodes[e.second], nullptr, 1));
#else
    CK(cudaGraphAddDependencies(b.g, &b.nodes[e.first], &b.nodes[e.second], 1));
#endif
  }
  return b;
}

static const char* result_name(cudaGraphExecUpdateResult r) {
  switch (r) {
    case cudaGraphExecUpdateSuccess: return "cudaGraphExecUpdateSuccess";
    case cudaGraphExecUpdateError: return "cudaGraphExecUpdateError";
    case cudaGraphExecUpdateErrorTopologyChanged: return "cudaGraphExecUpdateErrorTopologyChanged";
    case cudaGraphExecUpdateErrorNodeTypeChanged: return "cudaGraphExecUpdateErrorNodeTypeChanged";
    case cudaGraphExecUpdateErrorFunctionChanged: return "cudaGraphExecUpdateErrorFunctionChanged";
    case cudaGraphExecUpdateErrorParametersChanged: return "cudaGraphExecUpdateErrorParametersChanged";
    case cudaGraphExecUpdateErrorNotSupported: return "cudaGraphExecUpdateErrorNotSupported";
    case cudaGraphExecUpdateErrorUnsupportedFunctionChange: return "cudaGraphExecUpdateErrorUnsupportedFunctionChange";
    case cudaGraphExecUpdateErrorAttributesChanged: return "cudaGraphExecUpdateErrorAttributesChanged";
  }
  return "(unknown result)";
}

// "n1 of the new graph", "n0 of the executable's graph", "none", or "another node".
static std::string which(cudaGraphNode_t n, const Built& fresh, const Built& base) {
  if (!n) return "none";
  for (size_t i = 0; i < fresh.nodes.size(); ++i)
    if (fresh.nodes[i] == n) return "n" + std::to_string(i) + " of the new graph";
  for (size_t i = 0; i < base.nodes.size(); ++i)
    if (base.nodes[i] == n) return "n" + std::to_string(i) + " of the executable's graph";
  return "a node of neither graph";
}

int main() {
  header("g", "the exec-update rules", "bench/claims/claim_g_exec_update.cu");
  float *x, *y;
  CK(cudaMalloc(&x, LEN * sizeof(float)));
  CK(cudaMalloc(&y, LEN * sizeof(float)));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  Spec add1;
  add1.buf = x;
  Built base = build({add1, add1, add1});
  cudaGraphExec_t e;
  CK(cudaGraphInstantiate(&e, base.g, 0));

  // Runs the executable from x = y = 1; returns (x, y).
  auto run = [&]() {
    upload_fill(x, LEN, 1.0f);
    upload_fill(y, LEN, 1.0f);
    CK(cudaGraphLaunch(e, s));
    CK(cudaStreamSynchronize(s));
    return std::make_pair(download(x, LEN)[0], download(y, LEN)[0]);
  };
  auto before = run();
  std::printf("  executable: n0 -> n1 -> n2, each x += 1; from x = 1 it computes x = %g\n", before.first);

  struct Variant {
    const char* what;
    Built b;
    float want_x, want_y; // expected (x, y) after a successful update
  };
  Spec add2 = add1;
  add2.a = 2.0f;
  Spec on_y = add1;
  on_y.buf = y;
  Spec scale3 = add1;
  scale3.func = (void*)scale;
  scale3.a = 3.0f;
  Spec grid4 = add1;
  grid4.blocks = 4;
  Spec block128 = add1;
  block128.threads = 128;
  Spec mset = add1;
  mset.memset = true;
  std::vector<Variant> vs = {
      {"parameter change: n1 adds 2", build({add1, add2, add1}), 5, 1},
      {"pointer change: n1 adds to another buffer y", build({add1, on_y, add1}), 3, 2},
      {"function change: n1 is scale(x, 3) instead of add", build({add1, scale3, add1}), 7, 1},
      {"grid change: n1 launches 4 blocks instead of 1", build({add1, grid4, add1}), 4, 1},
      {"block change: n1 launches 128 threads instead of 256", build({add1, block128, add1}), 4, 1},
      {"topology: a 4th node n3 after n2", build({add1, add1, add1, add1}), 5, 1},
      {"topology: only 2 nodes", build({add1, add1}), 3, 1},
      {"topology: edges n0 -> n1, n0 -> n2 (n1 -> n2 removed)", build({add1, add1, add1}, {{0, 1}, {0, 2}}), 4, 1},
      {"node type: n1 is a memset node (x = 0)", build({add1, mset, add1}), 1, 1},
      {"identical graph, rebuilt", build({add1, add1, add1}), 4, 1},
  };

  int updated = 0, refused = 0, located = 0, wrong = 0;
  bool invalid_value = false;
  std::vector<bool> success(vs.size());
  std::string summary;
  for (size_t i = 0; i < vs.size(); ++i) {
    Variant& v = vs[i];
    cudaGraphExecUpdateResultInfo info = {};
    cudaError_t rc = cudaGraphExecUpdate(e, v.b.g, &info);
    if (rc != cudaSuccess) (void)cudaGetLastError();
    auto after = run();
    success[i] = rc == cudaSuccess;
    std::string where = which(info.errorNode, v.b, base);
    std::string from = which(info.errorFromNode, v.b, base);
    std::printf("  %-56s %s, %s; errorNode: %s; errorFromNode: %s; then x = %g, y = %g", v.what, cudaGetErrorName(rc),
                result_name(info.result), where.c_str(), from.c_str(), after.first, after.second);
    if (success[i]) {
      bool right = after.first == v.want_x && after.second == v.want_y;
      std::printf(" (%s)\n", right ? "the update took effect" : "WRONG: not the updated graph's result");
      ++updated;
      wrong += !right;
      CK(cudaGraphExecUpdate(e, base.g, &info)); // back to the base graph for the next variant
    } else {
      bool unchanged = after.first == before.first && after.second == 1.0f;
      std::printf(" (%s)\n", unchanged ? "the executable is unchanged" : "WRONG: the executable changed");
      ++refused;
      wrong += !unchanged;
      located += info.errorNode != nullptr;
      invalid_value |= rc == cudaErrorInvalidValue;
    }
    char part[200];
    std::snprintf(part, sizeof part, "%s%s: %s", summary.empty() ? "" : "; ", v.what,
                  success[i] ? "updated" : result_name(info.result) + std::strlen("cudaGraphExecUpdate"));
    summary += part;
  }

  // The claim's three statements: (1) topology and node types must not change; (2) a function
  // or grid change fails with cudaErrorInvalidValue; (3) a failure does not say where.
  bool s1 = !success[5] && !success[6] && !success[7] && !success[8] && success[0] && success[1] && success[9];
  bool s2 = !success[2] && !success[3] && invalid_value;
  bool s3 = refused > 0 && located == 0;
  const char* v = s1 && s2 && s3 ? "true" : (s1 || s2 || s3) ? "partly" : "false";
  verdict("g", v,
          "%d of %zu variants updated in place (%d results wrong), %d refused, %d of them naming the node in errorNode; "
          "(1) topology and node-type changes refused, parameter changes accepted: %s; (2) function/grid changes fail "
          "with cudaErrorInvalidValue: %s (function change %s, grid change %s, any refusal with cudaErrorInvalidValue: %s); "
          "(3) refusals carry no location: %s. Per variant: %s",
          updated, vs.size(), wrong, refused, located, s1 ? "yes" : "no", s2 ? "yes" : "no",
          success[2] ? "accepted" : "refused", success[3] ? "accepted" : "refused", invalid_value ? "yes" : "no",
          s3 ? "yes" : "no", summary.c_str());
  CK(cudaGraphExecDestroy(e));
  return 0;
}
