#!/usr/bin/env python3
"""Compile kernels/graphsmith_kernels.cu (or, with --source llama, kernels/llama_kernels.cu)
to PTX with NVRTC (no GPU needed).

Usage:
    python3 kernels/build_ptx.py --nvrtc /path/to/libnvrtc.so.13
    NVRTC_LIB=/path/to/libnvrtc.so.13 python3 kernels/build_ptx.py
    python3 kernels/build_ptx.py --nvrtc /path/to/libnvrtc.so.13 --source llama

Writes (next to this script):
    graphsmith_kernels.ptx   PTX for compute_90 (committed; loaded via include_str!)
    mangled_names.txt        "<name expression> <lowered/mangled name>" per line
or, with --source llama:
    llama_kernels.ptx        PTX for compute_90, its first line the source's SHA-256
                             ("// llama_kernels.cu sha256 <hex>", as graphsmith-llama's build
                             script writes it; the build uses this file only while they match)
"""

import argparse
import ctypes
import hashlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "graphsmith_kernels.cu")
PTX_OUT = os.path.join(HERE, "graphsmith_kernels.ptx")
NAMES_OUT = os.path.join(HERE, "mangled_names.txt")

OPTIONS = ["--gpu-architecture=compute_90", "-std=c++17"]
# C++-linkage kernels whose mangled names we record.
NAME_EXPRESSIONS = ["proj", "attention"]
# Every kernel that must appear as a .entry in the PTX (extern "C" ones by name).
EXTERN_C_KERNELS = [
    "gs_fill_f32",
    "gs_add_scalar_f32",
    "gs_scale_f32",
    "gs_axpy_f32",
    "gs_add_f32",
    "gs_copy_f32",
    "gs_spin",
    "gs_empty",
    "gs_pdl_add_scalar_f32",
    "gs_pdl_add_f32",
    "gs_pdl_spin_fill_f32",
    "gs_pdl_copy_early_f32",
    "gs_pdl_copy_f32",
    "gs_set_condition",
    "gs_while_countdown",
    "gs_switch_select",
]

# The decoder's kernels (crates/graphsmith-llama): all extern "C", no mangled names.
LLAMA = {
    "src": os.path.join(HERE, "llama_kernels.cu"),
    "ptx": os.path.join(HERE, "llama_kernels.ptx"),
    "names": None,
    "name_expressions": [],
    # The first line of the PTX names the source and its SHA-256 (graphsmith-llama's build
    # script compares it with the .cu; crates/graphsmith-llama/build/main.rs writes the same).
    "header": True,
    "extern_c": ["ll_embed", "ll_rmsnorm", "ll_swiglu", "ll_argmax", "ll_advance"]
    + [f"ll_attention_{e}{g}" for e in (1, 2, 4, 8) for g in ("", "_g4")]
    + [f"ll_attention_{e}_c8" for e in (1, 2, 4)]
    + [
        f"ll_gemv_{v}_{r}"
        for v in ("norm", "norm_swiglu", "res", "swiglu_res", "norm_f32", "head")
        for r in (1, 2, 4, 8)
    ]
    + ["ll_prefill_rope", "ll_gather_rows"]
    + [f"ll_prefill_attention_{e}{g}" for e in (1, 2, 4, 8) for g in ("", "_g4")]
    + ["ll_prefill_flash_64", "ll_prefill_flash_128"],
}

NVRTC_SUCCESS = 0


def die(msg):
    print(f"build_ptx.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def load_nvrtc(path):
    if not path:
        die(
            "no NVRTC library given; pass --nvrtc /path/to/libnvrtc.so.13 or set "
            "NVRTC_LIB. Get it with:\n"
            '  pip download --no-deps -d /tmp/nvrtc "nvidia-cuda-nvrtc==13.0.*" && '
            "unzip -o -q /tmp/nvrtc/*.whl -d /tmp/nvrtc/x\n"
            "  -> /tmp/nvrtc/x/nvidia/cu13/lib/libnvrtc.so.13"
        )
    if not os.path.isfile(path):
        die(f"NVRTC library not found: {path}")
    # libnvrtc dlopen()s libnvrtc-builtins.so.<major>.<minor> by soname at compile
    # time; a pip wheel's lib dir is not on the loader path, so preload the
    # builtins from the same directory (RTLD_GLOBAL) so that dlopen finds them.
    libdir = os.path.dirname(os.path.abspath(path))
    builtins = sorted(f for f in os.listdir(libdir)
                      if f.startswith("libnvrtc-builtins.so"))
    for b in builtins:
        try:
            ctypes.CDLL(os.path.join(libdir, b), mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            print(f"build_ptx.py: warning: cannot preload {b}: {e}", file=sys.stderr)
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        die(f"cannot load NVRTC library {path}: {e}")

    c_char_pp = ctypes.POINTER(ctypes.c_char_p)
    prog_p = ctypes.POINTER(ctypes.c_void_p)
    sigs = {
        "nvrtcGetErrorString": (ctypes.c_char_p, [ctypes.c_int]),
        "nvrtcVersion": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int)] * 2),
        "nvrtcCreateProgram": (
            ctypes.c_int,
            [prog_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, c_char_pp, c_char_pp],
        ),
        "nvrtcDestroyProgram": (ctypes.c_int, [prog_p]),
        "nvrtcAddNameExpression": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]),
        "nvrtcCompileProgram": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, c_char_pp]),
        "nvrtcGetProgramLogSize": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]),
        "nvrtcGetProgramLog": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]),
        "nvrtcGetPTXSize": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]),
        "nvrtcGetPTX": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]),
        "nvrtcGetLoweredName": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, c_char_pp]),
    }
    for name, (res, args) in sigs.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            die(f"{path} has no symbol {name}; is this really libnvrtc?")
        fn.restype = res
        fn.argtypes = args
    return lib


