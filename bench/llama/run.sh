#!/usr/bin/env bash
# The Llama decoder against transformers, on a machine with an NVIDIA GPU, PyTorch and
# transformers (no network needed). From the repository root:
#
#   bash bench/llama/run.sh smoke OUTDIR   # tiny config: model, reference, torch_bench at batch 1 (< 2 min)
#   bash bench/llama/run.sh check OUTDIR   # small-a, small-b, 1b: references, graphsmith-llama check (15 checks)
#   bash bench/llama/run.sh bench OUTDIR   # graphsmith-llama bench + torch_bench, batch 1,8,64, then the report
#   bash bench/llama/run.sh report OUTDIR  # the report again from OUTDIR/bench-*.jsonl
#   bash bench/llama/run.sh shapes OUTDIR  # seven public shapes at full depth: graphsmith against the lean
#                                          # loop and transformers' forward, then OUTDIR/shapes-report.md
#
# Models and references go to $LLAMA_MODELS (/tmp/llama-models), made once and reused; JSON and
# logs go to OUTDIR (a few files; per-check JSON bundled in check-json.tgz).
# Environment: GRAPHSMITH_LLAMA (gpu-bin/graphsmith-llama), LLAMA_MODELS, PYTHON (python3),
# BENCH_CONFIGS (small,1b; one per call keeps each call to several minutes), BENCH_BATCH (1,8,64),
# BENCH_STEPS (128), BENCH_WARMUP (16), BENCH_RUNS (5), BENCH_IMPLS (the three PyTorch contenders),
# BENCH_TUNE (empty; 1: inductor's coordinate-descent tuning for the compiled contenders),
# BENCH_RUST (1; 0: skip graphsmith-llama bench, e.g. when only re-running a PyTorch contender),
# BENCH_PDL (auto,off: graphsmith with and without programmatic dependent launch),
# BENCH_TTFT (512,2048: prompt lengths of graphsmith's time to first token, in the report),
# CHECK_TOLERANCE (empty: graphsmith-llama's default).
# shapes: SHAPES (shapes.py's names, comma list; default all seven, smallest first), SHAPES_STEPS (64),
# SHAPES_WARMUP (8), SHAPES_RUNS (5), SHAPES_DEADLINE (540: seconds from the start; a shape is
# skipped when under 30 s are left at its start, a step is cut at the deadline), SHAPES_SWAP (smollm2-135m,llama-3.2-1b,llama-3.2-3b: the
# shapes swap-bench runs on, when graphsmith-llama has it), SHAPES_SWAP_ROUNDS (5), SHAPES_SCRATCH
# (/tmp/llama-shapes: each checkpoint, deleted after its shape), SHAPES_TORCH (1; 0: no PyTorch),
# SHAPES_KERNELS (empty; shapes' names, comma list, or all: kernel_times.py's per-kernel times under
# Nsight Compute and timeline/'s kernels in the replayed graph (CUPTI), at batch 1 and 64 after the
# cached graphsmith run, up to 120 s each; part graphsmith),
# SHAPES_KERNELS_BATCHES (1,64: the batches SHAPES_KERNELS profiles).
set -uo pipefail
cd "$(dirname "$0")/../.."

mode=${1:-}
out=${2:-}
if [ -z "$mode" ] || [ -z "$out" ]; then
  sed -n '2,30p' "$0"
  exit 2
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
py=${PYTHON:-python3}
gs=${GRAPHSMITH_LLAMA:-gpu-bin/graphsmith-llama}
models=${LLAMA_MODELS:-/tmp/llama-models}
here=bench/llama
mkdir -p "$out" "$models"
log=$out/$mode.log
# shapes appends: a second call for the shapes a first one skipped keeps one log.
[ "$mode" = shapes ] || : >"$log"

say() { echo "[run.sh $mode] $*" | tee -a "$log" >&2; }
# step NAME CMD...: runs CMD, its stderr to the log (and the terminal), returns its status.
step() {
  local name=$1
  shift
  local t0=$SECONDS
  say "$name: $*"
  "$@" 2> >(tee -a "$log" >&2)
  local rc=$?
  say "$name: exit $rc after $((SECONDS - t0)) s"
  return $rc
}

# model NAME CONFIG SEED: makes $models/NAME once.
model() {
  if [ -f "$models/$1/config.json" ] && [ -f "$models/$1/.complete" ]; then
    say "model $1: reusing $models/$1"
    return 0
  fi
  rm -rf "${models:?}/$1"
  step "model $1" "$py" $here/make_model.py --config "$2" --seed "$3" --out "$models/$1" >>"$log" &&
    touch "$models/$1/.complete"
}

