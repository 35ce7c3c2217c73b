#!/usr/bin/env bash
# Runs, on the GPU machine, every test binary in gpu-bin/tests (GPU tests included) and the
# CLI's probe and tour, writes one log per binary under $GPU_LOGS (default gpu-logs/), and prints the
# closing line "N passed, N failed". A binary that dies without a result line counts as one
# failure. Exit status 0 only when nothing failed.
set -u
cd "$(dirname "$0")/.."
bin=gpu-bin
logs=${GPU_LOGS:-gpu-logs}
mkdir -p "$logs"
passed=0
failed=0
# Tests that run the CLI find it here (they were built where the binary had another path).
GRAPHSMITH_BIN="$PWD/$bin/graphsmith"
export GRAPHSMITH_BIN
for t in "$bin"/tests/*; do
  name=$(basename "$t")
  "$t" --include-ignored --test-threads=1 --show-output >"$logs/$name.log" 2>&1
  rc=$?
  results=$(grep -E '^test result: ' "$logs/$name.log")
  if [ -z "$results" ]; then
    echo "!! $name: no result line (exit $rc); last lines:"
    tail -n 15 "$logs/$name.log" | sed 's/^/   /'
    failed=$((failed + 1))
    continue
  fi
  p=$(echo "$results" | sed -E 's/.* ([0-9]+) passed.*/\1/' | awk '{s+=$1} END {print s}')
  f=$(echo "$results" | sed -E 's/.* ([0-9]+) failed.*/\1/' | awk '{s+=$1} END {print s}')
  passed=$((passed + p))
  failed=$((failed + f))
  printf '%-60s %4s passed %3s failed\n' "$name" "$p" "$f"
  if [ "$f" != "0" ]; then
    grep -E '^(test .* FAILED|---- )|panicked at' "$logs/$name.log" | head -n 20 | sed 's/^/   /'
  fi
done
for cmd in probe tour; do
  if "$bin/graphsmith" "$cmd" >"$logs/cli-$cmd.log" 2>&1; then
    printf '%-60s ok\n' "graphsmith $cmd"
  else
    echo "!! graphsmith $cmd failed:"; tail -n 15 "$logs/cli-$cmd.log" | sed 's/^/   /'
    failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
