#!/usr/bin/env python3
"""Where a decode step's time goes, kernel by kernel, from Nsight Compute (stdlib only).

    python3 bench/llama/kernel_times.py run --bin gpu-bin/graphsmith-llama --model DIR --batch 1 \\
        [--steps 2] [--context 72] [--cache DIR] [--out PREFIX] [--timeout 100] [--json]
    python3 bench/llama/kernel_times.py summarize REPORT.csv --steps S [--batch B] [--json]
    python3 bench/llama/kernel_times.py --self-test

`run` profiles `graphsmith-llama bench --profile` in graphs mode (one run of C - S warm-up steps
and S timed steps at batch B, no time to first token) under `ncu --profile-from-start off
--graph-profiling node`: the bench turns profile collection on only around that run's steps, so
the report holds exactly S decode steps' kernels, each graph node on its own. C (--context, the
warm-up plus the timed steps of the bench being explained: `run.sh shapes` passes its own) sizes
the model's context as that bench's, and the launch rules that depend on it (the attention's
splits and clusters) pick what that bench ran. With --cache, GRAPHSMITH_CACHE_DIR points at
that launch-choice cache, so the profiled steps run the choices a search stored there. Then
`ncu --import PREFIX.ncu-rep --csv --page raw` and the summary: per kernel (template and parameter
lists stripped), launches per step, median µs per launch, µs per step, MB read + written from
DRAM per step, achieved GB/s and share of the summed kernel time; and the summed kernel time per
step. Nsight Compute runs the kernels one at a time: each time is the kernel alone, without the
overlap programmatic dependent launch gives, and the clocks are left as the GPU sets them
(--clock-control none).

ncu: `ncu` on PATH, else /opt/nvidia/nsight-compute/*/ncu, else /usr/local/cuda/bin/ncu. On
failure (no ncu, profiling refused, nothing profiled) one line `{"kind": "kernels", "error": ...}`
and a non-zero exit status.
"""

import argparse
import csv
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum")
NOTE = ("Nsight Compute serializes kernels: each time is the kernel alone, without the overlap "
        "programmatic dependent launch gives")
NAME_COLUMNS = ("Kernel Name", "Function Name", "Demangled Name")
# Units ncu prints (auto-scaled unless --print-units base), to µs and bytes.
TIME_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "µs": 1.0, "msecond": 1e3, "ms": 1e3,
           "second": 1e6, "s": 1e6}
BYTES = {"byte": 1, "b": 1, "kbyte": 1e3, "kb": 1e3, "mbyte": 1e6, "mb": 1e6, "gbyte": 1e9, "gb": 1e9,
         "tbyte": 1e12, "tb": 1e12, "kibyte": 1024, "kib": 1024, "mibyte": 1024 ** 2, "mib": 1024 ** 2,
         "gibyte": 1024 ** 3, "gib": 1024 ** 3}


class KernelTimesError(Exception):
    pass


def short_name(name):
    """A kernel's name without return type, template and parameter lists: `void f<4>(int)` → `f`.
    A generic wrapper (`cutlass::Kernel2<cutlass_80_..._gemm<...>>`) is named by its first
    template argument instead."""
    name = name.strip()
    if name.startswith("void "):
        name = name[5:]
    cut = [i for i in (name.find("<"), name.find("(")) if i >= 0]
    base = name[: min(cut)] if cut else name
    if cut and name[min(cut)] == "<" and re.search(r"(^|::)(Kernel\d*|kernel\d*|device_kernel)$", base):
        inner = name[min(cut) + 1:]
        depth, end = 0, len(inner)
        for i, ch in enumerate(inner):
            if ch in "<(":
                depth += 1
            elif ch in ">)":
                if depth == 0:
                    end = i
                    break
                depth -= 1
            elif ch == "," and depth == 0:
                end = i
                break
        arg = short_name(inner[:end])
        if arg:
            return arg
    return base.strip() or name


def launch_shape(row):
    """`grid 256x1x1, block 128x1x1` from ncu's "Grid Size" and "Block Size" columns (`(256, 1,
    1)`), or "" where the CSV has neither."""
    parts = []
    for label, col in (("grid", "Grid Size"), ("block", "Block Size")):
        dims = re.findall(r"\d+", row.get(col, "") or "")
        if dims:
            parts.append(f"{label} {'x'.join(dims)}")
    return ", ".join(parts)


def number(text):
    """A figure as ncu prints it (`1,234.5`), or None (`n/a`, empty)."""
    text = text.strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def scale(unit, table, column):
    if not unit:
        return 1.0  # no unit given: the base unit
    key = unit.strip().lower() if unit.strip().lower() in table else unit.strip()
    if key not in table:
        raise KernelTimesError(f"column {column}: unit '{unit}' is not one this script reads "
                               f"({', '.join(sorted(set(table)))})")
    return table[key]


