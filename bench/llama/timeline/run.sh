#!/usr/bin/env bash
# A timeline of replayed decode steps, kernel by kernel, on a machine with an NVIDIA GPU:
# builds kernel_timeline.c against the CUDA toolkit's CUPTI, runs graphsmith-llama bench at
# batch 1 (graphs, programmatic launch) with it injected, and summarizes where a step's time
# goes (summarize.py). The bench's own ms per step, with and without the injection, says what
# tracing costs.
#   bash bench/llama/timeline/run.sh MODEL_DIR OUTDIR
# Environment: GRAPHSMITH_LLAMA (default gpu-bin/graphsmith-llama), CUDA_HOME (/usr/local/cuda),
# BATCH (1), STEPS (256) and WARMUP (32) of the bench (they size its context, and with it the
# attention's launch), PDL (auto; off times each kernel without overlap), TUNE (the bench's --tune, none),
# GRAPH (which graph summarize.py takes: the one launched most often, or `last`: the step of the
# last --tune pass).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
M=${1:?usage: run.sh MODEL_DIR OUTDIR}; R=${2:?usage: run.sh MODEL_DIR OUTDIR}
G=${GRAPHSMITH_LLAMA:-gpu-bin/graphsmith-llama}; CUDA=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$R"
inc=""; for d in "$CUDA/include" "$CUDA/extras/CUPTI/include"; do [ -f "$d/cupti.h" ] && inc="$d" && break; done
lib=""; for d in "$CUDA/lib64" "$CUDA/extras/CUPTI/lib64"; do ls "$d"/libcupti.so* >/dev/null 2>&1 && lib="$d" && break; done
[ -n "$inc" ] && [ -n "$lib" ] || { echo "no CUPTI headers or library under $CUDA"; exit 1; }
krec=$(grep -ho 'CUpti_ActivityKernel[0-9]*' "$inc"/cupti_activity*.h | sort -uV | tail -n 1)
echo "CUPTI: $inc, $lib; kernel record $krec"
gcc -O2 -shared -fPIC -DKREC="$krec" -I"$inc" -I"$CUDA/include" -o "$R/libkernel_timeline.so" \
  "$HERE/kernel_timeline.c" -L"$lib" -lcupti -Wl,-rpath,"$lib"
args=(bench --model "$M" --batch "${BATCH:-1}" --steps "${STEPS:-256}" --warmup "${WARMUP:-32}" --mode graphs --pdl "${PDL:-auto}" --json)
[ -n "${TUNE:-}" ] && args+=(--tune "$TUNE")
"$G" "${args[@]}" > "$R/plain.jsonl" 2> "$R/plain.err"
CUDA_INJECTION64_PATH="$R/libkernel_timeline.so" KERNEL_TIMELINE_OUT="$R/timeline.tsv" \
  "$G" "${args[@]}" > "$R/traced.jsonl" 2> "$R/traced.err"
python3 - "$R" <<'PY'
import json, sys
r = sys.argv[1]
for k in ("plain", "traced"):
    d = json.loads(open(f"{r}/{k}.jsonl").readline())
    print(f"{k}: {d['ms_per_step']:.4f} ms per step")
PY
tail -n 1 "$R/traced.err"
sel=(--first 12); [ -n "${GRAPH:-}" ] && sel+=(--graph "$GRAPH")
python3 "$HERE/summarize.py" "$R/timeline.tsv" "${sel[@]}" | tee "$R/summary.txt"
python3 "$HERE/summarize.py" "$R/timeline.tsv" "${sel[@]}" --json > "$R/summary.json"
