#!/usr/bin/env bash
# Issue 4's update benchmark, run on the GPU machine in one invocation: plain CUDA C++ and
# graphsmith side by side, then the ratios. Needs nvcc there and gpu-bin/ from
# scripts/gpu-build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000}
nvcc -O2 -arch=sm_90 -o /tmp/update_bench_cpp bench/cpp/update_bench.cu
cpp=$(/tmp/update_bench_cpp "$n" 20)
gs=$(gpu-bin/examples/update_bench "$n" 20)
echo "$cpp"
echo "$gs"
python3 - "$cpp" "$gs" <<'PY'
import json, sys
c, g = json.loads(sys.argv[1]), json.loads(sys.argv[2])
n = g["nodes"]
print(f"\nupdate benchmark, chain of {n} kernels (host time, medians of 20)")
print(f"| {'':34} | {'CUDA C++':>10} | {'graphsmith':>10} | {'ratio':>6} |")
print(f"|{'-'*36}|{'-'*12}|{'-'*12}|{'-'*8}|")
for key, name in [("per_node_update_us", "update all kernel nodes, per node"), ("whole_graph_update_us", "whole-graph update"), ("instantiate_us", "instantiate")]:
    print(f"| {name:34} | {c[key]:8.1f}us | {g[key]:8.1f}us | {g[key]/c[key]:5.2f}x |")
print(f"\nre-instantiation / update (graphsmith): per-node {g['instantiate_us']/g['per_node_update_us']:.1f}x, whole-graph {g['instantiate_us']/g['whole_graph_update_us']:.1f}x")
print(f"cache hit + launch {g['cache_hit_launch_us']:.2f} us vs bare launch {g['bare_launch_us']:.2f} us: +{g['cache_hit_launch_us']-g['bare_launch_us']:.2f} us")
print(f"results correct after the updates: {g['correct']}")
PY
