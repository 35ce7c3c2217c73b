#!/usr/bin/env bash
# The Llama decoder against transformers, on a machine with an NVIDIA GPU, PyTorch and
# transformers (no network needed). From the repository root:
#
#   bash bench/llama/run.sh smoke OUTDIR   # tiny config: model, reference, torch_bench at batch 1 (< 2 min)
#   bash bench/llama/run.sh check OUTDIR   # small-a, small-b, 1b: references, graphsmith-llama check (15 checks)
#   bash bench/llama/run.sh bench OUTDIR   # graphsmith-llama bench + torch_bench, batch 1,8,64, then the report
#   bash bench/llama/run.sh report OUTDIR  # the report again from OUTDIR/bench-*.jsonl
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
set -uo pipefail
cd "$(dirname "$0")/../.."

mode=${1:-}
out=${2:-}
if [ -z "$mode" ] || [ -z "$out" ]; then
  sed -n '2,22p' "$0"
  exit 2
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
py=${PYTHON:-python3}
gs=${GRAPHSMITH_LLAMA:-gpu-bin/graphsmith-llama}
models=${LLAMA_MODELS:-/tmp/llama-models}
here=bench/llama
mkdir -p "$out" "$models"
log=$out/$mode.log
: >"$log"

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

*)
  sed -n '2,22p' "$0"
  exit 2
  ;;
esac
[ "$failures" -eq 0 ]
