// Shared helpers of the claim programs (bench/claims/claim_*.cu): on top of ../common.cuh
// (checked CUDA calls, host timer, medians, the benchmark's add kernel), checked calls whose
// result is the measurement, a spin kernel timed by the GPU's global timer, and the verdict line
// every program ends with:
//
//   CLAIM <id>: <measured outcome> -> <true|false|partly>
#pragma once
#include "../common.cuh"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// A CUDA call whose result is the measurement: returns the code, clears a non-sticky error.
#define TRY(call) try_call((call), #call)

inline cudaError_t try_call(cudaError_t e, const char* what) {
  std::printf("    %s -> %s\n", what, cudaGetErrorName(e));
  if (e != cudaSuccess) (void)cudaGetLastError();
  return e;
}

// The GPU's global nanosecond timer.
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Thread (0,0) busy-waits `ns` nanoseconds of GPU time; the other threads return.
__global__ void spin_ns(unsigned long long ns) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  unsigned long long t0 = global_ns();
  while (global_ns() - t0 < ns) {
  }
}

inline cudaKernelNodeParams add_params(void** args, unsigned blocks = 1, unsigned threads = 256) {
  cudaKernelNodeParams p = {};
  p.func = (void*)add_scalar;
  p.gridDim = dim3(blocks);
  p.blockDim = dim3(threads);
  p.sharedMemBytes = 0;
  p.kernelParams = args;
  p.extra = nullptr;
  return p;
}

// Launches a spin kernel of `ms` milliseconds on `s` between two timing events.
struct Spin {
  cudaEvent_t start, end;
  Spin() {
    CK(cudaEventCreate(&start));
    CK(cudaEventCreate(&end));
  }
  ~Spin() {
    cudaEventDestroy(start);
    cudaEventDestroy(end);
  }
  void launch(cudaStream_t s, double ms) {
    CK(cudaEventRecord(start, s));
    spin_ns<<<1, 32, 0, s>>>((unsigned long long)(ms * 1e6));
    CK(cudaGetLastError());
    CK(cudaEventRecord(end, s));
  }
  bool running() {
    cudaError_t e = cudaEventQuery(end);
    if (e == cudaErrorNotReady) return true;
    CK(e);
    return false;
  }
  double wait_ms() {
    CK(cudaEventSynchronize(end));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, start, end));
    return ms;
  }
};

inline void header(const char* id, const char* claim, const char* source) {
  int dev = 0, drv = 0, rt = 0;
  CK(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  CK(cudaDriverGetVersion(&drv));
  CK(cudaRuntimeGetVersion(&rt));
  std::printf("claim %s: \"%s\"\n  program: %s\n  GPU: %s (sm_%d%d), driver API %d.%d, runtime %d.%d\n", id, claim, source,
              prop.name, prop.major, prop.minor, drv / 1000, (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10);
}

// The verdict line; `fmt` describes the measured outcome with numbers.
inline void verdict(const char* id, const char* v, const char* fmt, ...) {
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::printf("CLAIM %s: %s -> %s\n", id, buf, v);
  std::fflush(stdout);
}

// A chain of `n` add kernels on `x`, built node by node.
inline cudaGraph_t build_chain(int n, float* x, float a, unsigned len, std::vector<cudaGraphNode_t>* nodes = nullptr) {
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t prev = nullptr;
  for (int i = 0; i < n; ++i) {
    void* args[] = {&x, &a, &len};
    cudaKernelNodeParams p = add_params(args, (len + 255) / 256);
    cudaGraphNode_t node;
    CK(cudaGraphAddKernelNode(&node, g, prev ? &prev : nullptr, prev ? 1 : 0, &p));
    if (nodes) nodes->push_back(node);
    prev = node;
  }
  return g;
}

inline std::vector<float> download(const float* d, size_t n) {
  std::vector<float> h(n, NAN); // poisoned: a copy that did not happen shows as NaN
  CK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}

inline void upload_fill(float* d, size_t n, float v) {
  std::vector<float> h(n, v);
  CK(cudaMemset(d, 0xff, n * sizeof(float))); // poison first: NaN
  CK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
}

inline bool all_equal(const std::vector<float>& v, float want) {
  for (float x : v)
    if (std::memcmp(&x, &want, sizeof(float)) != 0) return false;
  return true;
}