def rows_of(csv_text):
    """(header, units, rows) of ncu's raw CSV: lines before the header (`==PROF==` notes) are
    skipped; the units row and any other row whose ID is not an integer are set apart."""
    lines = csv_text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"') or line.startswith("ID,")), None)
    if start is None:
        raise KernelTimesError("no header row (a line starting with \"ID\") in ncu's CSV: no kernel was profiled")
    reader = csv.reader(lines[start:])
    header = next(reader)
    units, rows = None, []
    for row in reader:
        if not row:
            continue
        cells = dict(zip(header, row))
        if re.fullmatch(r"\d+", cells.get("ID", "").strip()):
            rows.append(cells)
        elif units is None:
            units = cells
    return header, units or {}, rows


def summarize(csv_text, steps, batch=None):
    """The `{"kind": "kernels", ...}` summary of ncu's raw CSV of `steps` decode steps."""
    if steps < 1:
        raise KernelTimesError(f"steps must be at least 1, not {steps}")
    header, units, rows = rows_of(csv_text)
    name_col = next((c for c in NAME_COLUMNS if c in header), None)
    if name_col is None:
        raise KernelTimesError(f"none of the columns {', '.join(NAME_COLUMNS)} in ncu's CSV")
    if METRICS[0] not in header:
        raise KernelTimesError(f"no column {METRICS[0]} in ncu's CSV (was it profiled with --metrics {','.join(METRICS)}?)")
    if not rows:
        raise KernelTimesError("ncu's CSV holds no kernel: nothing ran between cuProfilerStart and cuProfilerStop "
                               "(is --profile given, and the profiler started with --profile-from-start off?)")
    t_scale = scale(units.get(METRICS[0], ""), TIME_US, METRICS[0])
    byte_cols = [(c, scale(units.get(c, ""), BYTES, c)) for c in METRICS[1:] if c in header]
    # A kernel launched with more than one grid or block (e.g. one GEMV kernel serving two
    # projections of different widths) is split by launch shape, so each row is one kind of work.
    shapes = {}
    for r in rows:
        shapes.setdefault(short_name(r[name_col]), set()).add(launch_shape(r))
    groups = {}
    for r in rows:
        us = number(r.get(METRICS[0], ""))
        if us is None:
            continue
        name = short_name(r[name_col])
        if len(shapes[name]) > 1 and launch_shape(r):
            name = f"{name} [{launch_shape(r)}]"
        g = groups.setdefault(name, {"us": [], "bytes": 0.0, "bytes_seen": False})
        g["us"].append(us * t_scale)
        for c, s in byte_cols:
            v = number(r.get(c, ""))
            if v is not None:
                g["bytes"] += v * s
                g["bytes_seen"] = True
    total = sum(sum(g["us"]) for g in groups.values())
    kernels = []
    for name, g in groups.items():
        us = sum(g["us"])
        kernels.append({
            "name": name,
            "per_step": len(g["us"]) / steps,
            "median_us": statistics.median(g["us"]),
            "us_per_step": us / steps,
            "mb_per_step": g["bytes"] / steps / 1e6 if g["bytes_seen"] else None,
            "gb_s": g["bytes"] / us / 1e3 if g["bytes_seen"] and us > 0 else None,
            "share": us / total if total > 0 else 0.0,
        })
    kernels.sort(key=lambda k: -k["us_per_step"])
    out = {"kind": "kernels", "batch": batch, "steps": steps, "kernel_us_per_step": total / steps,
           "launches_per_step": sum(len(g["us"]) for g in groups.values()) / steps, "kernels": kernels}
    return out


def table(summary):
    lines = [f"batch {summary.get('batch')}, {summary['steps']} step(s): {summary['kernel_us_per_step']:.1f} µs of "
             f"kernels per step, {summary.get('launches_per_step', 0):.0f} launches per step",
             f"{'kernel':<48} {'per step':>8} {'median µs':>10} {'µs/step':>9} {'MB/step':>9} {'GB/s':>7} {'share':>6}"]
    for k in summary["kernels"]:
        mb = "–" if k["mb_per_step"] is None else f"{k['mb_per_step']:.2f}"
        gbs = "–" if k["gb_s"] is None else f"{k['gb_s']:.0f}"
        lines.append(f"{k['name'][:48]:<48} {k['per_step']:>8.1f} {k['median_us']:>10.2f} {k['us_per_step']:>9.1f} "
                     f"{mb:>9} {gbs:>7} {k['share'] * 100:>5.1f}%")
    lines.append(f"({summary.get('note', NOTE)})")
    return "\n".join(lines)


def find_ncu():
    found = shutil.which("ncu")
    if found:
        return found
    for path in sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True) + ["/usr/local/cuda/bin/ncu"]:
        if os.access(path, os.X_OK):
            return path
    raise KernelTimesError("no ncu (Nsight Compute): not on PATH, nor in /opt/nvidia/nsight-compute/*/ nor "
                           "/usr/local/cuda/bin; install Nsight Compute or put its folder on PATH")


