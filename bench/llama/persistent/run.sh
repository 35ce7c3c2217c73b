#!/usr/bin/env bash
# Builds step.cu with nvcc and runs it, on a machine with an NVIDIA GPU (sm_90):
#   bash bench/llama/persistent/run.sh OUTDIR [step's arguments: --layers --vocab --pos --rounds --reps --no-check]
# Environment: NVCC (nvcc on PATH, else /usr/local/cuda/bin/nvcc), CUDA_ARCH (sm_90).
set -euo pipefail
D=$(dirname "$0"); R=${1:?usage: bash bench/llama/persistent/run.sh OUTDIR [args]}; shift
mkdir -p "$R"
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
"$nvcc" -O3 -arch="${CUDA_ARCH:-sm_90}" -std=c++17 -Xptxas -v -o "$R/step" "$D/step.cu" > "$R/nvcc.log" 2>&1 \
  || { cat "$R/nvcc.log"; exit 1; }
"$nvcc" --version | grep -oE 'release [0-9.]+, V[0-9.]+' | head -n 1
timeout 300 "$R/step" "$@" | tee -a "$R/step.txt"
