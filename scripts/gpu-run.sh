#!/usr/bin/env bash
# Runs, on a machine with an NVIDIA GPU, every test binary in gpu-bin/tests (GPU tests
# included), the CLI's probe and tour, and the tracer's suite (gpu-bin/trace/run_gpu.sh); writes
# one log per binary under $GPU_LOGS (default gpu-logs/), and prints the closing line
# "N passed, N failed", where "passed" counts only tests that really ran:
#   - a binary that dies without a result line counts as one failure;
#   - a test that says it did not run (a line of its output starting with "skipped" or "SKIP")
#     counts as failed, not passed;
#   - `graphsmith probe` and `graphsmith tour` count as one check each (a tour that skipped its
#     GPU parts failed);
#   - the tracer's suite adds its own closing counts (no closing line: one failure).
# Exit status 0 only when nothing failed. Set GPU_RUN_TRACE=0 to leave the tracer's suite out
# (it needs nvcc, and PyTorch with CUDA for its PyTorch cases).
set -u
cd "$(dirname "$0")/.."
bin=gpu-bin
logs=${GPU_LOGS:-gpu-logs}
mkdir -p "$logs"
if [ ! -d "$bin/tests" ]; then
  echo "!! no $bin/tests here: build it with scripts/gpu-build.sh on a machine with Rust and copy"
  echo "   gpu-bin/ into the repository's root on this machine"
  echo "0 passed, 1 failed"
  exit 1
fi
passed=0
failed=0
# The test binaries were built elsewhere: what they need is found through the environment.
# Tests that run the CLI:
GRAPHSMITH_BIN="$PWD/$bin/graphsmith"
# The tracer's tests that load the injection library:
GRAPHSMITH_TRACE_LIB="$PWD/$bin/libgraphsmith_trace.so"
# Tests that read files of the source tree (this copy of the repository):
GRAPHSMITH_REPO_DIR="$PWD"
export GRAPHSMITH_BIN GRAPHSMITH_TRACE_LIB GRAPHSMITH_REPO_DIR
skip_marker='^[[:space:]]*(skipped|skipping|SKIP)'
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
  s=$(grep -cE "$skip_marker" "$logs/$name.log")
  # A skipping test passed in the harness's count; here it did not run.
  if [ "$s" -gt "$p" ]; then s=$p; fi
  p=$((p - s))
  f=$((f + s))
  passed=$((passed + p))
  failed=$((failed + f))
  printf '%-60s %4s passed %3s failed\n' "$name" "$p" "$f"
  if [ "$s" != "0" ]; then
    echo "   $s test(s) did not run:"
    grep -E "$skip_marker" "$logs/$name.log" | head -n 10 | sed 's/^/   /'
  fi
  if [ "$f" != "$s" ]; then
    grep -E '^(test .* FAILED|---- )|panicked at' "$logs/$name.log" | head -n 20 | sed 's/^/   /'
  fi
done
# The CLI's probe and tour count as one check each; a tour that skipped its GPU parts failed here.
for cmd in probe tour; do
  if "$bin/graphsmith" "$cmd" >"$logs/cli-$cmd.log" 2>&1 \
    && { [ "$cmd" != tour ] || grep -qE '^tour finished: .*, 0 skipped$' "$logs/cli-$cmd.log"; }; then
    printf '%-60s ok\n' "graphsmith $cmd"
    passed=$((passed + 1))
  else
    echo "!! graphsmith $cmd failed or skipped its GPU parts:"
    tail -n 15 "$logs/cli-$cmd.log" | sed 's/^/   /'
    failed=$((failed + 1))
  fi
done
if [ "${GPU_RUN_TRACE:-1}" != 0 ]; then
  TRACE_OUT="$PWD/$logs/trace" bash "$bin/trace/run_gpu.sh" >"$logs/trace.log" 2>&1
  rc=$?
  counts=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$logs/trace.log" | tail -n 1)
  if [ -z "$counts" ]; then
    echo "!! tracer suite (trace/run_gpu.sh): no closing line (exit $rc); last lines:"
    tail -n 15 "$logs/trace.log" | sed 's/^/   /'
    failed=$((failed + 1))
  else
    p=${counts%% passed*}
    f=${counts#*passed, }
    f=${f%% failed}
    passed=$((passed + p))
    failed=$((failed + f))
    printf '%-60s %4s passed %3s failed\n' "tracer suite (trace/run_gpu.sh)" "$p" "$f"
    if [ "$f" != "0" ]; then
      grep -E '^(FAIL|failed:)' "$logs/trace.log" | head -n 20 | sed 's/^/   /'
    fi
  fi
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