def tail(text, n=1500):
    text = (text or "").strip()
    return text[-n:]


def call(cmd, timeout, what, env=None):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise KernelTimesError(f"{what} did not finish in {timeout} s (--timeout): {' '.join(cmd)}")
    except OSError as e:
        raise KernelTimesError(f"{what} could not start: {e}")
    return p


def profile(args):
    ncu = find_ncu()
    version = call([ncu, "--version"], 30, "ncu --version")
    version = next((line.strip() for line in reversed(version.stdout.splitlines()) if "ersion" in line),
                   tail(version.stdout, 200))
    prefix = args.out or f"kernels-b{args.batch}"
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    env = dict(os.environ)
    if args.cache:
        env["GRAPHSMITH_CACHE_DIR"] = args.cache
    cmd = [ncu, "--profile-from-start", "off", "--clock-control", "none", "--graph-profiling", "node",
           "--metrics", ",".join(METRICS), "-o", prefix, "-f",
           args.bin, "bench", "--model", args.model, "--batch", str(args.batch), "--steps", str(args.steps),
           "--warmup", str(args.context - args.steps), "--runs", "1", "--mode", "graphs", "--no-ttft",
           "--profile", "--json"]
    p = call(cmd, args.timeout, "profiling", env)
    said = p.stdout + "\n" + p.stderr
    if "ERR_NVGPUCTRPERM" in said:
        raise KernelTimesError("profiling refused: this user may not read the GPU's performance counters "
                               "(ERR_NVGPUCTRPERM); run as root or allow them (NVreg_RestrictProfilingToAdminUsers=0)")
    if p.returncode != 0:
        raise KernelTimesError(f"profiling exited {p.returncode}: {tail(said)}")
    report = prefix + ".ncu-rep"
    if not os.path.exists(report):
        raise KernelTimesError(f"ncu wrote no {report} (nothing profiled?): {tail(said)}")
    bench = None
    for line in p.stdout.splitlines():
        try:
            bench = json.loads(line) if line.startswith("{") else None
        except ValueError:
            continue
        if isinstance(bench, dict):
            break
    if bench is not None and not bench.get("profiled"):
        raise KernelTimesError(f"the bench line does not say \"profiled\": true: {args.bin} has no --profile")
    imp = call([ncu, "--import", report, "--csv", "--page", "raw"], 120, "ncu --import")
    if imp.returncode != 0:
        raise KernelTimesError(f"ncu --import exited {imp.returncode}: {tail(imp.stdout + imp.stderr)}")
    summary = summarize(imp.stdout, args.steps, args.batch)
    summary["ncu"] = version
    summary["report"] = report
    if bench is not None:
        summary["profiled_ms_per_step"] = bench.get("ms_per_step")  # under the profiler: not a timing
    summary["note"] = NOTE
    return summary