# reference NAME SET [NEW_TOKENS]: $models/ref-NAME-SET.safetensors once (128 new tokens unless
# given).
reference() {
  local ref=$models/ref-$1-$2.safetensors
  if [ -f "$ref" ]; then
    say "reference $1 $2: reusing $ref"
    return 0
  fi
  step "reference $1 $2" "$py" $here/reference.py --model "$models/$1" --prompts $here/prompts.json \
    --set "$2" --new-tokens "${3:-128}" --out "$ref.part" && mv "$ref.part" "$ref"
}

failures=0
fail() {
  failures=$((failures + 1))
  say "FAILED: $*"
}

case "$mode" in
smoke)
  model tiny tiny 1 || fail "model tiny"
  reference tiny single || fail "reference tiny"
  step "torch_bench tiny" "$py" $here/torch_bench.py --model "$models/tiny" --batch 1 --steps 8 --warmup 4 \
    --runs 2 --json >"$out/smoke.jsonl" || fail "torch_bench tiny"
  if [ -x "$gs" ]; then
    step "graphsmith-llama check tiny" "$gs" check --model "$models/tiny" \
      --reference "$models/ref-tiny-single.safetensors" --mode graphs --json >"$out/smoke-check.json" ||
      say "graphsmith-llama check tiny: exit $? (informational: smoke validates the Python side)"
  else
    say "no $gs: graphsmith-llama not run"
  fi
  "$py" $here/report.py "$out/smoke.jsonl" --md "$out/smoke.md" --command "bash bench/llama/run.sh smoke OUTDIR" \
    >/dev/null 2>>"$log" || fail "report.py"
  rows=$(grep -c '^{' "$out/smoke.jsonl" 2>/dev/null)
  echo "llama smoke: ${rows:-0} torch_bench rows, $failures failure(s); files in $out"
  ;;

check)
  model small-a small 1 || fail "model small-a"
  model small-b small 2 || fail "model small-b"
  model 1b 1b 1 || fail "model 1b"
  # The long prompts (512 and 2,048 tokens, prefilled in chunks) with 32 new tokens each.
  for r in "small-a single" "small-a batch8" "small-b single" "1b single" "1b batch8" \
    "small-a prompt512 32" "small-a prompt2048 32" "1b prompt512 32" "1b prompt2048 32"; do
    # shellcheck disable=SC2086
    reference $r || fail "reference $r"
  done
  if [ ! -x "$gs" ]; then
    say "no $gs (build it with scripts/gpu-build.sh): models and references are ready in $models"
    exit 2
  fi
  tol=()
  [ -n "${CHECK_TOLERANCE:-}" ] && tol=(--tolerance "$CHECK_TOLERANCE")
  dir=$(mktemp -d)
  : >"$out/check.jsonl"
  # run_check NAME ARGS...: one graphsmith-llama check, its JSON kept and summarised.
  run_check() {
    local name=$1
    shift
    step "check $name" "$gs" check "$@" "${tol[@]}" --json >"$dir/$name.json"
    local rc=$?
    [ $rc -eq 0 ] || fail "check $name (exit $rc)"
    "$py" -c 'import json,sys
name, rc, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
text = open(path).read().strip()
try:
    result = json.loads(text) if text else None
except ValueError:
    result = {"unparsed": text[-2000:]}
print(json.dumps({"check": name, "exit": rc, "result": result}))' "$name" "$rc" "$dir/$name.json" >>"$out/check.jsonl"
  }
  m=$models
  run_check small-single-eager --model "$m/small-a" --reference "$m/ref-small-a-single.safetensors" --mode eager
  run_check small-single-graphs --model "$m/small-a" --reference "$m/ref-small-a-single.safetensors" --mode graphs
  run_check 1b-single-eager --model "$m/1b" --reference "$m/ref-1b-single.safetensors" --mode eager
  run_check 1b-single-graphs --model "$m/1b" --reference "$m/ref-1b-single.safetensors" --mode graphs
  run_check small-batch8-graphs --model "$m/small-a" --reference "$m/ref-small-a-batch8.safetensors" --mode graphs
  run_check 1b-batch8-graphs --model "$m/1b" --reference "$m/ref-1b-batch8.safetensors" --mode graphs
  # The same single-sequence checks with cuBLAS for every projection (auto runs the decoder's own
  # GEMV kernels up to 8 rows): both paths are held to transformers.
  run_check small-single-graphs-cublas --model "$m/small-a" --reference "$m/ref-small-a-single.safetensors" --mode graphs --gemm cublas
  run_check 1b-single-graphs-cublas --model "$m/1b" --reference "$m/ref-1b-single.safetensors" --mode graphs --gemm cublas
  run_check small-swap-graphs --model "$m/small-a" --reference "$m/ref-small-a-single.safetensors" \
    --swap-model "$m/small-b" --swap-reference "$m/ref-small-b-single.safetensors" --mode graphs
  # Prompts of 512 and 2,048 tokens, prefilled in chunks of 512 (the default) and, once, of 384
  # (which divides neither); the step-by-step prefill held to transformers too.
  run_check small-prompt512-graphs --model "$m/small-a" --reference "$m/ref-small-a-prompt512.safetensors" --mode graphs
  run_check small-prompt2048-graphs --model "$m/small-a" --reference "$m/ref-small-a-prompt2048.safetensors" --mode graphs
  run_check 1b-prompt512-eager --model "$m/1b" --reference "$m/ref-1b-prompt512.safetensors" --mode eager
  run_check 1b-prompt2048-graphs --model "$m/1b" --reference "$m/ref-1b-prompt2048.safetensors" --mode graphs
  run_check 1b-prompt2048-graphs-chunk384 --model "$m/1b" --reference "$m/ref-1b-prompt2048.safetensors" --mode graphs --prefill 384
  run_check small-single-graphs-steps --model "$m/small-a" --reference "$m/ref-small-a-single.safetensors" --mode graphs --prefill steps
  tar czf "$out/check-json.tgz" -C "$dir" . && rm -rf "$dir"
  passed=$("$py" -c 'import json,sys; print(sum(json.loads(l)["exit"] == 0 for l in open(sys.argv[1])))' "$out/check.jsonl")
  total=$(wc -l <"$out/check.jsonl")
  echo "llama check: $passed/$total checks passed, $failures failure(s); $out/check.jsonl, $out/check-json.tgz, $out/check.log"
  ;;

