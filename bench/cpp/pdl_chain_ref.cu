// Plain CUDA C++ reference for a chain of N small kernels with and without programmatic
// dependent launch (PDL), as a C API, so that one process can time it and graphsmith turn by
// turn (crates/graphsmith-workloads/examples/pdl_chain.rs loads it as a shared library). The
// chain is captured from a stream: with PDL every launch after the first carries the
// programmatic stream-serialization attribute, so the captured graph joins the kernels with
// programmatic edges, and each kernel lets its dependent start at once and waits for its
// predecessor before touching the buffer (the same source as graphsmith's
// gs_pdl_add_scalar_f32). Runtime API only; every CUDA call is checked.
//
//   nvcc -O2 -arch=sm_90 -shared -Xcompiler -fPIC -o libpdl_chain_ref.so bench/cpp/pdl_chain_ref.cu
#include "../common.cuh"

// x[i] += a after waiting for the previous kernel (griddepcontrol: sm_90).
extern "C" __global__ void add_scalar_pdl(float* x, float a, unsigned n) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) x[i] += a;
}

struct PdlRef {
  int n;
  unsigned len;
  float* x;
  cudaStream_t stream;
  cudaEvent_t start, end;
  cudaGraphExec_t exec;
};

extern "C" {

// A chain of n kernels each adding 0.5 to a buffer of 256 floats, captured (with PDL when `pdl`
// is not 0), instantiated, uploaded and launched once. `stream` is used when not null.
PdlRef* pdl_ref_new(int n, int pdl, cudaStream_t stream) {
  PdlRef* c = new PdlRef();
  c->n = n;
  c->len = 256;
  CK(cudaMalloc(&c->x, c->len * sizeof(float)));
  if (stream)
    c->stream = stream;
  else
    CK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  CK(cudaEventCreate(&c->start));
  CK(cudaEventCreate(&c->end));
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < n; ++i) {
    float a = 0.5f;
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((c->len + 255) / 256);
    cfg.blockDim = dim3(256);
    cfg.stream = c->stream;
    cfg.attrs = &attr;
    cfg.numAttrs = (pdl && i > 0) ? 1 : 0;
    if (pdl)
      CK(cudaLaunchKernelEx(&cfg, add_scalar_pdl, c->x, a, c->len));
    else
      CK(cudaLaunchKernelEx(&cfg, add_scalar, c->x, a, c->len));
  }
  CK(cudaStreamEndCapture(c->stream, &g));
  CK(cudaGraphInstantiate(&c->exec, g, 0));
  CK(cudaGraphDestroy(g));
  CK(cudaGraphUpload(c->exec, c->stream));
  CK(cudaGraphLaunch(c->exec, c->stream));
  CK(cudaStreamSynchronize(c->stream));
  return c;
}

void pdl_ref_free(PdlRef* c, int own_stream) {
  CK(cudaStreamSynchronize(c->stream));
  CK(cudaGraphExecDestroy(c->exec));
  CK(cudaEventDestroy(c->start));
  CK(cudaEventDestroy(c->end));
  if (own_stream) CK(cudaStreamDestroy(c->stream));
  CK(cudaFree(c->x));
  delete c;
}

// Device time of one replay, between events recorded around it (the stream idle before).
double pdl_ref_replay(PdlRef* c) {
  CK(cudaEventRecord(c->start, c->stream));
  CK(cudaGraphLaunch(c->exec, c->stream));
  CK(cudaEventRecord(c->end, c->stream));
  CK(cudaEventSynchronize(c->end));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, c->start, c->end));
  return ms * 1e3;
}

// Sets every element to `start`, replays once, and returns 1 when every element equals `want`.
int pdl_ref_check(PdlRef* c, float start, float want) {
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
