// Claim b, as found in CUDA-graph tutorials and posts:
// "cudaStreamCreate(&s); cudaStreamDestroy(s);
// cudaGraphCreate(&graph, 0); // fails: the destroyed stream invalidates the context."
//
// Method: do exactly that and report the return codes; then build, instantiate and launch a
// graph on a new stream and check its result. Also: destroy a stream that still has a kernel
// queued, then create a graph; and (in a child process, since what follows a destroyed
// capturing stream is the driver's business) destroy a stream in the middle of a capture and
// report every code, including whether the context still works afterwards.
#include <sys/wait.h>

#include "common.cuh"

static const unsigned LEN = 256;

static int child_destroy_during_capture() {
  CK(cudaFree(nullptr));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float* x;
  CK(cudaMalloc(&x, LEN * sizeof(float)));
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  add_scalar<<<1, 256, 0, s>>>(x, 1.0f, LEN);
  std::printf("    launch into the capture -> %s\n", cudaGetErrorName(cudaGetLastError()));
  cudaError_t d = TRY(cudaStreamDestroy(s));
  cudaGraph_t g = nullptr;
  cudaError_t c = TRY(cudaGraphCreate(&g, 0));
  if (c == cudaSuccess) CK(cudaGraphDestroy(g));
  // Does the context still work? A fresh stream, a kernel, a synchronize.
  cudaStream_t s2;
  cudaError_t n = TRY(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaError_t k = cudaErrorUnknown;
  if (n == cudaSuccess) {
    add_scalar<<<1, 256, 0, s2>>>(x, 1.0f, LEN);
    k = TRY(cudaGetLastError());
    k = k == cudaSuccess ? TRY(cudaStreamSynchronize(s2)) : k;
  }
  std::printf("RESULT destroy=%s create=%s context_ok=%d\n", cudaGetErrorName(d), cudaGetErrorName(c),
              n == cudaSuccess && k == cudaSuccess);
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--child-destroy-during-capture") == 0) return child_destroy_during_capture();
  header("b", "destroying a stream before cudaGraphCreate makes graph creation fail",
         "bench/claims/claim_b_destroyed_stream.cu");

  // 1. The claim's exact sequence.
  std::printf("  1. the claim's sequence:\n");
  cudaStream_t s;
  TRY(cudaStreamCreate(&s));
  TRY(cudaStreamDestroy(s));
  cudaGraph_t g = nullptr;
  cudaError_t create = TRY(cudaGraphCreate(&g, 0));
  bool works = false;
  if (create == cudaSuccess) {
    float* x;
    CK(cudaMalloc(&x, LEN * sizeof(float)));
    upload_fill(x, LEN, 1.0f);
    float a = 2.0f;
    unsigned len = LEN;
    void* args[] = {&x, &a, &len};
    cudaKernelNodeParams p = add_params(args);
    cudaGraphNode_t node;
    CK(cudaGraphAddKernelNode(&node, g, nullptr, 0, &p));
    cudaGraphExec_t e;
    CK(cudaGraphInstantiate(&e, g, 0));
    cudaStream_t s2;
    CK(cudaStreamCreate(&s2));
    CK(cudaGraphLaunch(e, s2));
    CK(cudaStreamSynchronize(s2));
    works = all_equal(download(x, LEN), 3.0f);
    std::printf("    graph built on it, instantiated, launched on a new stream: result %s\n", works ? "correct (1 + 2 = 3)" : "WRONG");
    CK(cudaGraphExecDestroy(e));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(s2));
    CK(cudaFree(x));
  }

  // 2. A stream destroyed while a kernel is still queued on it.
  std::printf("  2. destroy a stream with a 100 ms kernel still running, then cudaGraphCreate:\n");
  cudaStream_t busy;
  CK(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking));
  Spin spin;
  spin.launch(busy, 100);
  TRY(cudaStreamDestroy(busy));
  cudaGraph_t g2 = nullptr;
  cudaError_t create2 = TRY(cudaGraphCreate(&g2, 0));
  std::printf("    the kernel finished normally: %.0f ms\n", spin.wait_ms());
  if (create2 == cudaSuccess) CK(cudaGraphDestroy(g2));

  // 3. A stream destroyed in the middle of a capture (child process).
  std::printf("  3. destroy a stream during a capture (child process):\n");
  std::fflush(stdout);
  std::string cmd = std::string("\"") + argv[0] + "\" --child-destroy-during-capture 2>&1";
  FILE* child = popen(cmd.c_str(), "r");
  std::string result = "child did not report";
  if (child) {
    char line[512];
    while (std::fgets(line, sizeof line, child)) {
      std::printf("  %s", line);
      if (std::strncmp(line, "RESULT ", 7) == 0) result = std::string(line + 7, std::strcspn(line + 7, "\n"));
    }
    int status = pclose(child);
    if (WIFSIGNALED(status)) result += " (child killed by signal " + std::to_string(WTERMSIG(status)) + ")";
    else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) result += " (child exit " + std::to_string(WEXITSTATUS(status)) + ")";
  }

  if (create == cudaSuccess && works && create2 == cudaSuccess)
    verdict("b", "false",
            "cudaGraphCreate after cudaStreamDestroy returned cudaSuccess and the graph built on it ran correctly "
            "(cudaGraphCreate takes no stream); with a kernel still queued on the destroyed stream: %s; "
            "destroying a stream mid-capture: %s",
            cudaGetErrorName(create2), result.c_str());
  else
    verdict("b", "true", "cudaGraphCreate after cudaStreamDestroy returned %s (graph ran correctly: %d); queued case %s",
            cudaGetErrorName(create), works, cudaGetErrorName(create2));
  return 0;
}
