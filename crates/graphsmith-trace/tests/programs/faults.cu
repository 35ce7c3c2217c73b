// Planted capture faults for graphsmith trace's GPU tests (tests/run_gpu.sh builds this with
// nvcc and runs each case under `graphsmith trace`; tests/programs/expect.json says what each
// report must name). Usage: faults <case>. Errors are printed and ignored: the program always
// carries on to the end of its case, as a careless application would.
//
// NVTX ranges (NVTX3, header-only) are pushed around every phase so the reports can be checked
// for the range stack at the failing call: "case:<name>" > "capture" > "fault". The main thread
// is named gs-main, helper threads gs-worker.

#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

__global__ void inc(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}

__global__ void scale(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.0f;
}

static const int N = 1 << 16;
static float* buf = nullptr;

static void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) printf("faults: %s -> %d %s\n", what, (int)e, cudaGetErrorName(e));
}

struct Range {
  explicit Range(const char* name) { nvtxRangePushA(name); }
  ~Range() { nvtxRangePop(); }
};

static void launch(cudaStream_t s) {
  inc<<<(N + 255) / 256, 256, 0, s>>>(buf, N);
  check(cudaGetLastError(), "launch");
}

static cudaStream_t stream(bool blocking = false) {
  cudaStream_t s;
  check(blocking ? cudaStreamCreate(&s) : cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
        "stream create");
  return s;
}

static void begin(cudaStream_t s, cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal) {
  check(cudaStreamBeginCapture(s, mode), "begin capture");
}

static cudaGraph_t end(cudaStream_t s) {
  cudaGraph_t g = nullptr;
  check(cudaStreamEndCapture(s, &g), "end capture");
  return g;
}

static void replay(cudaGraph_t g, cudaStream_t s, int times) {
  if (!g) return;
  cudaGraphExec_t exec;
  check(cudaGraphInstantiate(&exec, g, 0), "instantiate");
  for (int i = 0; i < times; ++i) check(cudaGraphLaunch(exec, s), "graph launch");
  check(cudaStreamSynchronize(s), "sync after replay");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
}

// The 2-D copy of crates/graphsmith/tests/gpu_readback_copies.rs: 6 rows of 100 bytes, from
// (x 16, y 2) of a source with a 512-byte pitch into (x 8, y 5) of a destination with a 256-byte
// pitch (16 rows each). Prints the destination and the byte range of it the copy writes, as the
// host computes it: offset x + y * pitch, length (rows - 1) * pitch + width.
static const size_t C2_SRC_PITCH = 512, C2_DST_PITCH = 256, C2_WIDTH = 100, C2_HEIGHT = 6;
static const size_t C2_SRC_X = 16, C2_SRC_Y = 2, C2_DST_X = 8, C2_DST_Y = 5, C2_ROWS = 16;

static void copy_2d(void* src, void* dst, cudaStream_t s) {
  cudaMemcpy3DParms p;
  memset(&p, 0, sizeof p);
  p.srcPtr = make_cudaPitchedPtr(src, C2_SRC_PITCH, C2_SRC_PITCH, C2_ROWS);
  p.srcPos = make_cudaPos(C2_SRC_X, C2_SRC_Y, 0);
  p.dstPtr = make_cudaPitchedPtr(dst, C2_DST_PITCH, C2_DST_PITCH, C2_ROWS);
  p.dstPos = make_cudaPos(C2_DST_X, C2_DST_Y, 0);
  p.extent = make_cudaExtent(C2_WIDTH, C2_HEIGHT, 1);
  p.kind = cudaMemcpyDeviceToDevice;
  check(cudaMemcpy3DAsync(&p, s), "2-D copy");
}

static void print_copy_2d(void* dst) {
  printf("faults: copy-2d dst %p\n", dst);
  printf("faults: copy-2d range %zu %zu\n", C2_DST_X + C2_DST_Y * C2_DST_PITCH,
         (C2_HEIGHT - 1) * C2_DST_PITCH + C2_WIDTH);
}