def check(lib, rc, what):
    if rc != NVRTC_SUCCESS:
        msg = lib.nvrtcGetErrorString(rc)
        die(f"{what} failed: {msg.decode() if msg else rc} ({rc})")


def get_log(lib, prog):
    size = ctypes.c_size_t()
    check(lib, lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
    buf = ctypes.create_string_buffer(size.value)
    check(lib, lib.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
    return buf.value.decode(errors="replace")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nvrtc", default=os.environ.get("NVRTC_LIB"),
                    help="path to libnvrtc.so.13 (default: $NVRTC_LIB)")
    ap.add_argument("--source", choices=["builtin", "llama"], default="builtin",
                    help="which kernels: builtin (graphsmith_kernels.cu) or llama (llama_kernels.cu)")
    args = ap.parse_args()
    global SRC, PTX_OUT, NAMES_OUT, NAME_EXPRESSIONS, EXTERN_C_KERNELS
    header = False
    if args.source == "llama":
        SRC, PTX_OUT, NAMES_OUT = LLAMA["src"], LLAMA["ptx"], LLAMA["names"]
        NAME_EXPRESSIONS, EXTERN_C_KERNELS = LLAMA["name_expressions"], LLAMA["extern_c"]
        header = LLAMA["header"]

    lib = load_nvrtc(args.nvrtc)
    major, minor = ctypes.c_int(), ctypes.c_int()
    check(lib, lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    print(f"NVRTC {major.value}.{minor.value} ({args.nvrtc})")

    with open(SRC, "rb") as f:
        src = f.read()

    prog = ctypes.c_void_p()
    # Program name is fixed (not the absolute path) so the output is deterministic.
    check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), src, os.path.basename(SRC).encode(),
                                      0, None, None), "nvrtcCreateProgram")
    try:
        for expr in NAME_EXPRESSIONS:
            check(lib, lib.nvrtcAddNameExpression(prog, expr.encode()),
                  f"nvrtcAddNameExpression({expr})")

        opts = (ctypes.c_char_p * len(OPTIONS))(*[o.encode() for o in OPTIONS])
        rc = lib.nvrtcCompileProgram(prog, len(OPTIONS), opts)
        log = get_log(lib, prog)
        if rc != NVRTC_SUCCESS:
            print(f"--- NVRTC compile log ({' '.join(OPTIONS)}) ---", file=sys.stderr)
            print(log, file=sys.stderr)
            check(lib, rc, "nvrtcCompileProgram")
        if log.strip():
            print("--- NVRTC compile log (warnings) ---", file=sys.stderr)
            print(log, file=sys.stderr)

        size = ctypes.c_size_t()
        check(lib, lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
        buf = ctypes.create_string_buffer(size.value)
        check(lib, lib.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
        ptx = buf.value.decode()  # drops the trailing NUL

        lowered = []
        for expr in NAME_EXPRESSIONS:
            out = ctypes.c_char_p()
            check(lib, lib.nvrtcGetLoweredName(prog, expr.encode(), ctypes.byref(out)),
                  f"nvrtcGetLoweredName({expr})")
            lowered.append((expr, out.value.decode()))
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))

    # Sanity checks on the generated PTX.
    entries = set()
    for line in ptx.splitlines():
        s = line.strip()
        if s.startswith(".visible .entry ") or s.startswith(".entry "):
            entries.add(s.split(".entry ", 1)[1].split("(", 1)[0].strip())
    wanted = EXTERN_C_KERNELS + [m for _, m in lowered]
    missing = [k for k in wanted if k not in entries]
    if missing:
        die(f"PTX lacks .entry for: {', '.join(missing)} (found: {sorted(entries)})")
    if ".target sm_90" not in ptx:
        die("PTX has no '.target sm_90' line")

    with open(PTX_OUT, "w", newline="\n") as f:
        if header:
            f.write(f"// {os.path.basename(SRC)} sha256 {hashlib.sha256(src).hexdigest()}\n")
        f.write(ptx)
    if NAMES_OUT:
        with open(NAMES_OUT, "w", newline="\n") as f:
            for expr, mangled in lowered:
                f.write(f"{expr} {mangled}\n")

    version = next((l.strip() for l in ptx.splitlines() if l.startswith(".version")), "?")
    target = next((l.strip() for l in ptx.splitlines() if l.startswith(".target")), "?")
    print(f"wrote {os.path.relpath(PTX_OUT)} ({len(ptx)} bytes; {version}; {target}; "
          f"{len(entries)} entries)")
    for expr, mangled in lowered:
        print(f"{expr} {mangled}")
    if NAMES_OUT:
        print(f"wrote {os.path.relpath(NAMES_OUT)}")


if __name__ == "__main__":
    main()
