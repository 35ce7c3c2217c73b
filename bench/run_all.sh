#!/usr/bin/env bash
# The side-by-side benchmark in one invocation, on a machine with an NVIDIA GPU: compiles the plain CUDA C++
# program, runs it, the PyTorch program and `graphsmith bench --json` (gpu-bin/graphsmith, from
# scripts/gpu-build.sh; if it is missing the report compares C++ and PyTorch only), collects
# every row into bench/results/<date>-<gpu>.jsonl and writes bench/results/<date>-<gpu>.md
# (tables, ratios, targets) and <date>-<gpu>-{chain,forkjoin}.svg. Prints the report.
#
#   bash bench/run_all.sh [--claims] [TARBALL]
#
#   --claims   also run bench/claims/run_claims.sh (bench/results/<date>-claims.txt)
#   TARBALL    also pack every bench/results/<date>-* file and the logs into this .tar.gz
#              (paths relative to the repository root: `tar xzf TARBALL` there puts them back)
#
# Environment: BENCH_NODES (10,100,1000,10000), BENCH_REPS (auto = 20 for N <= 1000, 5 above),
# BENCH_ROUNDS (5: each implementation runs this often, in turn; the report takes medians),
# BENCH_CPUS (2,3: the CPUs every program is pinned to with taskset; empty: no pinning),
# GPU_TAG (from the GPU's name, e.g. h200), NVCC, CUDA_ARCH (sm_90), GRAPHSMITH
# (gpu-bin/graphsmith), GRAPHSMITH_BENCH_ARGS (replaces "bench --json --nodes ... [--reps ...]").
# On a machine without Rust, build gpu-bin/ elsewhere with scripts/gpu-build.sh and copy it here.
set -uo pipefail
cd "$(dirname "$0")/.."

claims=0
tarball=""
for arg in "$@"; do
  case "$arg" in
    --claims) claims=1 ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) tarball=$arg ;;
  esac
done

nodes=${BENCH_NODES:-10,100,1000,10000}
reps=${BENCH_REPS:-auto}
rounds=${BENCH_ROUNDS:-5}
# Every implementation runs on the same CPUs (the host's cores differ in speed from run to run
# otherwise); BENCH_CPUS= (empty) turns pinning off.
cpus=${BENCH_CPUS-2,3}
pin=()
if [ -n "$cpus" ] && command -v taskset >/dev/null 2>&1; then
  pin=(taskset -c "$cpus")
fi
arch=${CUDA_ARCH:-sm_90}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
gs=${GRAPHSMITH:-gpu-bin/graphsmith}
date=$(date -u +%F)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
cuda_driver=$(nvidia-smi 2>/dev/null | grep -oE 'CUDA Version: [0-9.]+' | head -n 1 | sed 's/CUDA Version: //')
tag=${GPU_TAG:-$(echo "$gpu" | grep -oiE '\b[a-z]+[0-9]{2,4}[a-z]*\b' | head -n 1 | tr '[:upper:]' '[:lower:]')}
tag=${tag:-gpu}

mkdir -p bench/results
base=bench/results/$date-$tag
logs=$base-logs
rm -rf "$logs"
mkdir -p "$logs"
jsonl=$base.jsonl
: >"$jsonl"
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
notes=()

say() { echo "== $*" >&2; }

