// Claim c, as found in CUDA-graph tutorials and posts:
// a pattern shown as correct changes a kernel node of the *graph*
// (cudaGraphKernelNodeSetParams, e.g. a new gridDim.x) after instantiation and relaunches the
// old *executable*, implying that the executable sees the change.
//
// Method: a one-node graph (x += a, a = 1, 1 block) instantiated once. Change the template's
// node to a = 100 and 4 blocks, relaunch the executable and read the result and the grid size
// the kernel actually ran with. Then the two ways that do reach an executable:
// cudaGraphExecKernelNodeSetParams, and cudaGraphExecUpdate from the changed template.
#include "common.cuh"

static const unsigned LEN = 256;

// x[i] += a, and records the grid size it ran with.
__global__ void add_and_record_grid(float* x, float a, unsigned n, unsigned* grid) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *grid = gridDim.x;
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) x[i] += a;
}

struct Node {
  float* x;
  float a;
  unsigned n;
  unsigned* grid;
  void* args[4];
  cudaKernelNodeParams params(unsigned blocks) {
    args[0] = &x;
    args[1] = &a;
    args[2] = &n;
    args[3] = &grid;
    cudaKernelNodeParams p = {};
    p.func = (void*)add_and_record_grid;
    p.gridDim = dim3(blocks);
    p.blockDim = dim3(256);
    p.kernelParams = args;
    return p;
  }
};

int main() {
  header("c", "a template update (cudaGraphKernelNodeSetParams after instantiation) is seen by the executable",
         "bench/claims/claim_c_template_update.cu");
  float* x;
  unsigned* grid;
  CK(cudaMalloc(&x, LEN * sizeof(float)));
  CK(cudaMalloc(&grid, sizeof(unsigned)));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  Node nd{x, 1.0f, LEN, grid, {}};
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t node;
  cudaKernelNodeParams p = nd.params(1);
  CK(cudaGraphAddKernelNode(&node, g, nullptr, 0, &p));
  cudaGraphExec_t e;
  CK(cudaGraphInstantiate(&e, g, 0));

  auto run = [&](const char* what) {
    upload_fill(x, LEN, 0.0f);
    CK(cudaMemset(grid, 0, sizeof(unsigned)));
    CK(cudaGraphLaunch(e, s));
    CK(cudaStreamSynchronize(s));
    std::vector<float> h = download(x, LEN);
    unsigned gr = 0;
    CK(cudaMemcpy(&gr, grid, sizeof gr, cudaMemcpyDeviceToHost));
    bool uniform = all_equal(h, h[0]);
    std::printf("  %-72s x = %g%s, grid = %u\n", what, h[0], uniform ? "" : " (not uniform!)", gr);
    return std::make_pair(h[0], gr);
  };

  auto base = run("instantiated with a = 1, 1 block; launch:");

  // The pattern under test: change the template's node, relaunch the old executable.
  nd.a = 100.0f;
  p = nd.params(4);
  CK(cudaGraphKernelNodeSetParams(node, &p));
  cudaKernelNodeParams back = {};
  CK(cudaGraphKernelNodeGetParams(node, &back));
  std::printf("  template node now: a = %g, gridDim.x = %u (read back with cudaGraphKernelNodeGetParams)\n",
              *static_cast<float*>(back.kernelParams[1]), back.gridDim.x);
  auto tmpl = run("after cudaGraphKernelNodeSetParams(template, a = 100, 4 blocks); launch exec:");
  bool template_seen = tmpl.first == 100.0f || tmpl.second == 4;

  // The executable-side update.
  nd.a = 50.0f;
  p = nd.params(2);
  cudaError_t set_rc = TRY(cudaGraphExecKernelNodeSetParams(e, node, &p));
  auto exec_set = run("after cudaGraphExecKernelNodeSetParams(exec, a = 50, 2 blocks); launch exec:");

  // Whole-graph update from the changed template (a = 100, 4 blocks).
  cudaGraphExecUpdateResultInfo info = {};
  cudaError_t upd_rc = TRY(cudaGraphExecUpdate(e, g, &info));
  auto exec_upd = run("after cudaGraphExecUpdate(exec, template); launch exec:");

  // A fresh instantiation of the template, for completeness.
  cudaGraphExec_t e2;
  CK(cudaGraphInstantiate(&e2, g, 0));
  std::swap(e, e2);
  auto fresh = run("a fresh cudaGraphInstantiate of the template; launch it:");
  std::swap(e, e2);

  bool exec_paths_work = exec_set.first == 50.0f && exec_set.second == 2 && exec_upd.first == 100.0f &&
                         exec_upd.second == 4 && fresh.first == 100.0f;
  if (!template_seen && exec_paths_work && base.first == 1.0f)
    verdict("c", "false",
            "after the template was set to a = 100 on 4 blocks the old executable still computed x = %g on %u block(s); "
            "the change reached an executable only through cudaGraphExecKernelNodeSetParams (x = %g, %u blocks), "
            "cudaGraphExecUpdate (x = %g, %u blocks) or a new instantiation (x = %g)",
            tmpl.first, tmpl.second, exec_set.first, exec_set.second, exec_upd.first, exec_upd.second, fresh.first);
  else if (template_seen)
    verdict("c", "true", "the executable computed x = %g on %u blocks after the template update", tmpl.first, tmpl.second);
  else
    verdict("c", "false",
            "the old executable did not see the template update (x = %g on %u block(s)); of the executable-side paths, "
            "cudaGraphExecKernelNodeSetParams returned %s (then x = %g, %u blocks), cudaGraphExecUpdate %s (x = %g, %u "
            "blocks), a fresh instantiation gave x = %g",
            tmpl.first, tmpl.second, cudaGetErrorName(set_rc), exec_set.first, exec_set.second, cudaGetErrorName(upd_rc),
            exec_upd.first, exec_upd.second, fresh.first);

  CK(cudaGraphExecDestroy(e));
  CK(cudaGraphExecDestroy(e2));
  CK(cudaGraphDestroy(g));
  CK(cudaStreamDestroy(s));
  CK(cudaFree(x));
  CK(cudaFree(grid));
  return 0;
}
