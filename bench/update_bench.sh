#!/usr/bin/env bash
# Issue 4's update benchmark, run on a machine with an NVIDIA GPU in one invocation. Needs nvcc and
# gpu-bin/ from scripts/gpu-build.sh.
#
# The comparison with plain CUDA C++ is timed turn by turn in one process: the C++ reference
# (bench/cpp/chain_ref.cu) is compiled into a shared library that gpu-bin/examples/interleaved
# loads, and the two sides alternate rep by rep. (Separate processes on one machine differ by
# up to 2x in host time from run to run, which swamps a 10% target.) Then graphsmith's update_bench
# measures what has no C++ counterpart: a cache hit plus launch against a bare launch, and the
# driver alone on graphsmith's executable. The whole is repeated $UPDATE_BENCH_ROUNDS times
# (default 3) and the table shows the median of the rounds.
#
#   bash bench/update_bench.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000}
arch=${CUDA_ARCH:-sm_90}
nvcc -O2 -arch="$arch" -shared -Xcompiler -fPIC -o /tmp/libchain_ref.so bench/cpp/chain_ref.cu
rounds=${UPDATE_BENCH_ROUNDS:-3}
# Pinned to the same CPUs as bench/run_all.sh (BENCH_CPUS; empty: no pinning).
cpus=${BENCH_CPUS-2,3}
pin=()
if [ -n "$cpus" ] && command -v taskset >/dev/null 2>&1; then
  pin=(taskset -c "$cpus")
fi
side_rows=()
gs_rows=()
for _ in $(seq 1 "$rounds"); do
  side_rows+=("$("${pin[@]}" gpu-bin/examples/interleaved /tmp/libchain_ref.so "$n" 20)")
  gs_rows+=("$("${pin[@]}" gpu-bin/examples/update_bench "$n" 20)")
done
printf '%s\n' "${side_rows[@]}" "${gs_rows[@]}"
python3 - "${side_rows[*]}" "${gs_rows[*]}" <<'PY'
import json, statistics, sys
def rows(text):
    return [json.loads(line) for line in text.replace("} {", "}\n{").splitlines() if line.strip()]
side, gs = rows(sys.argv[1]), rows(sys.argv[2])
def med(key, field):
    return statistics.median(r[key][field] for r in side)
def gmed(key):
    return statistics.median(r[key] for r in gs)
n = side[0]["nodes"]
print(f"\nupdate benchmark, chain of {n} kernels: host time, C++ and graphsmith turn by turn in one process "
      f"({side[0]['reps']} pairs per round, median of {len(side)} rounds; ratio = median of the per-pair ratios)")
print(f"| {'':34} | {'CUDA C++':>10} | {'graphsmith':>10} | {'ratio':>6} | goal |")
print(f"|{'-'*36}|{'-'*12}|{'-'*12}|{'-'*8}|------|")
goals = {"per_node_update_us": "1.1x", "whole_graph_update_us": "1.1x", "instantiate_us": ""}
for key, name in [("per_node_update_us", "update all kernel nodes, per node"), ("whole_graph_update_us", "whole-graph update"), ("instantiate_us", "instantiate")]:
    print(f"| {name:34} | {med(key, 'cpp'):8.1f}us | {med(key, 'graphsmith'):8.1f}us | {med(key, 'ratio'):5.2f}x | {goals[key]:4} |")
inst = med("instantiate_us", "graphsmith")
inst_c = med("instantiate_us", "cpp")
print(f"\nre-instantiation / update: graphsmith per-node {inst/med('per_node_update_us', 'graphsmith'):.1f}x, "
      f"whole-graph {inst/med('whole_graph_update_us', 'graphsmith'):.1f}x; "
      f"CUDA C++ per-node {inst_c/med('per_node_update_us', 'cpp'):.1f}x, whole-graph {inst_c/med('whole_graph_update_us', 'cpp'):.1f}x (goal 10x)")
print(f"the driver alone on graphsmith's executable (update_bench, its own process): per-node {gmed('per_node_raw_driver_us'):.1f} us naming the library kernel, "
      f"{gmed('per_node_raw_driver_function_us'):.1f} us naming its function; whole-graph {gmed('whole_graph_raw_driver_us'):.1f} us "
      f"(graphsmith in that process: per-node {gmed('per_node_update_us'):.1f} us, whole-graph {gmed('whole_graph_update_us'):.1f} us)")
print(f"cache hit + launch {gmed('cache_hit_launch_us'):.2f} us vs bare launch {gmed('bare_launch_us'):.2f} us: +{gmed('cache_hit_launch_us')-gmed('bare_launch_us'):.2f} us (goal: at most +1 us)")
ok = all(r["correct_cpp"] and r["correct_graphsmith"] for r in side) and all(r["correct"] for r in gs)
print(f"results correct after the updates (both sides): {ok}")
sys.exit(0 if ok else 1)
PY