say "GPU: ${gpu:-none found} (driver ${driver:-?}, CUDA ${cuda_driver:-?}); N = $nodes; reps = $reps; rounds = $rounds; pinned: ${pin[*]:-no}"
[ ${#pin[@]} -gt 0 ] && notes+=("every program ran pinned to CPUs $cpus (${pin[*]})")

# 1-3. Plain CUDA C++, PyTorch and graphsmith, in turn, $rounds times: the GPU's clocks drift
# over a run, so each implementation is measured early and late, and the report takes the
# median of the rounds (report.py merges rows of the same implementation, workload and N).
say "compiling bench/cpp/graph_bench.cu ($nvcc -O2 -arch=$arch)"
have_cpp=0
if "$nvcc" -O2 -arch="$arch" -o "$build/graph_bench" bench/cpp/graph_bench.cu >"$logs/nvcc.log" 2>&1; then
  have_cpp=1
else
  notes+=("nvcc failed: no CUDA C++ rows (see $logs/nvcc.log)")
  cat "$logs/nvcc.log" >&2
fi
# 3b. The same chain timed turn by turn with graphsmith in one process (bench/cpp/chain_ref.cu as
# a shared library, loaded by gpu-bin/examples/interleaved): rows with impl "interleaved", with
# replay, updates, instantiation and capture (chain and fork/join; graphsmith's journal on and
# off) against the same C++ calls.
interleaved=${INTERLEAVED:-gpu-bin/examples/interleaved}
have_interleaved=0
if [ $have_cpp -eq 1 ] && [ -x "$interleaved" ]; then
  if "$nvcc" -O2 -arch="$arch" -shared -Xcompiler -fPIC -o "$build/libchain_ref.so" bench/cpp/chain_ref.cu >>"$logs/nvcc.log" 2>&1; then
    have_interleaved=1
  else
    notes+=("nvcc failed on bench/cpp/chain_ref.cu: no turn-by-turn rows (see $logs/nvcc.log)")
  fi
fi
chains=$(echo "$nodes" | tr ',' '\n' | grep -E '^[0-9]+$' | paste -sd, -)
gs_version=""
if [ -x "$gs" ]; then
  gs_version=$("$gs" --version 2>/dev/null | head -n 1)
  if [ -n "${GRAPHSMITH_BENCH_ARGS:-}" ]; then
    read -r -a gs_args <<<"$GRAPHSMITH_BENCH_ARGS"
  else
    gs_args=(bench --json --nodes "$nodes")
    [ "$reps" = auto ] || gs_args+=(--reps "$reps")
  fi
else
  notes+=("$gs is missing (build it with scripts/gpu-build.sh and copy gpu-bin/ into the repository): this report compares CUDA C++ and PyTorch only")
  say "$gs is missing: reporting CUDA C++ vs PyTorch only"
fi
for round in $(seq 1 "$rounds"); do
  if [ $have_cpp -eq 1 ]; then
    say "round $round/$rounds: CUDA C++"
    "${pin[@]}" "$build/graph_bench" "$nodes" "$reps" chain,forkjoin >"$logs/cuda-c++.$round.out" 2>"$logs/cuda-c++.$round.log"
    rc=$?
    grep '^{' "$logs/cuda-c++.$round.out" >>"$jsonl"
    [ $rc -eq 0 ] || notes+=("round $round: the CUDA C++ program exited with status $rc (see $logs/cuda-c++.$round.log)")
  fi
  say "round $round/$rounds: PyTorch"
  "${pin[@]}" python3 bench/torch/graph_bench.py --nodes "$nodes" --reps "$reps" >"$logs/pytorch.$round.out" 2>"$logs/pytorch.$round.log"
  rc=$?
  grep '^{' "$logs/pytorch.$round.out" >>"$jsonl"
  [ $rc -eq 0 ] || notes+=("round $round: the PyTorch program exited with status $rc: $(tail -n 1 "$logs/pytorch.$round.log")")
  if [ -x "$gs" ]; then
    say "round $round/$rounds: $gs ${gs_args[*]}"
    "${pin[@]}" "$gs" "${gs_args[@]}" >"$logs/graphsmith.$round.out" 2>"$logs/graphsmith.$round.log"
    rc=$?
    grep '^{' "$logs/graphsmith.$round.out" >>"$jsonl"
    [ $rc -eq 0 ] || notes+=("round $round: graphsmith bench exited with status $rc: $(tail -n 1 "$logs/graphsmith.$round.log" | tr -d '\r' | cut -c1-200)")
  fi
  if [ $have_interleaved -eq 1 ]; then
    say "round $round/$rounds: $interleaved (C++ and graphsmith turn by turn, N = $chains)"
    "${pin[@]}" "$interleaved" "$build/libchain_ref.so" "$chains" >"$logs/interleaved.$round.out" 2>"$logs/interleaved.$round.log"
    rc=$?
    grep '^{' "$logs/interleaved.$round.out" >>"$jsonl"
    [ $rc -eq 0 ] || notes+=("round $round: interleaved exited with status $rc: $(tail -n 1 "$logs/interleaved.$round.log" | cut -c1-200)")
  fi
done

# 4. Metadata, report, plots.
torch_version=$(python3 -c 'import torch; print(torch.__version__, "(CUDA", str(torch.version.cuda) + ")")' 2>/dev/null)
nvcc_version=$("$nvcc" --version 2>/dev/null | grep -oE 'release [0-9.]+, V[0-9.]+' | head -n 1)
cpu=$(grep -m 1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')
notes_file=$build/notes
printf '%s\n' "${notes[@]+"${notes[@]}"}" >"$notes_file"
GPU="$gpu" DRIVER="$driver" CUDA_DRIVER="$cuda_driver" DATE="$date" NVCC_V="$nvcc_version" TORCH_V="$torch_version" \
GS_V="$gs_version" HOST="$(nproc) cores, ${cpu:-unknown CPU}" CMD="bash bench/run_all.sh $*" \
python3 - "$notes_file" >>"$jsonl" <<'PY'
import json, os, sys
notes = [l.rstrip("\n") for l in open(sys.argv[1]) if l.strip()]
env = os.environ.get
meta = {"gpu": env("GPU"), "driver": env("DRIVER"), "cuda_driver": env("CUDA_DRIVER"), "date": env("DATE"),
        "nvcc": env("NVCC_V"), "torch": env("TORCH_V"), "graphsmith": env("GS_V"), "host": env("HOST"),
        "command": env("CMD"), "notes": notes}
print(json.dumps({"meta": {k: v for k, v in meta.items() if v}}))
PY

say "writing $base.md"
python3 bench/report.py "$jsonl" --md "$base.md" --svg-prefix "$base" 2>"$logs/report.log" || {
  echo "report.py failed:" >&2
  cat "$logs/report.log" >&2
}

# 5. Claims.
if [ $claims -eq 1 ]; then
  say "running bench/claims/run_claims.sh"
  bash bench/claims/run_claims.sh >"$logs/claims.out" 2>&1 || echo "run_claims.sh failed (see $logs/claims.out)" >&2
fi

# 6. Tarball, then the report on stdout, the short summary last (so that the tail of the output says
# the most).
if [ -n "$tarball" ]; then
  mkdir -p "$(dirname "$tarball")"
  tar czf "$tarball" bench/results/"$date"-* && say "packed $(tar tzf "$tarball" | wc -l) files into $tarball"
fi
[ -f "$base.md" ] && cat "$base.md"
echo
echo "== summary"
python3 - "$jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
rows = [r for r in rows if "impl" in r]
print(f"rows: {len(rows)} in {sys.argv[1]}")
for impl in ("cuda-c++", "pytorch", "graphsmith"):
    mine = [r for r in rows if r["impl"] == impl]
    print(f"  {impl}: {len(mine)} rows, {sum(r.get('correct') is True for r in mine)} correct")
PY
for note in "${notes[@]+"${notes[@]}"}"; do echo "  note: $note"; done
[ -f "$base.md" ] && sed -n '/^## Headline targets/,/^## Correctness/p' "$base.md" | grep -E '^\||met, |Not evaluated|^chain of'
[ $claims -eq 1 ] && [ -f "$logs/claims.out" ] && grep -E '^CLAIM ' "$logs/claims.out"
exit 0