static void worker(void (*body)(cudaStream_t), cudaStream_t s) {
  std::thread t([=] {
    pthread_setname_np(pthread_self(), "gs-worker");
    Range w("worker");
    body(s);
  });
  t.join();
}

static int run(const char* c) {
  cudaStream_t s = stream(), s2 = stream();
  cudaEvent_t e;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event create");
  Range whole((std::string("case:") + c).c_str());
  if (!strcmp(c, "stream-sync")) {
    Range r("capture");
    begin(s);
    launch(s);
    { Range f("fault"); check(cudaStreamSynchronize(s), "stream sync in capture"); }
    launch(s);
    end(s);
  } else if (!strcmp(c, "event-query") || !strcmp(c, "event-sync")) {
    Range r("capture");
    begin(s);
    launch(s);
    check(cudaEventRecord(e, s), "record in capture");
    {
      Range f("fault");
      check(!strcmp(c, "event-query") ? cudaEventQuery(e) : cudaEventSynchronize(e), "event");
    }
    end(s);
  } else if (!strcmp(c, "alloc-global")) {
    Range r("capture");
    begin(s);
    launch(s);
    void* p = nullptr;
    { Range f("fault"); check(cudaMalloc(&p, 1 << 20), "malloc in capture"); }
    end(s);
  } else if (!strcmp(c, "alloc-thread")) {
    Range r("capture");
    begin(s);
    launch(s);
    worker([](cudaStream_t) {
      Range f("fault");
      void* p = nullptr;
      check(cudaMalloc(&p, 1 << 20), "malloc on another thread");
    }, s);
    end(s);
  } else if (!strcmp(c, "end-thread")) {
    Range r("capture");
    begin(s);
    launch(s);
    worker([](cudaStream_t st) {
      Range f("fault");
      cudaGraph_t g = nullptr;
      check(cudaStreamEndCapture(st, &g), "end capture on another thread");
    }, s);
    end(s);
  } else if (!strcmp(c, "wait-outside")) {
    launch(s2);
    check(cudaEventRecord(e, s2), "record outside capture");
    Range r("capture");
    begin(s);
    launch(s);
    { Range f("fault"); check(cudaStreamWaitEvent(s, e, 0), "wait on uncaptured event"); }
    end(s);
  } else if (!strcmp(c, "unjoined-fork")) {
    Range r("capture");
    begin(s);
    launch(s);
    check(cudaEventRecord(e, s), "fork record");
    check(cudaStreamWaitEvent(s2, e, 0), "fork wait");
    { Range side("side"); launch(s2); }
    { Range f("fault"); end(s); }
  } else if (!strcmp(c, "escape")) {
    cudaGraph_t g;
    {
      Range r("capture");
      begin(s);
      launch(s);
      { Range f("fault"); launch(s2); }
      launch(s);
      g = end(s);
    }
    replay(g, s, 5);
  } else if (!strcmp(c, "legacy-implicit")) {
    cudaStream_t b = stream(true);
    Range r("capture");
    begin(b);
    launch(b);
    { Range f("fault"); launch(0); }
    end(b);
  } else if (!strcmp(c, "merge")) {
    cudaEvent_t e2;
    check(cudaEventCreateWithFlags(&e2, cudaEventDisableTiming), "event create");
    Range r("capture");
    begin(s);
    begin(s2);
    launch(s2);
    check(cudaEventRecord(e2, s2), "record in the other capture");
    { Range f("fault"); check(cudaStreamWaitEvent(s, e2, 0), "wait across captures"); }
    end(s2);
    end(s);
  } else if (!strcmp(c, "race")) {
    // A planted data race, for --hazards: after a fork, inc on s and scale on s2 both write buf
    // and no edge orders them (the join comes after both). The capture itself is valid.
    printf("faults: race buffer %p\n", (void*)buf);
    cudaGraph_t g;
    {
      Range r("capture");
      begin(s);
      launch(s);
      check(cudaEventRecord(e, s), "fork record");
      check(cudaStreamWaitEvent(s2, e, 0), "fork wait");
      {
        Range f("fault");
        launch(s);
        scale<<<(N + 255) / 256, 256, 0, s2>>>(buf, N);
        check(cudaGetLastError(), "launch scale");
      }
      cudaEvent_t j;
      check(cudaEventCreateWithFlags(&j, cudaEventDisableTiming), "event create");
      check(cudaEventRecord(j, s2), "join record");
      check(cudaStreamWaitEvent(s, j, 0), "join wait");
      launch(s);
      g = end(s);
    }
    replay(g, s, 5);
  } else if (!strcmp(c, "race-2d") || !strcmp(c, "clean-2d")) {
    // The 2-D copy with a planted race on the rows it writes: a memset of the whole destination
    // on a forked stream, which no edge orders against the copy (race-2d); its fixed twin runs
    // the memset before the copy on one stream (clean-2d).
    bool race = !strcmp(c, "race-2d");
    void *src = nullptr, *dst = nullptr;
    check(cudaMalloc(&src, C2_SRC_PITCH * C2_ROWS), "malloc src");
    check(cudaMalloc(&dst, C2_DST_PITCH * C2_ROWS), "malloc dst");
    check(cudaMemset(src, 7, C2_SRC_PITCH * C2_ROWS), "fill src");
    check(cudaDeviceSynchronize(), "fill src sync");
    print_copy_2d(dst);
    cudaGraph_t g;
    {
      Range r("capture");
      begin(s);
      if (race) {
        check(cudaEventRecord(e, s), "fork record");
        check(cudaStreamWaitEvent(s2, e, 0), "fork wait");
        {
          Range f("fault");
          check(cudaMemsetAsync(dst, 0, C2_DST_PITCH * C2_ROWS, s2), "memset dst");
          copy_2d(src, dst, s);
        }
        cudaEvent_t j;
        check(cudaEventCreateWithFlags(&j, cudaEventDisableTiming), "event create");
        check(cudaEventRecord(j, s2), "join record");
        check(cudaStreamWaitEvent(s, j, 0), "join wait");
      } else {
        check(cudaMemsetAsync(dst, 0, C2_DST_PITCH * C2_ROWS, s), "memset dst");
        copy_2d(src, dst, s);
      }
      g = end(s);
    }
    replay(g, s, 1);
    // The copy ran: in clean-2d the first copied byte holds the source's 7 (the memset before
    // it left 0); in race-2d it depends on which of the two unordered nodes ran last.
    unsigned char first = 0;
    check(cudaMemcpy(&first, (char*)dst + C2_DST_X + C2_DST_Y * C2_DST_PITCH, 1,
                     cudaMemcpyDeviceToHost),
          "read back");
    printf("faults: copy-2d first byte %d\n", (int)first);
  } else if (!strcmp(c, "clean")) {
    cudaGraph_t g;
    {
      Range r("capture");
      begin(s);
      launch(s);
      check(cudaMemsetAsync(buf, 0, sizeof(float) * N, s), "memset");
      check(cudaEventRecord(e, s), "fork");
      check(cudaStreamWaitEvent(s2, e, 0), "fork wait");
      launch(s2);
      cudaEvent_t j;
      check(cudaEventCreateWithFlags(&j, cudaEventDisableTiming), "event create");
      check(cudaEventRecord(j, s2), "join record");
      check(cudaStreamWaitEvent(s, j, 0), "join wait");
      launch(s);
      g = end(s);
    }
    replay(g, s, 10);
  } else if (!strcmp(c, "crash")) {
    Range r("capture");
    begin(s);
    launch(s);
    { Range f("fault"); fflush(stdout); raise(SIGSEGV); }
  } else if (!strcmp(c, "exit-in-capture")) {
    Range r("capture");
    begin(s);
    launch(s);
    { Range f("fault"); fflush(stdout); exit(3); }
  } else {
    fprintf(stderr, "faults: unknown case %s\n", c);
    return 2;
  }
  printf("faults: %s done\n", c);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: faults <case>\n");
    return 2;
  }
  pthread_setname_np(pthread_self(), "gs-main");
  check(cudaMalloc(&buf, sizeof(float) * N), "malloc");
  check(cudaDeviceSynchronize(), "warm up");
  return run(argv[1]);
}
