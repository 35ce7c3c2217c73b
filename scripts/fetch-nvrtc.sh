#!/usr/bin/env bash
# Fetches NVRTC 13.0 from PyPI (NVIDIA's nvidia-cuda-nvrtc wheel) into DIR, unless it is already
# there, and prints the path of its libnvrtc.so.13: what graphsmith-llama's build script compiles
# kernels/llama_kernels.cu with (through NVRTC_LIB). Needs python3 with pip and unzip; no GPU.
#
#   export NVRTC_LIB=$(scripts/fetch-nvrtc.sh DIR)
set -euo pipefail
if [[ $# -ne 1 ]]; then
  echo "usage: scripts/fetch-nvrtc.sh DIR (prints DIR/nvidia/cu13/lib/libnvrtc.so.13)" >&2
  exit 2
fi
dir=$1
lib=$dir/nvidia/cu13/lib/libnvrtc.so.13
if [[ ! -f $lib ]]; then
  mkdir -p "$dir"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$dir" "nvidia-cuda-nvrtc==13.0.*" >&2
  unzip -o -q "$dir"/nvidia_cuda_nvrtc-13.0.*.whl -d "$dir"
fi
if [[ ! -f $lib ]]; then
  echo "fetch-nvrtc.sh: the nvidia-cuda-nvrtc 13.0 wheel in $dir holds no nvidia/cu13/lib/libnvrtc.so.13" >&2
  exit 1
fi
echo "$(cd "$(dirname "$lib")" && pwd)/libnvrtc.so.13"
