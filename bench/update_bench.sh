#!/usr/bin/env bash
# Issue 4's update benchmark, run on the GPU machine in one invocation: plain CUDA C++ and
# graphsmith side by side, then the ratios. Needs nvcc there and gpu-bin/ from
# scripts/gpu-build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000}
nvcc -O2 -arch=sm_90 -o /tmp/update_bench_cpp bench/cpp/update_bench.cu
# C++ and graphsmith in turn, $rounds times (host speed drifts over a run); the table shows the
# median of the rounds for each figure.
rounds=${UPDATE_BENCH_ROUNDS:-3}
# Both programs on the same CPUs (BENCH_CPUS, as bench/run_all.sh; empty: no pinning).
cpus=${BENCH_CPUS-2,3}
pin=()
if [ -n "$cpus" ] && command -v taskset >/dev/null 2>&1; then
  pin=(taskset -c "$cpus")
fi
cpp_rows=()
gs_rows=()
for _ in $(seq 1 "$rounds"); do
  cpp_rows+=("$("${pin[@]}" /tmp/update_bench_cpp "$n" 20)")
  gs_rows+=("$("${pin[@]}" gpu-bin/examples/update_bench "$n" 20)")
done
printf '%s\n' "${cpp_rows[@]}" "${gs_rows[@]}"
python3 - "${cpp_rows[*]}" "${gs_rows[*]}" <<'PY'
import json, statistics, sys
def merged(text):
    rows = [json.loads(line) for line in text.replace("} {", "}\n{").splitlines() if line.strip()]
    out = dict(rows[-1])
    for key, value in out.items():
        if isinstance(value, float):
            out[key] = statistics.median(r[key] for r in rows)
    out["correct"] = all(r.get("correct", True) for r in rows)
    out["rounds"] = len(rows)
    return out
c, g = merged(sys.argv[1]), merged(sys.argv[2])
n = g["nodes"]
print(f"\nupdate benchmark, chain of {n} kernels (host time; medians of 20 per run, median of {g['rounds']} runs in turn; each kind in its own loop)")
print(f"| {'':34} | {'CUDA C++':>10} | {'graphsmith':>10} | {'ratio':>6} |")
print(f"|{'-'*36}|{'-'*12}|{'-'*12}|{'-'*8}|")
for key, name in [("per_node_update_us", "update all kernel nodes, per node"), ("whole_graph_update_us", "whole-graph update"), ("instantiate_us", "instantiate")]:
    print(f"| {name:34} | {c[key]:8.1f}us | {g[key]:8.1f}us | {g[key]/c[key]:5.2f}x |")
print(f"\nre-instantiation / update (graphsmith): per-node {g['instantiate_us']/g['per_node_update_us']:.1f}x, whole-graph {g['instantiate_us']/g['whole_graph_update_us']:.1f}x")
print(f"the driver alone on graphsmith's executable (no bookkeeping): per-node {g['per_node_raw_driver_us']:.1f} us naming the library kernel as graphsmith does, {g['per_node_raw_driver_function_us']:.1f} us naming its function; whole-graph {g['whole_graph_raw_driver_us']:.1f} us")
print(f"per-node updates right after a whole-graph update (graphsmith; the first copies the model it shared): {g['per_node_after_whole_update_us']:.1f} us")
print(f"cache hit + launch {g['cache_hit_launch_us']:.2f} us vs bare launch {g['bare_launch_us']:.2f} us: +{g['cache_hit_launch_us']-g['bare_launch_us']:.2f} us")
print(f"results correct after the updates: {g['correct']}")
PY