bench)
  configs=${BENCH_CONFIGS:-small,1b}
  batch=${BENCH_BATCH:-1,8,64}
  steps=${BENCH_STEPS:-128}
  warmup=${BENCH_WARMUP:-16}
  runs=${BENCH_RUNS:-5}
  impls=${BENCH_IMPLS:-hf-generate-eager,hf-generate-static-compiled,lean-compiled}
  for cfg in ${configs//,/ }; do
    name=$cfg
    [ "$cfg" = small ] && name=small-a
    model "$name" "$cfg" 1 || {
      fail "model $name"
      continue
    }
    rows=$out/bench-$cfg.jsonl
    touch "$rows"
    # drop IMPL...: forget this config's earlier rows of the contenders about to run again, so a
    # call per contender (BENCH_IMPLS, BENCH_RUST=0) adds to the file instead of starting it anew.
    drop() {
      "$py" -c 'import json,sys
path, impls = sys.argv[1], set(sys.argv[2:])
keep = [l for l in open(path) if l.strip() and json.loads(l).get("impl") not in impls]
open(path, "w").writelines(keep)' "$rows" "$@"
    }
    if [ "${BENCH_RUST:-1}" = 0 ]; then
      say "BENCH_RUST=0: graphsmith-llama bench not run"
    elif [ -x "$gs" ]; then
      drop graphsmith-eager graphsmith-graphs graphsmith-eager-nopdl graphsmith-graphs-nopdl
      step "graphsmith-llama bench $cfg" "$gs" bench --model "$models/$name" --batch "$batch" --steps "$steps" \
        --warmup "$warmup" --mode eager,graphs --pdl "${BENCH_PDL:-auto,off}" --ttft "${BENCH_TTFT:-512,2048}" \
        --json >"$rows.gs" || fail "graphsmith-llama bench $cfg"
      # The report keys rows on the config's name; the Rust bench may print the folder instead.
      # Its time-to-first-token lines (`"kind": "ttft"`) stay beside the decode lines.
      grep '^{' "$rows.gs" | "$py" -c 'import json,sys
for line in sys.stdin:
    row = json.loads(line); row["config"] = sys.argv[1]; print(json.dumps(row))' "$cfg" >>"$rows"
      rm -f "$rows.gs"
    else
      say "no $gs: graphsmith-llama bench not run"
    fi
    # One process per contender: compiled state and memory do not carry from one to the next.
    for impl in ${impls//,/ }; do
      drop "$impl"
      step "torch_bench $cfg $impl" "$py" $here/torch_bench.py --model "$models/$name" --config "$cfg" \
        --batch "$batch" --steps "$steps" --warmup "$warmup" --runs "$runs" --impls "$impl" ${BENCH_TUNE:+--tune} --json \
        >>"$rows" || fail "torch_bench $cfg $impl"
    done
  done
  cat "$out"/bench-*.jsonl >"$out/all.jsonl.tmp" 2>/dev/null
  "$py" $here/report.py "$out/all.jsonl.tmp" --md "$out/report.md" \
    --command "bash bench/llama/run.sh bench OUTDIR" >/dev/null 2>>"$log" || fail "report.py"
  rm -f "$out/all.jsonl.tmp"
  echo "llama bench: $(cat "$out"/bench-*.jsonl 2>/dev/null | grep -c '^{') rows, $failures failure(s); report $out/report.md"
  ;;

report)
  cat "$out"/bench-*.jsonl >"$out/all.jsonl.tmp" 2>/dev/null
  "$py" $here/report.py "$out/all.jsonl.tmp" --md "$out/report.md" --command "bash bench/llama/run.sh bench OUTDIR"
  rc=$?
  rm -f "$out/all.jsonl.tmp"
  echo "llama report: $out/report.md (exit $rc)"
  exit $rc
  ;;

shapes)
  # shapes.py's seven public shapes at full depth, random bf16 weights, one after another (smallest
  # first): the checkpoint (made in the scratch folder, deleted after the shape), graphsmith-llama
  # bench in graphs mode at batch 1 and 64 with a fresh launch-choice cache (the first search),
  # again with the same cache (the cached load; it also measures the time to first token), then
  # torch_bench's hf-forward (transformers' time to first token) and lean-compiled at batch 1 and
  # 64 in one process, and, where graphsmith-llama has it, swap-bench. One JSON-lines file per shape
  # in OUTDIR/shapes/ (every line names its shape; `"kind": "shapes-step"` lines record each step's
  # exit status and seconds), OUTDIR/shapes/runs.jsonl (one line per call: what ran, what was
  # skipped, the settings), OUTDIR/shapes.log, and OUTDIR/shapes-report.md over every shape file.
  all=$("$py" $here/shapes.py | "$py" -c 'import json,sys; print(",".join(json.loads(l)["shape"] for l in sys.stdin))')
  list=${SHAPES:-$all}
  for s in ${list//,/ }; do
    if [[ ",$all," != *",$s,"* ]]; then
      say "unknown shape '$s' in SHAPES: choose from $all (bench/llama/shapes.py)"
      exit 2
    fi
  done
  steps=${SHAPES_STEPS:-64}
  warmup=${SHAPES_WARMUP:-8}
  runs=${SHAPES_RUNS:-5}
  deadline=${SHAPES_DEADLINE:-540}
  swap_list=,${SHAPES_SWAP:-smollm2-135m,llama-3.2-1b,llama-3.2-3b},
  scratch=${SHAPES_SCRATCH:-/tmp/llama-shapes}
  # SHAPES_PARTS: which parts run (graphsmith, torch, swap; default all). A shape's earlier lines of
  # the parts left out stay in its file, so a later call can measure again only what is missing.
  parts=,${SHAPES_PARTS:-graphsmith,torch,swap},
  for p in ${parts//,/ }; do
    case $p in
      graphsmith | torch | swap) ;;
      *)
        say "unknown part '$p' in SHAPES_PARTS: choose from graphsmith,torch,swap"
        exit 2
        ;;
    esac
  done
  # SHAPES_KERNELS: the shapes whose decode steps kernel_times.py profiles (Nsight Compute), or all.
  kernels=,${SHAPES_KERNELS:-},
  SHAPES_KERNELS_BATCHES=${SHAPES_KERNELS_BATCHES:-1,64}
  [ "$kernels" = ",all," ] && kernels=,$all,
  for k in ${kernels//,/ }; do
    if [[ ",$all," != *",$k,"* ]]; then
      say "unknown shape '$k' in SHAPES_KERNELS: choose from $all, or all"
      exit 2
    fi
  done
  rows_dir=$out/shapes
  mkdir -p "$rows_dir" "$scratch"
  started=$SECONDS
  # cap SECONDS: a step's timeout, SECONDS or what is left of the deadline if less.
  cap() {
    local left=$((deadline - (SECONDS - started)))
    [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
  }
  # annotate FILE KEY=VALUE... KEY?=VALUE...: the JSON lines on stdin, each with the fields given
  # (KEY?= only where the line has no KEY; a VALUE that parses as JSON is taken as such, else as a
  # string), appended to FILE.
  annotate() {
    local file=$1
    shift
    "$py" $here/shapes_report.py --annotate "$@" >>"$file"
  }
  # timed SHAPE NAME LIMIT CMD...: runs CMD under `timeout LIMIT` (stdout to $tmp), records the
  # step's exit status and seconds in the shape's file; returns the status (124: cut by timeout).
  timed() {
    local shape=$1 name=$2 limit=$3
    shift 3
    local t0=$SECONDS rc
    : >"$tmp"
    if [ "$limit" -le 5 ]; then
      say "$shape $name: not run (SHAPES_DEADLINE reached)"
      echo "{\"kind\": \"shapes-step\", \"step\": \"$name\", \"exit\": null, \"seconds\": 0, \"note\": \"deadline\"}" |
        annotate "$rows_dir/$shape.jsonl" shape="$shape"
      return 124
    fi
    step "$shape $name" timeout --kill-after=15 "$limit" "$@" >"$tmp"
    rc=$?
    echo "{\"kind\": \"shapes-step\", \"step\": \"$name\", \"exit\": $rc, \"seconds\": $((SECONDS - t0)), \"timeout_s\": $limit}" |
      annotate "$rows_dir/$shape.jsonl" shape="$shape"
    [ $rc -eq 0 ] || fail "$shape $name (exit $rc)"
    return $rc
  }
  tmp=$(mktemp)
  has_swap=0
  if [ -x "$gs" ] && "$gs" help 2>/dev/null | grep -qw swap-bench; then
    has_swap=1
  fi
  [ -x "$gs" ] || say "no $gs (build it with scripts/gpu-build.sh): graphsmith-llama not run"
  ran=() skipped=()
  for s in ${list//,/ }; do
    # A shape begun with less than 30 s left would only be cut.
    if [ $((deadline - (SECONDS - started))) -lt 30 ]; then
      say "$s: skipped (SHAPES_DEADLINE=$deadline s: $((SECONDS - started)) s gone, under 30 s left)"
      skipped+=("$s")
      continue
    fi
    ran+=("$s")
    rows=$rows_dir/$s.jsonl
    kept=""
    if [ -s "$rows" ] && [ "$parts" != ",graphsmith,torch,swap," ]; then
      kept=$(mktemp)
      "$py" $here/shapes_report.py --keep-parts "$parts" <"$rows" >"$kept"
    fi
    : >"$rows"
    dir=$scratch/$s
    cache=$scratch/$s-cache
    rm -rf "$dir" "$dir-b" "$cache"
    shape_t0=$SECONDS
    if timed "$s" make "$(cap 600)" "$py" $here/make_model.py --config "$s" --seed 1 --out "$dir" --skip-reload; then
      if [ -x "$gs" ] && [[ $parts == *,graphsmith,* ]]; then
        gs_args=(bench --model "$dir" --batch 1,64 --steps "$steps" --warmup "$warmup" --runs "$runs" --mode graphs --json)
        # The bench lines carry neither steps, warm-up nor prompt length (the report needs them for
        # the KV bytes); the time-to-first-token lines keep their own prompt_len.
        fields=(shape="$s" config="$s" steps?="$steps" warmup?="$warmup" prompt_len?=32 runs?="$runs")
        t0=$SECONDS
        timed "$s" graphsmith-first "$(cap 300)" env GRAPHSMITH_CACHE_DIR="$cache" "$gs" "${gs_args[@]}" --no-ttft
        annotate "$rows" "${fields[@]}" phase=first run_s=$((SECONDS - t0)) <"$tmp"
        t0=$SECONDS
        timed "$s" graphsmith-cached "$(cap 300)" env GRAPHSMITH_CACHE_DIR="$cache" "$gs" "${gs_args[@]}" --ttft 512,2048
        annotate "$rows" "${fields[@]}" phase=cached run_s=$((SECONDS - t0)) <"$tmp"
        if [[ $kernels == *",$s,"* ]]; then
          # The same cache: the profiled steps run the launch choices the search stored. The
          # Nsight Compute reports stay in OUTDIR/kernels/.
          mkdir -p "$out/kernels"
          for kb in ${SHAPES_KERNELS_BATCHES//,/ }; do
            limit=$(cap 120)
            timed "$s" "kernels-b$kb" "$limit" "$py" $here/kernel_times.py run --bin "$gs" --model "$dir" \
              --batch "$kb" --context $((warmup + steps)) --cache "$cache" --out "$out/kernels/$s-b$kb" --timeout $((limit > 20 ? limit - 10 : 10)) --json
            annotate "$rows" shape="$s" <"$tmp"
            # The same steps as they run in the replayed graph (CUPTI's activity records,
            # programmatic dependent launch on): what each kernel adds to the step.
            tl=$out/timeline/$s-b$kb
            timed "$s" "timeline-b$kb" "$(cap 120)" env BATCH="$kb" STEPS="$steps" WARMUP="$warmup" GRAPHSMITH_CACHE_DIR="$cache" \
              GRAPHSMITH_LLAMA="$gs" bash $here/timeline/run.sh "$dir" "$tl" &&
              annotate "$rows" shape="$s" kind=timeline batch="$kb" <"$tl/summary.json"
          done
        fi
      fi
      if [ "${SHAPES_TORCH:-1}" != 0 ] && [[ $parts == *,torch,* ]]; then
        # hf-forward first: lean-compiled then drops transformers' copy of the weights.
        timed "$s" torch "$(cap 480)" "$py" $here/torch_bench.py --model "$dir" --config "$s" --batch 1,64 \
          --steps "$steps" --warmup "$warmup" --runs "$runs" --impls hf-forward,lean-compiled --ttft 512,2048 --json
        annotate "$rows" shape="$s" <"$tmp"
      fi
      if [ $has_swap = 1 ] && [[ $parts == *,swap,* ]] && [[ $swap_list == *",$s,"* ]]; then
        # The swapped-in weights: the same shape, seed 2 (the verification then sees a pointer left behind).
        if timed "$s" make-swap "$(cap 600)" "$py" $here/make_model.py --config "$s" --seed 2 --out "$dir-b" --skip-reload; then
          timed "$s" swap-bench "$(cap 300)" "$gs" swap-bench --model "$dir" --swap-model "$dir-b" \
            --rounds "${SHAPES_SWAP_ROUNDS:-5}" --json
          annotate "$rows" shape="$s" kind=swap <"$tmp"
        fi
      fi
    fi
    if [ -n "$kept" ]; then
      cat "$kept" >>"$rows"
      rm -f "$kept"
    fi
    rm -rf "$dir" "$dir-b" "$cache"
    say "$s: done in $((SECONDS - shape_t0)) s ($((SECONDS - started)) s since the start)"
  done
  rm -f "$tmp"
  "$py" -c 'import json,sys
ran, skipped = [s for s in sys.argv[4].split(",") if s], [s for s in sys.argv[5].split(",") if s]
keys = ["SHAPES", "SHAPES_PARTS", "SHAPES_STEPS", "SHAPES_WARMUP", "SHAPES_RUNS", "SHAPES_DEADLINE", "SHAPES_SWAP",
        "SHAPES_SWAP_ROUNDS", "SHAPES_TORCH", "SHAPES_KERNELS",
        "SHAPES_KERNELS_BATCHES"]
env = {k: v for k, v in ((k, __import__("os").environ.get(k)) for k in keys) if v is not None}
print(json.dumps({"kind": "shapes-run", "ran": ran, "skipped": skipped, "seconds": int(sys.argv[1]),
                  "deadline_s": int(sys.argv[2]), "swap_bench": sys.argv[3] == "1", "env": env,
                  "steps": int(sys.argv[6]), "warmup": int(sys.argv[7]), "runs": int(sys.argv[8])}))' \
    $((SECONDS - started)) "$deadline" "$has_swap" "$(IFS=,; echo "${ran[*]}")" "$(IFS=,; echo "${skipped[*]}")" \
    "$steps" "$warmup" "$runs" >>"$rows_dir/runs.jsonl"
  "$py" $here/report.py --shapes "$rows_dir" --md "$out/shapes-report.md" \
    --command "bash bench/llama/run.sh shapes OUTDIR" >/dev/null 2>>"$log" || fail "report.py --shapes"
  rest=""
  [ ${#skipped[@]} -gt 0 ] && rest="; skipped past SHAPES_DEADLINE: SHAPES=$(IFS=,; echo "${skipped[*]}") bash bench/llama/run.sh shapes $out"
  echo "llama shapes: ${#ran[@]} shape(s) in $((SECONDS - started)) s, $failures failure(s); report $out/shapes-report.md$rest"
  ;;

*)
  sed -n '2,30p' "$0"
  exit 2
  ;;
esac
[ "$failures" -eq 0 ]
