// Helpers shared by every CUDA C++ benchmark and claim program: checked CUDA calls, a host
// timer, medians, and the benchmark's kernel (the same source as graphsmith's
// gs_add_scalar_f32 in kernels/graphsmith_kernels.cu).
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

// A CUDA call that must succeed: otherwise the program says where and exits 1.
#define CK(call)                                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_), \
                   cudaGetErrorString(e_));                                                       \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

inline double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// x[i] += a, grid-stride loop.
extern "C" __global__ void add_scalar(float* x, float a, unsigned n) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) x[i] += a;
}
