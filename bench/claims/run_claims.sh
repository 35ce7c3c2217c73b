#!/usr/bin/env bash
# Settles claims about CUDA graphs found in tutorials and posts (docs/claims.md), on a machine
# with an NVIDIA GPU, in one command: compiles every
# bench/claims/claim_*.cu with nvcc, runs each (and claim_i_torch_gc.py where PyTorch is
# installed), and writes their full output plus a summary of the `CLAIM <id>: ... -> verdict`
# lines to bench/results/<date>-claims.txt.
#
#   bash bench/claims/run_claims.sh          # every claim -> bench/results/<date>-claims.txt
#   bash bench/claims/run_claims.sh a g      # only claims a and g, to stdout (no results file)
#
# Environment: NVCC (nvcc on PATH, else /usr/local/cuda/bin/nvcc), CUDA_ARCH (sm_90),
# CLAIMS_OUT (the results file of a full run).
set -uo pipefail
cd "$(dirname "$0")/../.."

arch=${CUDA_ARCH:-sm_90}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
date=$(date -u +%F)
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT

ids=("$@")
selected() {
  local id=$1
  [ ${#ids[@]} -eq 0 ] && return 0
  for want in "${ids[@]}"; do [ "$want" = "$id" ] && return 0; done
  return 1
}

progs=()
for src in bench/claims/claim_*.cu; do
  name=$(basename "$src" .cu)
  id=${name#claim_}
  id=${id%%_*}
  selected "$id" && progs+=("$name")
done
if [ ${#progs[@]} -eq 0 ] && ! selected i; then
  echo "no claim matches: $*" >&2
  exit 2
fi

if [ ${#ids[@]} -eq 0 ]; then
  out=${CLAIMS_OUT:-bench/results/$date-claims.txt}
  mkdir -p "$(dirname "$out")"
else
  out=/dev/stdout
fi

run() {
  echo "== compiling ${#progs[@]} programs with $nvcc -O2 -arch=$arch" >&2
  # In parallel: each compile is independent.
  for name in "${progs[@]}"; do
    ( "$nvcc" -O2 -arch="$arch" -lpthread -o "$build/$name" "bench/claims/$name.cu" >"$build/$name.nvcc.log" 2>&1 \
        || echo failed >"$build/$name.failed" ) &
  done
  wait
  echo "# Claims about CUDA graphs, measured"
  echo
  echo "date: $date (UTC)"
  echo "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1) (name, driver)"
  echo "nvcc: $("$nvcc" --version 2>/dev/null | grep -oE 'release [0-9.]+, V[0-9.]+' | head -n 1)"
  echo "command: bash bench/claims/run_claims.sh $*"
  echo
  for name in "${progs[@]}"; do
    echo "=== $name (bench/claims/$name.cu)"
    if [ -f "$build/$name.failed" ]; then
      echo "CLAIM ${name#claim_}: not run, the program did not compile -> n/a"
      cat "$build/$name.nvcc.log"
      echo
      continue
    fi
    timeout 300 "$build/$name" >"$build/$name.out" 2>&1
    rc=$?
    cat "$build/$name.out"
    [ $rc -eq 0 ] || echo "(exit status $rc)"
    if ! grep -q '^CLAIM ' "$build/$name.out"; then
      id=${name#claim_}
      echo "CLAIM ${id%%_*}: the program stopped before its verdict (exit status $rc; last line: $(tail -n 1 "$build/$name.out" | cut -c1-200)) -> n/a"
    fi
    echo
  done
  if selected i; then
    echo "=== claim_i_torch_gc.py (bench/claims/claim_i_torch_gc.py)"
    timeout 300 python3 bench/claims/claim_i_torch_gc.py 2>&1
    echo
  fi
}

if [ "$out" = /dev/stdout ]; then
  run "$@" | tee "$build/all.txt"
  echo "== summary"
  grep -E '^CLAIM ' "$build/all.txt"
else
  run "$@" >"$build/all.txt"
  {
    echo "## Verdicts"
    echo
    grep -E '^CLAIM ' "$build/all.txt"
    echo
    echo "## Full output"
    echo
    cat "$build/all.txt"
  } >"$out"
  grep -E '^CLAIM ' "$build/all.txt"
  echo "written: $out"
fi