def self_test():
    """A made-up CSV in ncu's raw format: notes before the header, a units row, thousands
    separators, auto-scaled units, templated and C++ names; two steps."""
    text = "\n".join([
        "==PROF== Connected to process 4242",
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
        '"Device","CC","dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum"',
        '"","","","","","","","","","","","Mbyte","Kbyte","usecond"',
    ] + [
        f'"{i}","4242","graphsmith-llama","h","{name}","1","13","(256, 1, 1)","(132, 1, 1)","0","9.0",'
        f'"{read}","{write}","{us}"'
        for i, (name, read, write, us) in enumerate([
            ("ll_gemv_bf16<4, true>(const bf16 *, int)", "1,200.00", "16.00", "1,500.00"),
            ("ll_rmsnorm", "0.50", "0.50", "2.00"),
            ("void cutlass::Kernel2<cutlass_80_gemm_bf16_64x64<2>>(T1::Params)", "20.00", "0.00", "10.00"),
            ("ll_gemv_bf16<4, true>(const bf16 *, int)", "1,200.00", "16.00", "1,300.00"),
            ("ll_rmsnorm", "0.50", "0.50", "4.00"),
            ("ll_rmsnorm", "n/a", "n/a", "3.00"),
            ("void cutlass::Kernel2<cutlass_80_gemm_bf16_64x64<2>>(T1::Params)", "20.00", "0.00", "12.00"),
        ])
    ])
    s = summarize(text, 2, batch=1)
    k = {x["name"]: x for x in s["kernels"]}
    assert list(k) == ["ll_gemv_bf16", "cutlass_80_gemm_bf16_64x64", "ll_rmsnorm"], list(k)
    assert abs(s["kernel_us_per_step"] - (1500 + 2 + 10 + 1300 + 4 + 3 + 12) / 2) < 1e-9, s
    g = k["ll_gemv_bf16"]
    assert g["per_step"] == 1.0 and g["median_us"] == 1400.0 and g["us_per_step"] == 1400.0, g
    assert abs(g["mb_per_step"] - (2 * 1200e6 + 2 * 16e3) / 2 / 1e6) < 1e-9, g
    assert abs(g["gb_s"] - (2 * 1200e6 + 2 * 16e3) / 2800 / 1e3) < 1e-6, g  # bytes per µs / 1e3
    assert abs(g["share"] - 2800 / (2 * s["kernel_us_per_step"])) < 1e-12, g
    r = k["ll_rmsnorm"]
    assert r["per_step"] == 1.5 and r["median_us"] == 3.0 and abs(r["mb_per_step"] - 0.5005) < 1e-9, r  # Mbyte read, Kbyte written
    assert abs(sum(x["share"] for x in s["kernels"]) - 1) < 1e-12
    # Base units and "Function Name": the same figures.
    base = text.replace('"Mbyte","Kbyte","usecond"', '"byte","byte","nsecond"').replace("Kernel Name", "Function Name")
    base = re.sub(r'"(\d[\d,]*\.\d+)"', lambda m: '"' + f"{number(m.group(1)) * 1e3:,.1f}" + '"', base)
    b = summarize(base, 2, batch=1)
    assert abs(b["kernel_us_per_step"] - s["kernel_us_per_step"]) < 1e-6, (b, s)
    gb = {x["name"]: x for x in b["kernels"]}["ll_gemv_bf16"]
    assert abs(gb["mb_per_step"] - (2 * 1200e3 + 2 * 16e3) / 2 / 1e6) < 1e-9, gb  # each figure x1e3, read as byte
    assert short_name("void a::b<int>(float)") == "a::b" and short_name("plain") == "plain"
    assert "ll_gemv_bf16" in table(s) and "µs of kernels per step" in table(s)
    # One kernel launched with two grids (two projections of different widths): two rows.
    lines = text.splitlines()
    lines[6] = lines[6].replace('"(132, 1, 1)"', '"(64, 1, 1)"')  # the second ll_gemv_bf16 launch
    two = {x["name"]: x for x in summarize("\n".join(lines), 2)["kernels"]}
    wide, narrow = two["ll_gemv_bf16 [grid 132x1x1, block 256x1x1]"], two["ll_gemv_bf16 [grid 64x1x1, block 256x1x1]"]
    assert (wide["median_us"], narrow["median_us"], wide["per_step"]) == (1500.0, 1300.0, 0.5), two
    assert "ll_rmsnorm" in two, two  # one launch shape: the name alone
    for bad, why in [("nothing\n", "no header row"), (text.splitlines()[1] + "\n" + text.splitlines()[2], "no kernel"),
                     (text.replace("usecond", "fortnight"), "unit 'fortnight'")]:
        try:
            summarize(bad, 2)
        except KernelTimesError as e:
            assert why in str(e), (why, str(e))
        else:
            raise AssertionError(f"no error for {why}")
    print("kernel_times self-test: ok", file=sys.stderr)
    return 0


def main(argv):
    if argv == ["--self-test"]:
        return self_test()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="profile a few decode steps with ncu and summarize")
    r.add_argument("--bin", default="gpu-bin/graphsmith-llama")
    r.add_argument("--model", required=True)
    r.add_argument("--batch", type=int, default=1)
    r.add_argument("--steps", type=int, default=2)
    r.add_argument("--context", type=int, default=72,
                   help="warm-up plus timed steps of the bench explained (the model's context less the prompt)")
    r.add_argument("--cache", help="GRAPHSMITH_CACHE_DIR for the profiled run (the searched launch choices)")
    r.add_argument("--out", help="report prefix (PREFIX.ncu-rep; default kernels-bB)")
    r.add_argument("--timeout", type=int, default=100, help="seconds the profiled run may take")
    r.add_argument("--json", action="store_true")
    s = sub.add_parser("summarize", help="summarize `ncu --import R --csv --page raw` output")
    s.add_argument("csv")
    s.add_argument("--steps", type=int, required=True)
    s.add_argument("--batch", type=int)
    s.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "run":
            if args.steps < 1 or args.batch < 1:
                raise KernelTimesError("--steps and --batch must be at least 1")
            if args.context < args.steps + 1:
                raise KernelTimesError(f"--context {args.context} must exceed --steps {args.steps} "
                                       "(it holds one warm-up step at least)")
            summary = profile(args)
        else:
            with open(args.csv) as f:
                summary = summarize(f.read(), args.steps, args.batch)
            summary["note"] = NOTE
    except KernelTimesError as e:
        print(json.dumps({"kind": "kernels", "batch": args.batch, "steps": args.steps, "error": str(e)}))
        return 1
    print(json.dumps(summary) if args.json else table(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
