#!/usr/bin/env bash
# Builds, on any machine with a Rust toolchain (no GPU or CUDA toolkit needed), every test
# binary and example of the workspace, the graphsmith CLI and the tracer's injection library in
# release mode, and copies them into gpu-bin/. Copy the repository with gpu-bin/ to a machine
# with an NVIDIA GPU and run `bash scripts/gpu-run.sh` there (CONTRIBUTING.md says how). The
# test binaries find what they need there through environment variables that gpu-run.sh sets
# (GRAPHSMITH_BIN, GRAPHSMITH_TRACE_LIB, GRAPHSMITH_REPO_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
# NVRTC 13.0 for graphsmith-llama's build script (kernels/README.md): $NVRTC_LIB, else fetched
# from PyPI into target/nvrtc; without it the build takes the committed PTX when it matches
# kernels/llama_kernels.cu.
if [[ -z ${NVRTC_LIB:-} ]]; then
  if lib=$(scripts/fetch-nvrtc.sh "$PWD/target/nvrtc"); then
    export NVRTC_LIB=$lib
  else
    echo "$(basename "$0"): could not fetch NVRTC 13.0; building with the committed PTX" >&2
  fi
fi
rm -rf gpu-bin
mkdir -p gpu-bin/tests
cargo build --release -p graphsmith-cli
cp target/release/graphsmith gpu-bin/
# graphsmith trace's injection library goes beside the binary (where `graphsmith trace` looks
# for it), with the tracer's GPU test programs and script (run: bash gpu-bin/trace/run_gpu.sh).
cargo build --release -p graphsmith-trace
# The Llama-architecture decoder (bench/llama/run.sh runs it as gpu-bin/graphsmith-llama).
cargo build --release -p graphsmith-llama
cp target/release/graphsmith-llama gpu-bin/
cp target/release/libgraphsmith_trace.so gpu-bin/
mkdir -p gpu-bin/trace
cp -r crates/graphsmith-trace/tests/run_gpu.sh crates/graphsmith-trace/tests/programs gpu-bin/trace/
cargo test --release --workspace --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, shutil, sys, os
seen = set()
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if msg.get("reason") != "compiler-artifact" or not msg.get("profile", {}).get("test"):
        continue
    exe = msg.get("executable")
    if not exe:
        continue
    name = msg["target"]["name"].replace("-", "_")
    kind = msg["target"]["kind"][0]
    dest = "gpu-bin/tests/%s-%s-%s" % (msg["package_id"].split("#")[0].rstrip("/").split("/")[-1], kind, name)
    if dest in seen:
        continue
    seen.add(dest)
    shutil.copy2(exe, dest)
    print("  " + dest)
'
cargo build --release --workspace --examples
mkdir -p gpu-bin/examples
for f in target/release/examples/*; do
  name=$(basename "$f")
  case "$name" in *-*|*.d|*.rlib) continue ;; esac
  [ -f "$f" ] && [ -x "$f" ] && cp "$f" gpu-bin/examples/
done
# Symbols are not needed there; stripping keeps gpu-bin/ small to copy.
strip gpu-bin/graphsmith gpu-bin/tests/* gpu-bin/examples/* 2>/dev/null || true
strip --strip-debug gpu-bin/libgraphsmith_trace.so 2>/dev/null || true
cp scripts/gpu-run.sh gpu-bin/
du -sh gpu-bin
