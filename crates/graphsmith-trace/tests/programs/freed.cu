// A graph launched after memory it reads was freed, for `graphsmith trace --freed`'s GPU tests
// (tests/run_gpu.sh builds this with nvcc; tests/programs/expect.json says what each report
// must name). The LM-head case: a temporary weight is read by a captured graph, the weight is
// freed, and the graph is launched again. Usage: freed <case>:
//   pool   the weight comes from cudaMallocAsync and goes back with cudaFreeAsync; the default
//          pool keeps its memory (release threshold raised), so the late launch reads stale but
//          mapped memory and the run completes;
//   free   cudaMalloc / cudaFree: the late launch would read unmapped memory, so the program
//          exits right after cudaGraphLaunch returns (the tracer wrote its report line at the
//          launch's entry, before it ran);
//   clean  the twin: an unrelated buffer is freed before the launches, the weight only after
//          the last one; nothing to report.
// Every result is checked against the host (outputs poisoned with NaN first); the program
// prints "freed: <case> ok" when its launches that must compute did, and the weight's address
// and size as "freed: weight <address> <bytes>".

#include <cuda_runtime.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

static const int N = 1 << 18;
static const size_t BYTES = N * sizeof(float);

__global__ void lm_head(const float* w, const float* x, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = w[i] * x[i];
}

__global__ void fill(float* p, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

static int failures = 0;

static bool ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    printf("freed: %s -> %d %s\n", what, (int)e, cudaGetErrorName(e));
    ++failures;
    return false;
  }
  return true;
}

static void fill_async(float* p, float v, cudaStream_t s) {
  fill<<<(N + 255) / 256, 256, 0, s>>>(p, v, N);
  ok(cudaGetLastError(), "fill");
}

/// The graph: out = w * x, one kernel node.
static cudaGraphExec_t capture(const float* w, const float* x, float* out, cudaStream_t s) {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  if (!ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "begin capture")) return nullptr;
  lm_head<<<(N + 255) / 256, 256, 0, s>>>(w, x, out, N);
  ok(cudaGetLastError(), "lm_head");
  if (!ok(cudaStreamEndCapture(s, &g), "end capture")) return nullptr;
  ok(cudaGraphInstantiate(&exec, g, 0), "instantiate");
  ok(cudaGraphDestroy(g), "graph destroy");
  return exec;
}

/// Launches, waits and compares every element with w * x on the host (`out` poisoned first).
static void launch_and_check(cudaGraphExec_t exec, float* out, float w, float x, cudaStream_t s) {
  fill_async(out, NAN, s);
  ok(cudaGraphLaunch(exec, s), "graph launch");
  ok(cudaStreamSynchronize(s), "sync");
  std::vector<float> host(N);
  ok(cudaMemcpy(host.data(), out, BYTES, cudaMemcpyDeviceToHost), "copy back");
  for (int i = 0; i < N; ++i) {
    if (host[i] != w * x) {
      printf("freed: out[%d] = %g, expected %g\n", i, host[i], w * x);
      ++failures;
      return;
    }
  }
}

static void print_weight(const float* w) {
  printf("freed: weight %p %zu\n", (const void*)w, BYTES);
  fflush(stdout);
}

__attribute__((noinline)) int case_pool(cudaStream_t s, float* x, float* out) {
  cudaMemPool_t pool;
  if (!ok(cudaDeviceGetDefaultMemPool(&pool, 0), "default pool")) return 1;
  uint64_t keep = UINT64_MAX;
  ok(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "release threshold");
  float* w = nullptr;
  if (!ok(cudaMallocAsync((void**)&w, BYTES, s), "cudaMallocAsync weight")) return 1;
  fill_async(w, 3.0f, s);
  cudaGraphExec_t exec = capture(w, x, out, s);
  if (!exec) return 1;
  launch_and_check(exec, out, 3.0f, 2.0f, s);
  print_weight(w);
  ok(cudaFreeAsync(w, s), "cudaFreeAsync weight");
  ok(cudaStreamSynchronize(s), "sync after free");
  // Reported at the launch's entry; the pool still maps the bytes, so the launch completes.
  ok(cudaGraphLaunch(exec, s), "late graph launch");
  ok(cudaStreamSynchronize(s), "sync after the late launch");
  ok(cudaGraphExecDestroy(exec), "exec destroy");
  return 0;
}

__attribute__((noinline)) int case_free(cudaStream_t s, float* x, float* out) {
  float* w = nullptr;
  if (!ok(cudaMalloc((void**)&w, BYTES), "cudaMalloc weight")) return 1;
  fill_async(w, 3.0f, s);
  cudaGraphExec_t exec = capture(w, x, out, s);
  if (!exec) return 1;
  launch_and_check(exec, out, 3.0f, 2.0f, s);
  printf("freed: free %s\n", failures == 0 ? "ok" : "FAILED");
  print_weight(w);
  ok(cudaFree(w), "cudaFree weight");
  ok(cudaGraphLaunch(exec, s), "late graph launch");
  // The launch would read unmapped memory: leave before it can fault. The tracer's report
  // line was written at the launch's entry.
  fflush(stdout);
  _exit(failures == 0 ? 0 : 1);
}

__attribute__((noinline)) int case_clean(cudaStream_t s, float* x, float* out) {
  float *w = nullptr, *scratch = nullptr;
  if (!ok(cudaMalloc((void**)&w, BYTES), "cudaMalloc weight")) return 1;
  if (!ok(cudaMalloc((void**)&scratch, BYTES), "cudaMalloc scratch")) return 1;
  fill_async(w, 3.0f, s);
  fill_async(scratch, 7.0f, s);
  cudaGraphExec_t exec = capture(w, x, out, s);
  if (!exec) return 1;
  launch_and_check(exec, out, 3.0f, 2.0f, s);
  print_weight(w);
  ok(cudaFree(scratch), "cudaFree scratch");  // no node touches it
  for (int i = 0; i < 3; ++i) launch_and_check(exec, out, 3.0f, 2.0f, s);
  ok(cudaGraphExecDestroy(exec), "exec destroy");
  ok(cudaFree(w), "cudaFree weight");  // after the last launch
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: freed pool|free|clean\n");
    return 2;
  }
  const char* c = argv[1];
  cudaStream_t s;
  if (!ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream")) return 1;
  float *x = nullptr, *out = nullptr;
  if (!ok(cudaMalloc((void**)&x, BYTES), "cudaMalloc x")) return 1;
  if (!ok(cudaMalloc((void**)&out, BYTES), "cudaMalloc out")) return 1;
  fill_async(x, 2.0f, s);
  int r;
  if (!strcmp(c, "pool")) {
    r = case_pool(s, x, out);
  } else if (!strcmp(c, "free")) {
    r = case_free(s, x, out);
  } else if (!strcmp(c, "clean")) {
    r = case_clean(s, x, out);
  } else {
    fprintf(stderr, "freed: unknown case %s\n", c);
    return 2;
  }
  ok(cudaFree(x), "cudaFree x");
  ok(cudaFree(out), "cudaFree out");
  printf("freed: %s %s\n", c, r == 0 && failures == 0 ? "ok" : "FAILED");
  return r == 0 && failures == 0 ? 0 : 1;
}
