// Plain CUDA C++ reference for `graphsmith bench` (bench/SCHEMA.md): chains of N small kernels
// and a fork/join graph; eager submit and device time; capture, instantiate, upload; replay
// submit and device time; per-node update, whole-graph update, re-instantiation. Every CUDA
// call is checked. Prints one JSON object per (workload, N) on stdout, progress on stderr.
//
//   nvcc -O2 -arch=sm_90 -o graph_bench bench/cpp/graph_bench.cu
//   ./graph_bench 10,100,1000,10000 auto chain,forkjoin
#include <cstring>
#include <string>

#include "../common.cuh"

static const unsigned LEN = 256;     // floats per buffer
static const unsigned THREADS = 256; // one block of 256 threads
static const int BRANCHES = 4;       // fork/join branches

struct Work {
  bool forkjoin;
  int nodes;                       // N as asked
  cudaStream_t main;
  cudaStream_t side[BRANCHES - 1]; // streams of branches 1..3
  cudaEvent_t fork_ev;
  cudaEvent_t join_ev[BRANCHES - 1];
  float* buf[BRANCHES];            // buffer k of branch k (chain uses buf[0] only)

  int per_branch() const { return nodes / BRANCHES; }
  int kernels() const { return forkjoin ? BRANCHES * per_branch() + 2 : nodes; }

  void launch(float* x, float a, cudaStream_t s) {
    add_scalar<<<(LEN + THREADS - 1) / THREADS, THREADS, 0, s>>>(x, a, LEN);
    CK(cudaGetLastError());
  }

  // Issues one run: eagerly, or into a capture that is open on `main`.
  void issue(float a) {
    if (!forkjoin) {
      for (int i = 0; i < nodes; ++i) launch(buf[0], a, main);
      return;
    }
    launch(buf[0], a, main); // root
    CK(cudaEventRecord(fork_ev, main));
    for (int k = 1; k < BRANCHES; ++k) CK(cudaStreamWaitEvent(side[k - 1], fork_ev, 0));
    for (int k = 0; k < BRANCHES; ++k) {
      cudaStream_t s = k == 0 ? main : side[k - 1];
      for (int i = 0; i < per_branch(); ++i) launch(buf[k], a, s);
    }
    for (int k = 1; k < BRANCHES; ++k) {
      CK(cudaEventRecord(join_ev[k - 1], side[k - 1]));
      CK(cudaStreamWaitEvent(main, join_ev[k - 1], 0));
    }
    launch(buf[0], a, main); // join
  }

  cudaGraph_t capture(float a) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(main, cudaStreamCaptureModeThreadLocal));
    issue(a);
    CK(cudaStreamEndCapture(main, &g));
    return g;
  }

  int buffers() const { return forkjoin ? BRANCHES : 1; }

  // Each buffer's value after one run from 1.0, computed on the host in the GPU's order.
  std::vector<float> expected(float a) const {
    auto add = [a](float v, int times) {
      for (int i = 0; i < times; ++i) v += a;
      return v;
    };
    if (!forkjoin) return {add(1.0f, nodes)};
    std::vector<float> out(BRANCHES);
    out[0] = add(add(add(1.0f, 1), per_branch()), 1);
    for (int k = 1; k < BRANCHES; ++k) out[k] = add(1.0f, per_branch());
    return out;
  }

  void reset(float value) {
    std::vector<float> h(LEN, value);
    for (int k = 0; k < buffers(); ++k) {
      CK(cudaMemsetAsync(buf[k], 0xff, LEN * sizeof(float), main)); // poison: NaN
      CK(cudaMemcpyAsync(buf[k], h.data(), LEN * sizeof(float), cudaMemcpyHostToDevice, main));
    }
    CK(cudaStreamSynchronize(main));
  }

  bool check(float a) {
    std::vector<float> want = expected(a);
    bool ok = true;
    for (int k = 0; k < buffers(); ++k) {
      std::vector<float> h(LEN, NAN);
      CK(cudaMemcpy(h.data(), buf[k], LEN * sizeof(float), cudaMemcpyDeviceToHost));
      for (unsigned i = 0; i < LEN; ++i) {
        if (std::memcmp(&h[i], &want[k], sizeof(float)) != 0) {
          if (ok) std::fprintf(stderr, "  mismatch: buffer %d element %u: got %g, want %g\n", k, i, h[i], want[k]);
          ok = false;
        }
      }
    }
    return ok;
  }
};

struct Timing {
  double submit_us, device_us;
};

