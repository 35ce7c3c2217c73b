// Plain CUDA C++ reference for graphsmith's update benchmark (issue 4): a chain of N small
// kernels built explicitly; times (host wall clock, medians) of updating every kernel node of the
// executable (cudaGraphExecKernelNodeSetParams), a whole-graph update (cudaGraphExecUpdate),
// and a fresh instantiation (cudaGraphInstantiate). Prints one JSON object.
//
//   nvcc -O2 -arch=sm_90 -o update_bench bench/cpp/update_bench.cu && ./update_bench 1000
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(call)                                                                       \
  do {                                                                                 \
    cudaError_t e = (call);                                                            \
    if (e != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

extern "C" __global__ void add_scalar(float* x, float a, unsigned n) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) x[i] += a;
}

static double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

struct Chain {
  cudaGraph_t graph;
  std::vector<cudaGraphNode_t> nodes;
};

static Chain build(int n, float* x, float a, unsigned len) {
  Chain c;
  CK(cudaGraphCreate(&c.graph, 0));
  for (int i = 0; i < n; ++i) {
    void* args[] = {&x, &a, &len};
    cudaKernelNodeParams p = {};
    p.func = (void*)add_scalar;
    p.gridDim = dim3((len + 255) / 256);
    p.blockDim = dim3(256);
    p.kernelParams = args;
    cudaGraphNode_t node;
    CK(cudaGraphAddKernelNode(&node, c.graph, i ? &c.nodes.back() : nullptr, i ? 1 : 0, &p));
    c.nodes.push_back(node);
  }
  return c;
}

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 1000;
  int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  unsigned len = 256;
  float* x;
  CK(cudaMalloc(&x, len * sizeof(float)));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  Chain a = build(n, x, 0.5f, len), b = build(n, x, 0.25f, len);
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, a.graph, 0));
  CK(cudaGraphUpload(exec, s));
  CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));

  // Each kind of update in its own loop, the first three rounds as warm-up (the same
  // structure as graphsmith's crates/graphsmith-workloads/examples/update_bench.rs).
  std::vector<double> per_node, whole, inst;
  for (int r = 0; r < reps + 3; ++r) {
    float v = (r % 2) ? 0.5f : 0.25f;
    double t0 = now_us();
    for (int i = 0; i < n; ++i) {
      void* args[] = {&x, &v, &len};
      cudaKernelNodeParams p = {};
      p.func = (void*)add_scalar;
      p.gridDim = dim3((len + 255) / 256);
      p.blockDim = dim3(256);
      p.kernelParams = args;
      CK(cudaGraphExecKernelNodeSetParams(exec, a.nodes[i], &p));
    }
    if (r >= 3) per_node.push_back(now_us() - t0);
  }
  for (int r = 0; r < reps + 3; ++r) {
    cudaGraphExecUpdateResultInfo info;
    double t0 = now_us();
    CK(cudaGraphExecUpdate(exec, (r % 2) ? a.graph : b.graph, &info));
    if (r >= 3) whole.push_back(now_us() - t0);
  }
  for (int r = 0; r < reps + 3; ++r) {
    cudaGraphExec_t fresh;
    double t0 = now_us();
    CK(cudaGraphInstantiate(&fresh, a.graph, 0));
    double t1 = now_us();
    CK(cudaGraphExecDestroy(fresh));
    if (r >= 3) inst.push_back(t1 - t0);
  }
  CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));
  std::printf("{\"impl\": \"cuda-c++\", \"nodes\": %d, \"per_node_update_us\": %.1f, \"whole_graph_update_us\": %.1f, \"instantiate_us\": %.1f}\n",
              n, median(per_node), median(whole), median(inst));
  return 0;
}
