#!/usr/bin/env bash
# Builds the graphsmith wheel from a clean checkout: the `graphsmith` binary, the injection
# library `graphsmith trace` loads (libgraphsmith_trace.so) and the Python package with its
# extension module (crates/graphsmith-py), for Linux x86-64 with glibc 2.31 or newer
# (manylinux_2_31: Ubuntu 20.04, Debian 11, RHEL 9 and later), linked with zig so the build
# machine's newer glibc does not leak in. (Not older: Rust 1.95's standard library calls
# gettid, which glibc has since 2.30.)
#
#   scripts/build-wheel.sh          # the release wheel into dist/
#   scripts/build-wheel.sh --test   # and install it into a fresh virtual environment, run the
#                                   # command and the pytest suite there
#   scripts/build-wheel.sh --dev --test
#                                   # the same with a debug build for this machine's glibc,
#                                   # from target/debug (what .ci/run does: no zig, no release
#                                   # rebuild)
#
# Needs a Rust toolchain and Python 3.9+ with venv; maturin, ziglang and cargo-zigbuild come from
# PyPI into target/wheel-tools, and NVRTC 13.0 (unless NVRTC_LIB is set) into target/nvrtc
# (nothing is installed outside the checkout). No CUDA toolkit is needed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

test_after=0
dev=0
for arg in "$@"; do
  case "$arg" in
    --test) test_after=1 ;;
    --dev) dev=1 ;;
    -h | --help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "build-wheel.sh: unknown argument $arg (try --help)" >&2; exit 2 ;;
  esac
done

glibc=2.31
target=x86_64-unknown-linux-gnu
python=${PYTHON:-python3}

# The build tools, pinned, in their own environment.
tools=$root/target/wheel-tools
if [[ ! -x $tools/bin/maturin ]]; then
  "$python" -m venv "$tools"
  "$tools/bin/pip" install --quiet --disable-pip-version-check "maturin==1.16.0"
fi
if [[ $dev == 0 && ! -x $tools/bin/cargo-zigbuild ]]; then
  "$tools/bin/pip" install --quiet --disable-pip-version-check \
    "ziglang==0.15.2" "cargo-zigbuild==0.24.1"
fi
export PATH=$tools/bin:$PATH

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

# 1. The binary and the injection library (in release, against glibc $glibc).
if [[ $dev == 1 ]]; then
  cargo build --locked -p graphsmith-cli -p graphsmith-trace
  built=$root/target/debug
else
  rustup target add "$target" >/dev/null 2>&1 || true
  cargo zigbuild --release --locked --target "$target.$glibc" -p graphsmith-cli -p graphsmith-trace
  built=$root/target/$target/release
fi
bin_dir=$root/crates/graphsmith-py/python/graphsmith/_bin
mkdir -p "$bin_dir"
install -m 755 "$built/graphsmith" "$bin_dir/graphsmith"
install -m 755 "$built/libgraphsmith_trace.so" "$bin_dir/libgraphsmith_trace.so"

# No symbol of either may need a glibc newer than $glibc (maturin checks only the extension),
# and none may be left unversioned and strong: the loader of an older glibc would not find it.
newest_glibc() {
  objdump -T "$1" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n 1
}
for f in "$bin_dir/graphsmith" "$bin_dir/libgraphsmith_trace.so"; do
  [[ $dev == 1 ]] && break
  unversioned=$(objdump -T "$f" | awk '$2 != "w" && /\*UND\*/ && / Base /' || true)
  if [[ -n $unversioned ]]; then
    echo "build-wheel.sh: $f has undefined symbols without a version:" >&2
    echo "$unversioned" >&2
    exit 1
  fi
  newest=$(newest_glibc "$f")
  if [[ $(printf '%s\n%s\n' "$newest" "$glibc" | sort -V | tail -n 1) != "$glibc" ]]; then
    echo "build-wheel.sh: $f needs GLIBC_$newest, newer than $glibc" >&2
    exit 1
  fi
  echo "$(basename "$f"): newest glibc symbol $newest (limit $glibc)"
done

# 2. The extension module and the wheel.
rm -rf "$root/dist"
if [[ $dev == 1 ]]; then
  maturin build --locked -m crates/graphsmith-py/Cargo.toml --out "$root/dist"
else
  maturin build --release --locked --zig --target "$target" --compatibility "manylinux_${glibc/./_}" \
    -m crates/graphsmith-py/Cargo.toml --out "$root/dist"
fi
wheel=$(ls "$root"/dist/graphsmith-*.whl)
echo "built $wheel"

# 3. Optionally: a fresh environment, the wheel, the command and the tests.
if [[ $test_after == 1 ]]; then
  venv=$(mktemp -d "${TMPDIR:-/tmp}/graphsmith-wheel-test.XXXXXX")
  trap 'rm -rf "$venv"' EXIT
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$wheel" pytest
  # From another directory, so that the installed package is imported, not the source tree.
  (
    cd "$venv"
    PATH=$venv/bin:$PATH
    graphsmith --help >/dev/null
    graphsmith explain 900 >/dev/null
    python -c 'import graphsmith; print("import graphsmith:", graphsmith.binary())'
    python -m pytest -q -p no:cacheprovider "$root/crates/graphsmith-py/tests"
  )
fi