// Medians of `reps` runs after `warmup`; each run: start event, host timer, work, host timer,
// end event, wait for the end event.
template <class F>
static Timing time_region(cudaStream_t s, cudaEvent_t start, cudaEvent_t end, int warmup, int reps, F work) {
  for (int i = 0; i < warmup; ++i) work();
  CK(cudaStreamSynchronize(s));
  std::vector<double> submit, device;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(start, s));
    double t0 = now_us();
    work();
    submit.push_back(now_us() - t0);
    CK(cudaEventRecord(end, s));
    CK(cudaEventSynchronize(end));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, start, end));
    device.push_back(ms * 1e3);
  }
  return {median(submit), median(device)};
}

struct KernelNode {
  cudaGraphNode_t node;
  float* buf;
};

// The kernel nodes of `g` and the buffer each one adds to (its first argument).
static std::vector<KernelNode> kernel_nodes(cudaGraph_t g) {
  size_t n = 0;
  CK(cudaGraphGetNodes(g, nullptr, &n));
  std::vector<cudaGraphNode_t> all(n);
  CK(cudaGraphGetNodes(g, all.data(), &n));
  std::vector<KernelNode> out;
  for (cudaGraphNode_t node : all) {
    cudaGraphNodeType t;
    CK(cudaGraphNodeGetType(node, &t));
    if (t != cudaGraphNodeTypeKernel) continue;
    cudaKernelNodeParams p = {};
    CK(cudaGraphKernelNodeGetParams(node, &p));
    float* buf = *static_cast<float**>(p.kernelParams[0]);
    out.push_back({node, buf});
  }
  return out;
}

static void print_row(const char* workload, const Work& w, int reps, double v[12], bool correct) {
  static const char* names[12] = {"eager_submit_us", "eager_device_us", "capture_us", "instantiate_us",
                                  "upload_us", "replay_submit_us", "replay_device_us", "per_node_update_us",
                                  "whole_graph_update_us", "reinstantiate_us", "first_replay_us", nullptr};
  std::printf("{\"impl\": \"cuda-c++\", \"workload\": \"%s\", \"nodes\": %d, \"kernels\": %d, \"reps\": %d", workload,
              w.nodes, w.kernels(), reps);
  for (int i = 0; names[i]; ++i) {
    if (std::isnan(v[i]))
      std::printf(", \"%s\": null", names[i]);
    else
      std::printf(", \"%s\": %.3f", names[i], v[i]);
  }
  std::printf(", \"correct\": %s}\n", correct ? "true" : "false");
  std::fflush(stdout);
}

