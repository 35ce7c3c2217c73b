// Plain CUDA C++ reference for graphsmith's update benchmark (issue 4), as a program of its own:
// a chain of N small kernels built explicitly (bench/cpp/chain_ref.cu); host times (medians)
// of updating every kernel node of the executable (cudaGraphExecKernelNodeSetParams), a
// whole-graph update (cudaGraphExecUpdate), and a fresh instantiation. Prints one JSON object.
// bench/update_bench.sh times the same calls turn by turn with graphsmith's in one process.
//
//   nvcc -O2 -arch=sm_90 -o update_bench bench/cpp/update_bench.cu && ./update_bench 1000
#include "chain_ref.cu"

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 1000;
  int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  ChainRef* c = chain_ref_new(n);
  // Each kind in its own loop, the first three rounds as warm-up.
  std::vector<double> per_node, whole, inst;
  for (int r = 0; r < reps + 3; ++r) {
    double t = chain_ref_per_node_update(c, (r % 2) ? 0.5f : 0.25f);
    if (r >= 3) per_node.push_back(t);
  }
  for (int r = 0; r < reps + 3; ++r) {
    double t = chain_ref_whole_update(c, (r % 2) ? 0 : 1);
    if (r >= 3) whole.push_back(t);
  }
  for (int r = 0; r < reps + 3; ++r) {
    double t = chain_ref_instantiate(c);
    if (r >= 3) inst.push_back(t);
  }
  // The last whole-graph update (r = reps + 2) chose graph 0 or 1; check the replay against it.
  float step = ((reps + 2) % 2) ? 0.5f : 0.25f, want = 1.0f;
  for (int i = 0; i < n; ++i) want += step;
  int ok = chain_ref_check_replay(c, 1.0f, want);
  chain_ref_free(c);
  std::printf("{\"impl\": \"cuda-c++\", \"nodes\": %d, \"per_node_update_us\": %.1f, \"whole_graph_update_us\": %.1f, \"instantiate_us\": %.1f, \"correct\": %s}\n",
              n, median(per_node), median(whole), median(inst), ok ? "true" : "false");
  return ok ? 0 : 1;
}