static void bench(const char* workload, int nodes, int reps) {
  Work w = {};
  w.forkjoin = std::strcmp(workload, "forkjoin") == 0;
  w.nodes = nodes;
  CK(cudaStreamCreateWithFlags(&w.main, cudaStreamNonBlocking));
  for (int k = 0; k < BRANCHES - 1; ++k) {
    CK(cudaStreamCreateWithFlags(&w.side[k], cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&w.join_ev[k], cudaEventDisableTiming));
  }
  CK(cudaEventCreateWithFlags(&w.fork_ev, cudaEventDisableTiming));
  for (int k = 0; k < BRANCHES; ++k) w.buf[k] = nullptr;
  for (int k = 0; k < w.buffers(); ++k) CK(cudaMalloc(&w.buf[k], LEN * sizeof(float)));
  w.reset(1.0f);
  cudaEvent_t start, end;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&end));
  double v[12];
  for (double& x : v) x = NAN;
  auto progress = [&](const char* phase) {
    std::fprintf(stderr, "[cuda-c++] %s N=%d: %s\n", workload, nodes, phase);
  };

  progress("eager");
  Timing eager = time_region(w.main, start, end, 3, reps, [&] { w.issue(0.5f); });
  v[0] = eager.submit_us;
  v[1] = eager.device_us;

  progress("capture");
  int few = std::min(reps, 5);
  std::vector<double> cap;
  cudaGraph_t graph_a = nullptr;
  for (int r = 0; r < few + 1; ++r) {
    if (graph_a) CK(cudaGraphDestroy(graph_a));
    double t0 = now_us();
    graph_a = w.capture(0.5f);
    if (r > 0) cap.push_back(now_us() - t0);
  }
  v[2] = median(cap);
  cudaGraph_t graph_b = w.capture(0.25f);

  progress("instantiate, upload, first replay");
  std::vector<double> inst, upl, first;
  for (int r = 0; r < few + 1; ++r) {
    cudaGraphExec_t e;
    double t0 = now_us();
    CK(cudaGraphInstantiate(&e, graph_a, 0));
    double t1 = now_us();
    CK(cudaGraphUpload(e, w.main));
    CK(cudaStreamSynchronize(w.main));
    double t2 = now_us();
    CK(cudaGraphExecDestroy(e));
    CK(cudaGraphInstantiate(&e, graph_a, 0));
    double t3 = now_us();
    CK(cudaGraphLaunch(e, w.main));
    CK(cudaStreamSynchronize(w.main));
    double t4 = now_us();
    CK(cudaGraphExecDestroy(e));
    if (r > 0) {
      inst.push_back(t1 - t0);
      upl.push_back(t2 - t1);
      first.push_back(t4 - t3);
    }
  }
  v[3] = median(inst);
  v[4] = median(upl);
  v[10] = median(first);

  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, graph_a, 0));
  CK(cudaGraphUpload(exec, w.main));
  CK(cudaStreamSynchronize(w.main));

  progress("replay");
  Timing replay = time_region(w.main, start, end, 3, reps, [&] { CK(cudaGraphLaunch(exec, w.main)); });
  v[5] = replay.submit_us;
  v[6] = replay.device_us;

  progress("updates");
  std::vector<KernelNode> kn = kernel_nodes(graph_a);
  if ((int)kn.size() != w.kernels()) {
    std::fprintf(stderr, "  captured %zu kernel nodes, expected %d\n", kn.size(), w.kernels());
    std::exit(1);
  }
  int rounds = std::min(reps, 10);
  std::vector<double> per_node, whole, reinst;
  unsigned len = LEN;
  float last = 0.5f;
  for (int r = 0; r < rounds + 2; ++r) {
    float a = (r % 2 == 0) ? 0.25f : 0.5f;
    last = a;
    double t0 = now_us();
    for (const KernelNode& k : kn) {
      float* x = k.buf;
      void* args[] = {&x, &a, &len};
      cudaKernelNodeParams p = {};
      p.func = (void*)add_scalar;
      p.gridDim = dim3((LEN + THREADS - 1) / THREADS);
      p.blockDim = dim3(THREADS);
      p.sharedMemBytes = 0;
      p.kernelParams = args;
      CK(cudaGraphExecKernelNodeSetParams(exec, k.node, &p));
    }
    double t1 = now_us();
    cudaGraphExecUpdateResultInfo info = {};
    cudaGraph_t target = (a == 0.25f) ? graph_b : graph_a;
    CK(cudaGraphExecUpdate(exec, target, &info));
    double t2 = now_us();
    cudaGraphExec_t fresh;
    CK(cudaGraphInstantiate(&fresh, target, 0));
    CK(cudaGraphExecDestroy(fresh)); // stands for destroying the old executable
    double t3 = now_us();
    if (r >= 2) {
      per_node.push_back(t1 - t0);
      whole.push_back(t2 - t1);
      reinst.push_back(t3 - t2);
    }
  }
  v[7] = median(per_node);
  v[8] = median(whole);
  v[9] = median(reinst);

  progress("correctness");
  w.reset(1.0f);
  w.issue(0.5f);
  CK(cudaStreamSynchronize(w.main));
  bool ok = w.check(0.5f);
  w.reset(1.0f);
  CK(cudaGraphLaunch(exec, w.main));
  CK(cudaStreamSynchronize(w.main));
  ok = w.check(last) && ok;

  print_row(workload, w, reps, v, ok);

  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph_a));
  CK(cudaGraphDestroy(graph_b));
  CK(cudaEventDestroy(start));
  CK(cudaEventDestroy(end));
  CK(cudaEventDestroy(w.fork_ev));
  for (int k = 0; k < BRANCHES - 1; ++k) {
    CK(cudaEventDestroy(w.join_ev[k]));
    CK(cudaStreamDestroy(w.side[k]));
  }
  for (int k = 0; k < w.buffers(); ++k) CK(cudaFree(w.buf[k]));
  CK(cudaStreamDestroy(w.main));
}

static std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    if (comma > pos) out.push_back(s.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

int main(int argc, char** argv) {
  std::string nlist = argc > 1 ? argv[1] : "10,100,1000,10000";
  std::string reps_arg = argc > 2 ? argv[2] : "auto";
  std::string wlist = argc > 3 ? argv[3] : "chain,forkjoin";
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr)); // create the context outside every timing
  for (const std::string& wl : split(wlist)) {
    if (wl != "chain" && wl != "forkjoin") {
      std::fprintf(stderr, "unknown workload '%s' (chain, forkjoin)\n", wl.c_str());
      return 2;
    }
    for (const std::string& ns : split(nlist)) {
      int n = std::atoi(ns.c_str());
      if (n < (wl == "forkjoin" ? BRANCHES : 1)) {
        std::fprintf(stderr, "bad N '%s' for %s\n", ns.c_str(), wl.c_str());
        return 2;
      }
      int reps = reps_arg == "auto" ? (n <= 1000 ? 20 : 5) : std::atoi(reps_arg.c_str());
      if (reps < 1) {
        std::fprintf(stderr, "bad reps '%s'\n", reps_arg.c_str());
        return 2;
      }
      bench(wl == "chain" ? "chain" : "forkjoin", n, reps);
    }
  }
  return 0;
}
