#!/usr/bin/env python3
"""The "fast on any shape" report: `run.sh shapes`' JSON lines (one file per shape) in markdown.

    python3 bench/llama/report.py --shapes OUTDIR/shapes [--md OUT.md] [--command "..."]
    python3 bench/llama/shapes_report.py --self-test      # made-up rows; checks the output (stdlib only)
    python3 bench/llama/shapes_report.py --annotate KEY=VALUE KEY?=VALUE... <IN >>OUT   # for run.sh shapes
    python3 bench/llama/shapes_report.py --keep-parts graphsmith,torch <OLD >>NEW        # for run.sh shapes

Per shape of shapes.py (full depth, random bf16 weights): graphsmith-llama bench in graphs mode
(the cached load's lines; the first search's where the cached run has none) against
torch_bench's lean-compiled loop at batch 1 and 64, against the copy floor of the same run, and
its time to first token against transformers' forward (`hf-forward`); then the goal table with
met/missed, the launch choices the search picked and its time (the first load searched with a
fresh cache; the second read the cache), swap-bench's figures where it ran, every step's exit
status and time, the machine and the commands.
"""

import glob
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shapes import ORDER, SHAPES, kv_bytes, weight_bytes  # noqa: E402

GB = 1e9
KV_FORMULA = ("KV bytes a step reads = 2 (K and V) × layers × KV heads × head_dim × 2 bytes (bf16) × tokens "
              "in the cache × batch, with tokens in the cache at the timed steps' mean position = prompt (32) "
              "+ warm-up steps + (timed steps + 1) / 2 (a step at position p reads p + 1 positions)")


def json_lines(lines):
    """The JSON objects among `lines` (others, and lines not starting with `{`, are skipped)."""
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            yield json.loads(line)
        except ValueError:
            continue


def annotate(argv, lines):
    """`--annotate KEY=VALUE... KEY?=VALUE...` (run.sh shapes): each JSON line of `lines` with
    the fields given (KEY?= only where the line has no KEY; a VALUE that parses as JSON is taken
    as such, else as a string)."""
    extra, absent = {}, {}
    for kv in argv:
        k, v = kv.split("=", 1)
        try:
            v = json.loads(v)
        except ValueError:
            pass
        if k.endswith("?"):
            absent[k[:-1]] = v
        else:
            extra[k] = v
    for row in json_lines(lines):
        row.update(extra)
        for k, v in absent.items():
            row.setdefault(k, v)
        yield row


PARTS = ("graphsmith", "torch", "swap")
STEP_PART = {"graphsmith-first": "graphsmith", "graphsmith-cached": "graphsmith", "torch": "torch",
             "make-swap": "swap", "swap-bench": "swap"}
# SHAPES_KERNELS' steps (kernels-bN, timeline-bN) and lines belong to the graphsmith part.
PROFILE_KINDS = ("kernels", "timeline")


def part_of(row):
    """Which part of a shape's run (`SHAPES_PARTS`) wrote `row`: graphsmith-llama's bench lines
    (they carry `phase`) and kernel_times.py's (`kind` kernels, SHAPES_KERNELS), swap-bench's
    (`kind` swap), torch_bench's (the rest); a step record by its step's name. None for the
    checkpoint's step, which every run makes again."""
    if row.get("kind") == "shapes-step":
        step = row.get("step") or ""
        if step.split("-b")[0] in PROFILE_KINDS:
            return "graphsmith"
        return STEP_PART.get(step)
    if "phase" in row or row.get("kind") in PROFILE_KINDS:
        return "graphsmith"
    if row.get("kind") == "swap":
        return "swap"
    return "torch"


def keep_parts(rerun, lines):
    """`--keep-parts PART,...` (run.sh shapes with SHAPES_PARTS): the rows of a shape's earlier
    file that a run of only the parts `rerun` leaves standing."""
    rerun = {p for p in rerun.split(",") if p}
    for row in json_lines(lines):
        part = part_of(row)
        if part is not None and part not in rerun:
            yield row


def load_dir(path):
    """{shape: [rows]} from every `*.jsonl` in path but runs.jsonl, and the run records."""
    by_shape, runs = {}, []
    for name in sorted(glob.glob(os.path.join(path, "*.jsonl"))):
        with open(name) as f:
            for row in json_lines(f):
                if row.get("kind") == "shapes-run":
                    runs.append(row)
                else:
                    shape = row.get("shape") or os.path.basename(name)[: -len(".jsonl")]
                    by_shape.setdefault(shape, []).append(row)
    return by_shape, runs


def ms(row):
    return row.get("ms_per_step") or 1e3 / row["steps_per_s"]


def decode_row(rows, impl, batch, phase=None):
    """The decode line of impl at batch (of phase, if given), the last one if repeated."""
    found = [r for r in rows if r.get("impl") == impl and r.get("batch") == batch and "steps_per_s" in r
             and "kind" not in r and "error" not in r and (phase is None or r.get("phase") == phase)]
    return found[-1] if found else None


def graphsmith(rows, batch):
    """graphsmith's graphs line at batch: the cached load's, else the first search's."""
    return decode_row(rows, "graphsmith-graphs", batch, "cached") or decode_row(rows, "graphsmith-graphs", batch, "first")


def ttft_row(rows, impl, prompt_len):
    found = [r for r in rows if r.get("kind") == "ttft" and r.get("impl") == impl and r.get("batch") == 1
             and r.get("prompt_len") == prompt_len and "ttft_device_ms" in r]
    return found[-1] if found else None


def search_of(rows, phase):
    r = decode_row(rows, "graphsmith-graphs", 1, phase) or decode_row(rows, "graphsmith-graphs", 64, phase)
    return (r.get("search"), r) if r else (None, None)


def step_tokens(row):
    """Tokens in the cache at the mean position of the timed steps of a graphsmith bench line."""
    return row.get("prompt_len", 32) + row.get("warmup", 16) + (row.get("steps", 128) + 1) / 2


def shape_figures(shape, rows):
    """Every figure of one shape: a dict the tables read."""
    cfg = SHAPES.get(shape)
    f = {"shape": shape, "layers": cfg["num_hidden_layers"] if cfg else None}
    gs1, gs64 = graphsmith(rows, 1), graphsmith(rows, 64)
    lean1, lean64 = decode_row(rows, "lean-compiled", 1), decode_row(rows, "lean-compiled", 64)
    any_row = gs1 or gs64 or lean1 or lean64
    f["weight_bytes"] = (any_row or {}).get("weight_bytes") or (weight_bytes(cfg) if cfg else None)
    copy = next((r["copy_tb_s"] for r in (gs1, gs64, lean1, lean64) if r and r.get("copy_tb_s")), None)
    f["copy_tb_s"] = copy
    f["gs1"], f["gs64"], f["lean1"], f["lean64"] = gs1, gs64, lean1, lean64
    f["floor1"] = f["weight_bytes"] / (copy * 1e12) * 1e3 if copy and f["weight_bytes"] else None
    f["floor64"] = f["kv64"] = None
    if gs64 and copy and cfg:
        f["kv64"] = kv_bytes(cfg, step_tokens(gs64), 64)
        f["floor64"] = (f["weight_bytes"] + f["kv64"]) / (copy * 1e12) * 1e3
    f["ttft"] = {n: (ttft_row(rows, "graphsmith-graphs", n), ttft_row(rows, "hf-forward", n)) for n in (512, 2048)}
    f["search_first"], f["first_row"] = search_of(rows, "first")
    f["search_cached"], f["cached_row"] = search_of(rows, "cached")
    f["swap"] = next((r for r in reversed(rows) if r.get("kind") == "swap" and "switch_ms" in r), None)
    f["steps"] = [r for r in rows if r.get("kind") == "shapes-step"]
    f["errors"] = [r for r in rows if "error" in r]
    # kernel_times.py's summaries (SHAPES_KERNELS), the last one per batch.
    f["kernels"] = {r["batch"]: r for r in rows if r.get("kind") == "kernels" and "error" not in r and r.get("kernels")}
    # timeline/'s summaries (SHAPES_KERNELS): each kernel inside the replayed graph, per batch.
    f["timeline"] = {r["batch"]: r for r in rows if r.get("kind") == "timeline" and r.get("kinds")}
    return f


KERNELS_POINTER = "; per-kernel times: see [Where the time goes](#where-the-time-goes)"
TOP_KERNELS = 8


def kernel_section(shapes, figs):
    """"Where the time goes": per shape with kernel_times.py lines and per batch, the step time
    graphsmith measured against the summed kernel time, and the top kernels."""
    with_kernels = [s for s in shapes if figs[s]["kernels"] or figs[s]["timeline"]]
    if not with_kernels:
        return []
    out = ["## Where the time goes", "",
           "`kernel_times.py` (`SHAPES_KERNELS`): a few decode steps in graphs mode with the cached launch choices, "
           "profiled by Nsight Compute (`ncu --profile-from-start off --graph-profiling node`; `graphsmith-llama "
           "bench --profile` turns collection on only around them). Nsight Compute runs the kernels one at a time: "
           "each time is the kernel alone. The difference between the step time graphsmith measured (its bench "
           "line, CUDA events, no profiler) and the summed kernel time is the launch gaps, less what programmatic "
           "dependent launch overlaps (negative where the overlap hides more than the gaps cost). GB/s: DRAM bytes "
           "read + written over the kernel's time. `timeline/` (CUPTI's activity records of the replayed graph, "
           "programmatic dependent launch on) shows the same step as it runs: what each kernel adds to the "
           "step (its end less the previous kernel's end), how long it runs, and how early it starts.", ""]
    for s in with_kernels:
        f = figs[s]
        out += [f"### {s}", ""]
        if f["kernels"]:
            out += ["| batch | step (graphsmith) | kernels summed | difference | floor | launches per step "
                    "| profiled steps | ncu |", "|---:|---:|---:|---:|---:|---:|---:|---|"]
        for b, k in sorted(f["kernels"].items()):
            gs, floor = f.get(f"gs{b}"), f.get(f"floor{b}")
            step_us = ms(gs) * 1e3 if gs else None
            kern = k["kernel_us_per_step"]
            diff = f"{step_us - kern:+.1f} µs ({(step_us - kern) / step_us * 100:+.0f}%)" if step_us else "–"
            out.append(f"| {b} | {fmt(step_us, '.1f')} µs | {kern:.1f} µs | {diff} | {fmt(floor and floor * 1e3, '.1f')} µs "
                       f"| {fmt(k.get('launches_per_step'), '.0f')} | {k.get('steps')} | {k.get('ncu', '?')} |")
        for b, k in sorted(f["kernels"].items()):
            out += ["", f"Top kernels, batch {b} ({len(k['kernels'])} in all):", "",
                    "| kernel | launches per step | µs per step | median µs | GB/s | share |",
                    "|---|---:|---:|---:|---:|---:|"]
            for x in k["kernels"][:TOP_KERNELS]:
                out.append(f"| `{x['name']}` | {x['per_step']:.1f} | {x['us_per_step']:.1f} | {x['median_us']:.2f} | "
                           f"{fmt(x.get('gb_s'), '.0f')} | {x['share'] * 100:.1f}% |")
        for b, t in sorted(f["timeline"].items()):
            out += ["", f"In the replayed graph, batch {b} (`timeline/`, {t.get('launches', '?')} steps): a step spans "
                    f"{t['step_span_ns'] / 1e3:.1f} µs over {t.get('kernels_per_step', '?')} kernels.", "",
                    "| kernel | per step | adds µs | runs µs | starts early µs |", "|---|---:|---:|---:|---:|"]
            for name, d in list(t["kinds"].items())[:TOP_KERNELS]:
                out.append(f"| `{name}` | {d['count']} | {d['adds_ns'] / 1e3:.1f} | {d['run_ns'] / 1e3:.1f} | "
                           f"{d['early_ns'] / 1e3:.1f} |")
        out.append("")
    return out


def ratio(x, goal):
    """x with two decimals, or three where two would print the goal itself (1.304 against 1.3)."""
    return f"{x:.2f}" if round(x, 2) != goal else f"{x:.3f}"


def goal_rows(f):
    """[(figure, goal, measured, status)] of one shape."""
    out, wb = [], f["weight_bytes"]

    def pointer(status):
        """A missed decode goal of a shape with kernel times points at them."""
        return KERNELS_POINTER if status == "missed" and (f.get("kernels") or f.get("timeline")) else ""
    gs1, lean1, floor1 = f["gs1"], f["lean1"], f["floor1"]
    speed1 = ms(lean1) / ms(gs1) if gs1 and lean1 else None
    over1 = ms(gs1) / floor1 if gs1 and floor1 else None
    both = (f"{ratio(speed1, 2.0)}x the lean loop" if speed1 else "lean loop not measured") + ", " + \
           (f"{ratio(over1, 1.3)}x the floor" if over1 else "floor not measured")
    detail = (f"graphsmith {ms(gs1):.3f} ms" if gs1 else "graphsmith not measured") + \
             (f", lean {ms(lean1):.3f} ms" if lean1 else "") + (f", floor {floor1:.3f} ms" if floor1 else "")
    if wb is not None and wb < 1 * GB:
        status = "not measured" if speed1 is None else ("met" if speed1 >= 2.0 else "missed")
        out.append(("batch 1, graphs", "≥ 2x the lean loop (under 1 GB)", f"{both} ({detail}){pointer(status)}", status))
    elif wb is not None and wb > 2 * GB:
        status = "not measured" if over1 is None else ("met" if over1 <= 1.3 else "missed")
        out.append(("batch 1, graphs", "≤ 1.3x the floor (over 2 GB)", f"{both} ({detail}){pointer(status)}", status))
    else:
        out.append(("batch 1, graphs", "none (1 to 2 GB)", f"{both} ({detail})", "reported"))
    gs64, lean64, floor64 = f["gs64"], f["lean64"], f["floor64"]
    speed64 = ms(lean64) / ms(gs64) if gs64 and lean64 else None
    over64 = ms(gs64) / floor64 if gs64 and floor64 else None
    parts = [f"{ratio(speed64, 1.3)}x the lean loop" if speed64 else "lean loop not measured",
             f"{ratio(over64, 1.2)}x the floor" if over64 else "floor not measured"]
    detail = (f"graphsmith {ms(gs64):.3f} ms" if gs64 else "graphsmith not measured") + \
             (f", lean {ms(lean64):.3f} ms" if lean64 else "") + \
             (f", floor {floor64:.3f} ms of which KV {f['kv64'] / 1e6:.0f} MB" if floor64 else "")
    if speed64 is None and over64 is None:
        status = "not measured"
    else:
        status = "met" if (speed64 or 0) >= 1.3 or (over64 is not None and over64 <= 1.2) else "missed"
    out.append(("batch 64, graphs", "≥ 1.3x the lean loop or ≤ 1.2x the floor (weights + KV)",
                f"{', '.join(parts)} ({detail}){pointer(status)}", status))
    for n in (512, 2048):
        gs, hf = f["ttft"][n]
        if gs and hf:
            status = "met" if gs["ttft_device_ms"] <= hf["ttft_device_ms"] else "missed"
            measured = (f"graphsmith {gs['ttft_device_ms']:.2f} ms, transformers {hf['ttft_device_ms']:.2f} ms "
                        f"(transformers / graphsmith = {hf['ttft_device_ms'] / gs['ttft_device_ms']:.2f}x)")
        else:
            status = "not measured"
            measured = ", ".join(f"{who} {r['ttft_device_ms']:.2f} ms" for who, r in (("graphsmith", gs), ("transformers", hf)) if r)
        out.append((f"time to first token, {n} tokens, batch 1", "≤ transformers' forward (device time)",
                    measured or "–", status))
    if f["shape"] == STRETCH_SHAPE:
        status = "not measured" if gs1 is None else ("stretch met" if ms(gs1) <= STRETCH_MS else "stretch missed")
        out.append(("stretch: batch 1, graphs", f"≤ {STRETCH_MS:.2f} ms per step (reported either way)",
                    f"graphsmith {ms(gs1):.3f} ms" if gs1 else "–", status))
    s, row = f["search_first"], f["first_row"]
    if s is None:
        out.append(("first search", "under 30 s", "–", "not measured"))
    else:
        ok = not s.get("from_cache") and s.get("search_ms", 1e9) < 30000
        out.append(("first search", "under 30 s",
                    f"{s.get('search_ms', 0) / 1e3:.1f} s (from cache {str(s.get('from_cache')).lower()}, out of budget "
                    f"{str(s.get('out_of_budget')).lower()}; whole bench run {row.get('run_s', '?')} s)",
                    "met" if ok else "missed"))
    s, row = f["search_cached"], f["cached_row"]
    if s is None:
        out.append(("cached load", "no search", "–", "not measured"))
    else:
        ok = s.get("from_cache") is True and s.get("search_ms") == 0
        out.append(("cached load", "no search",
                    f"from cache {str(s.get('from_cache')).lower()}, {s.get('search_ms', 0):.0f} ms searching, entry "
                    f"found in {s.get('found_in_ms', 0) / 1e3:.1f} s (whole bench run {row.get('run_s', '?')} s, time "
                    f"to first token included)",
                    "met" if ok else "missed"))
    return out


# The stretch goal: Llama-3.2-1B at batch 1 (the best public H200 figure for that model, a
# hand-written single-kernel decoder, is 0.760 ms per step).
STRETCH_SHAPE, STRETCH_MS = "llama-3.2-1b", 0.70


def gib(row):
    return row["peak_mem_bytes"] / 2**30 if row and row.get("peak_mem_bytes") is not None else None


def memory_section(shapes, figs):
    """Peak device memory of every contender per shape, GiB."""
    out = ["## Peak device memory", "",
           "GiB. graphsmith: device memory in use after the run less what was in use before its model was "
           "made (`cuMemGetInfo`: weights, KV cache, activations, graphs, cuBLAS workspaces). PyTorch: "
           "`torch.cuda.max_memory_allocated()` of the run (its caching allocator's reserve is not counted). "
           "graphsmith's time-to-first-token model is made for one sequence and the longest prompt; its "
           "decode model for 64 sequences and the prompt plus the warm-up and timed steps.", "",
           "| shape | graphsmith decode (b1 and b64) | lean loop b1 | lean loop b64 | graphsmith TTFT 2048 "
           "| transformers forward 512 | transformers forward 2048 |", "|---|---:|---:|---:|---:|---:|---:|"]
    for s in shapes:
        f = figs[s]
        gs_ttft, hf512, hf2048 = f["ttft"][2048][0], f["ttft"][512][1], f["ttft"][2048][1]
        cells = [gib(f["gs1"] or f["gs64"]), gib(f["lean1"]), gib(f["lean64"]), gib(gs_ttft), gib(hf512), gib(hf2048)]
        out.append(f"| {s} | " + " | ".join(fmt(c, ".2f") for c in cells) + " |")
    return out + [""]


def machine(by_shape):
    for rows in by_shape.values():
        for r in rows:
            if r.get("gpu"):
                parts = [f"GPU {r['gpu']}", f"driver {r.get('driver', '?')}", f"torch {r.get('torch', '?')}"]
                parts += [f"CUDA {r['cuda']}"] if r.get("cuda") else []
                parts += [f"transformers {r['transformers']}"] if r.get("transformers") else []
                return ", ".join(parts)
    for rows in by_shape.values():
        for r in rows:
            key = (r.get("search") or {}).get("key")
            if key:
                return f"GPU {key.get('gpu', '?')} ({key.get('multiprocessors', '?')} multiprocessors), driver {key.get('driver', '?')}"
    return "unknown (no line names the machine)"


def choices_line(s):
    parts = []
    for b in s.get("buckets", []):
        rules, chosen = b.get("rules_ms"), b.get("chosen_ms")
        timing = f" {rules:.3f}→{chosen:.3f} ms" if rules and chosen else ""
        parts.append(f"{b.get('bucket')}: `{b.get('tuning')}`{timing} ({b.get('candidates', 0)} cand.)")
    return "; ".join(parts) or "–"


def fmt(v, spec=".3f"):
    return "–" if v is None else format(v, spec)


def render(by_shape, runs, command):
    shapes = [s for s in ORDER if s in by_shape] + sorted(s for s in by_shape if s not in ORDER)
    figs = {s: shape_figures(s, by_shape[s]) for s in shapes}
    out = ["# The decoder on seven public shapes (full depth)", "",
           f"Machine: {machine(by_shape)}.", ""]
    run_lines = []
    for r in runs:
        env = " ".join(f"{k}={v}" for k, v in sorted(r.get("env", {}).items()))
        # swap_bench says the binary has swap-bench; SHAPES_PARTS may still have left it out.
        parts = r.get("env", {}).get("SHAPES_PARTS", "graphsmith,torch,swap").split(",")
        swapped = r.get("swap_bench") and "swap" in parts
        run_lines.append(f"- `{(env + ' ') if env else ''}{command or 'bash bench/llama/run.sh shapes OUTDIR'}`: "
                         f"{', '.join(r.get('ran', [])) or 'nothing'} in {r.get('seconds', '?')} s "
                         f"(steps {r.get('steps')}, warm-up {r.get('warmup')}, runs {r.get('runs')}; swap-bench "
                         f"{'run' if swapped else 'not run'})")
    out += ["Commands (from the repository root, `gpu-bin/` built by `scripts/gpu-build.sh`):", ""]
    out += run_lines or [f"- `{command or 'bash bench/llama/run.sh shapes OUTDIR'}`"]
    out += ["", "Random bf16 weights (`make_model.py`, seed 1, built on the GPU), every layer of the published "
            "config (`shapes.py`). graphsmith-llama bench in graphs mode, batch 1 and 64, prompt of 32 ids, decode "
            "steps only, device time between CUDA events, median of the runs; the cached load's lines (the first "
            "search's where it has none). The lean loop: torch_bench.py `lean-compiled` (gpt-fast style, "
            "`torch.compile(mode=\"reduce-overhead\")`), same steps. The floor: weight bytes over the device "
            "copy bandwidth graphsmith-llama measured in the same run (bytes read + written per second). "
            f"{KV_FORMULA}. Time to first token: graphsmith-llama bench's graphs mode (chunks of 512) against "
            "one plain transformers forward (`hf-forward`: bf16, not compiled, `use_cache` as the config has it, "
            "every position's logits), device time, batch 1; prompts of the same lengths (their ids differ: "
            "graphsmith-llama's own, prompts.json's).", ""]
    out += ["## Per shape", "",
            "| shape | layers | weights | copy | b1 graphsmith | b1 lean | b1 floor | b64 graphsmith | b64 lean "
            "| b64 floor (w + KV) | TTFT 512: graphsmith / transformers | TTFT 2048: graphsmith / transformers |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in shapes:
        f = figs[s]

        def t(n):
            gs, hf = f["ttft"][n]
            return f"{fmt(gs and gs['ttft_device_ms'], '.2f')} / {fmt(hf and hf['ttft_device_ms'], '.2f')}"
        out.append(f"| {s} | {f['layers'] or '?'} | {fmt(f['weight_bytes'] and f['weight_bytes'] / GB, '.2f')} GB | "
                   f"{fmt(f['copy_tb_s'], '.2f')} TB/s | {fmt(f['gs1'] and ms(f['gs1']))} | {fmt(f['lean1'] and ms(f['lean1']))} | "
                   f"{fmt(f['floor1'])} | {fmt(f['gs64'] and ms(f['gs64']))} | {fmt(f['lean64'] and ms(f['lean64']))} | "
                   f"{fmt(f['floor64'])} | {t(512)} | {t(2048)} |")
    out += ["", "Milliseconds per decode step (batch 64: one step of 64 sequences) and per first token.", ""]
    out += ["## Goals", "", "| shape | figure | goal | measured | status |", "|---|---|---|---|---|"]
    tally = {}
    for s in shapes:
        for figure, goal, measured, status in goal_rows(figs[s]):
            tally[status] = tally.get(status, 0) + 1
            out.append(f"| {s} | {figure} | {goal} | {measured} | {'**missed**' if status == 'missed' else status} |")
    missing = [s for s in ORDER if s not in by_shape]
    skipped = {s for r in runs for s in r.get("skipped", [])}
    for s in missing:
        why = "skipped: SHAPES_DEADLINE reached before it began" if s in skipped else "not run"
        out.append(f"| {s} | all | – | – | {why} |")
    out += ["", "Goals: " + ", ".join(f"{n} {k}" for k, n in sorted(tally.items())) + "." if tally else "", ""]
    if missing:
        out += [f"Not measured: {', '.join(missing)}" +
                (f" (skipped past the deadline: {', '.join(s for s in missing if s in skipped)})" if skipped & set(missing) else "")
                + ".", ""]
    out += kernel_section(shapes, figs)
    out += memory_section(shapes, figs)
    out += ["## Launch choices the search picked", "",
            "Per bucket: the choices (`default`: the rules'), ms per step with the rules' and the chosen "
            "choices as the search timed them turn by turn, candidates tried.", "",
            "| shape | first search | cached load | choices per bucket |", "|---|---:|---|---|"]
    for s in shapes:
        f = figs[s]
        first, cached = f["search_first"], f["search_cached"]
        if not (first or cached):
            out.append(f"| {s} | – | – | – |")
            continue
        ref = first or cached
        notes = f" Notes: {'; '.join(ref['notes'])}" if ref.get("notes") else ""
        out.append(f"| {s} | {fmt(first and first.get('search_ms', 0) / 1e3, '.1f')} s"
                   f"{' (out of budget)' if first and first.get('out_of_budget') else ''} | "
                   f"{'from cache, ' + fmt(cached.get('search_ms'), '.0f') + ' ms' if cached and cached.get('from_cache') else ('searched again' if cached else '–')} | "
                   f"{choices_line(ref)}{notes} |")
    out.append("")
    swaps = [(s, figs[s]["swap"]) for s in shapes if figs[s]["swap"]]
    out += ["## Weight swap (`graphsmith-llama swap-bench`)", ""]
    if swaps:
        out += ["| shape | executables | nodes | first swap: indexing | switch | driver | host | switch / driver "
                "| verification | re-capture | re-capture / switch | all in place |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for s, w in swaps:
            out.append(f"| {s} | {w.get('executables')} | {w.get('nodes_updated')} | {fmt(w.get('index_ms_first'))} ms | "
                       f"{fmt(w.get('switch_ms'))} ms | {fmt(w.get('driver_ms'))} ms | {fmt(w.get('host_ms'))} ms | "
                       f"{fmt(w.get('switch_over_driver'), '.2f')}x | {fmt(w.get('verify_ms'))} ms | "
                       f"{fmt(w.get('recapture_ms'))} ms | {fmt(w.get('recapture_over_switch'), '.1f')}x | "
                       f"{'yes' if w.get('all_relocated') else '**no**'} |")
        out += ["", "Medians over the swaps after the first (which pays the indexing); every bucket captured, "
                "swapped between seed 1 and seed 2 weights of the shape.", ""]
    elif any(r.get("swap_bench") for r in runs):
        out += ["swap-bench ran on none of the measured shapes (SHAPES_SWAP), or it failed (see the steps).", ""]
    else:
        out += ["Not run: graphsmith-llama is missing or has no `swap-bench` (`graphsmith-llama help` does not list it).", ""]
    out += ["## Steps", "", "| shape | seconds | steps (exit status, seconds) |", "|---|---:|---|"]
    for s in shapes:
        steps = figs[s]["steps"]
        cells = ", ".join(f"{r['step']} {'cut at the deadline' if r.get('note') == 'deadline' else ('ok' if r.get('exit') == 0 else ('**timed out**' if r.get('exit') in (124, 137) else '**exit ' + str(r.get('exit')) + '**'))} {r.get('seconds')} s"
                          for r in steps)
        out.append(f"| {s} | {sum(r.get('seconds') or 0 for r in steps)} | {cells or '–'} |")
    out.append("")
    errors = [(s, e) for s in shapes for e in figs[s]["errors"]]
    if errors:
        out += ["## Failures", ""] + [f"- {s}: {e.get('impl') or e.get('kind')} batch {e.get('batch')}"
                                      f"{' prompt ' + str(e['prompt_len']) if e.get('prompt_len') else ''}: {e['error']}"
                                      for s, e in errors] + [""]
    return "\n".join(out)


def main(rows_dir, md_path=None, command=""):
    by_shape, runs = load_dir(rows_dir)
    md = render(by_shape, runs, command)
    if md_path:
        with open(md_path, "w") as f:
            f.write(md + "\n")
    else:
        print(md)
    return 0


def self_test():
    """Synthetic rows: smollm2-135m (under 1 GB) and llama-3.1-8b (over 2 GB) measured, one shape
    skipped at the deadline; the goals, the KV floor, the search and the swap table checked."""
    copy = 4.0  # TB/s
    def gs(shape, batch, ms_, phase, search):
        wb = weight_bytes(SHAPES[shape])
        return {"impl": "graphsmith-graphs", "config": shape, "shape": shape, "batch": batch, "steps_per_s": 1e3 / ms_,
                "ms_per_step": ms_, "weight_bytes": wb, "copy_tb_s": copy, "floor_ms": wb / (copy * 1e12) * 1e3,
                "steps": 64, "warmup": 8, "prompt_len": 32, "runs": 5, "phase": phase, "run_s": 40 if phase == "first" else 12,
                "search": search, "choice": "default"}

    def lean(shape, batch, ms_):
        return {"impl": "lean-compiled", "config": shape, "shape": shape, "batch": batch, "steps_per_s": 1e3 / ms_,
                "ms_per_step": ms_, "weight_bytes": weight_bytes(SHAPES[shape]), "copy_tb_s": 4.1, "steps": 64,
                "gpu": "NVIDIA H200", "driver": "580.65", "torch": "2.11.0", "cuda": "13.0", "transformers": "5.17.0"}

    def ttft(shape, impl, n, dev):
        return {"kind": "ttft", "impl": impl, "config": shape, "shape": shape, "batch": 1, "prompt_len": n,
                "ttft_device_ms": dev, "ttft_wall_ms": dev + 1, "prefill_tokens_per_s": n / dev * 1e3}

    def kernels(shape, batch, us):
        # kernel_times.py's line: two kernels, 3 and 1 launches per step.
        return {"kind": "kernels", "shape": shape, "batch": batch, "steps": 2, "kernel_us_per_step": us,
                "launches_per_step": 4.0, "ncu": "Version 2025.3.1.0", "note": "serializes",
                "kernels": [{"name": "ll_gemv_bf16", "per_step": 3.0, "median_us": us * 0.3, "us_per_step": us * 0.9,
                             "mb_per_step": 16000.0, "gb_s": 3900.0, "share": 0.9},
                            {"name": "ll_rmsnorm", "per_step": 1.0, "median_us": us * 0.1, "us_per_step": us * 0.1,
                             "mb_per_step": None, "gb_s": None, "share": 0.1}]}

    key = {"gpu": "NVIDIA H200", "multiprocessors": 132, "driver": "580.65 (CUDA 13.0)"}
    first = {"from_cache": False, "search_ms": 9500.0, "found_in_ms": 9500.0, "out_of_budget": False, "notes": [],
             "key": key, "buckets": [{"bucket": 1, "tuning": "pf=2,cluster=1", "rules_ms": 0.47, "chosen_ms": 0.42,
                                      "candidates": 9}, {"bucket": 64, "tuning": "default", "rules_ms": 0.98,
                                                         "chosen_ms": 0.98, "candidates": 1}]}
    cached = dict(first, from_cache=True, search_ms=0.0)
    slow = dict(first, search_ms=31000.0, out_of_budget=True)
    small, big = "smollm2-135m", "llama-3.1-8b"
    rows = {
        small: [gs(small, 1, 0.30, "first", first), gs(small, 64, 0.90, "first", first),
                gs(small, 1, 0.25, "cached", cached), gs(small, 64, 0.80, "cached", cached),
                lean(small, 1, 0.60), lean(small, 64, 1.00),  # 2.4x met; 1.25x, floor far: missed
                ttft(small, "graphsmith-graphs", 512, 2.0), ttft(small, "hf-forward", 512, 5.0),
                ttft(small, "graphsmith-graphs", 2048, 9.0), ttft(small, "hf-forward", 2048, 8.0),
                {"kind": "swap", "shape": small, "executables": 7, "nodes_updated": 2100, "index_ms_first": 3.0,
                 "switch_ms": 1.5, "driver_ms": 1.0, "host_ms": 0.5, "switch_over_driver": 1.5, "verify_ms": 4.0,
                 "recapture_ms": 30.0, "recapture_over_switch": 20.0, "all_relocated": True},
                {"kind": "shapes-step", "shape": small, "step": "make", "exit": 0, "seconds": 5},
                {"kind": "shapes-step", "shape": small, "step": "torch", "exit": 1, "seconds": 50},
                {"kind": "ttft", "impl": "hf-forward", "shape": small, "batch": 1, "prompt_len": 4096, "error": "OOM"}],
        big: [gs(big, 1, 4.5, "first", slow), gs(big, 64, 6.0, "first", slow),
              gs(big, 1, 4.6, "cached", slow), gs(big, 64, 6.0, "cached", slow),
              lean(big, 1, 5.0), lean(big, 64, 7.0),
              kernels(big, 1, 4300.0), kernels(big, 64, 6200.0),
              {"kind": "kernels", "shape": big, "batch": 64, "steps": 2, "error": "no ncu (Nsight Compute)"}],
    }
    runs = [{"kind": "shapes-run", "ran": [small, big], "skipped": ["llama-2-7b"], "seconds": 530, "deadline_s": 540,
             "swap_bench": True, "env": {"SHAPES": f"{small},{big},llama-2-7b"}, "steps": 64, "warmup": 8, "runs": 5}]
    with tempfile.TemporaryDirectory() as d:
        for shape, rs in rows.items():
            with open(os.path.join(d, f"{shape}.jsonl"), "w") as f:
                f.write("not json\n" + "\n".join(json.dumps(r) for r in rs) + "\n")
        with open(os.path.join(d, "runs.jsonl"), "w") as f:
            f.write("\n".join(json.dumps(r) for r in runs) + "\n")
        md_path = os.path.join(d, "out.md")
        assert main(d, md_path, "bash bench/llama/run.sh shapes OUTDIR") == 0
        md = open(md_path).read()
        by_shape, got_runs = load_dir(d)
    assert set(by_shape) == {small, big} and len(got_runs) == 1, (by_shape.keys(), got_runs)
    g = {(figure): (measured, status) for figure, _, measured, status in goal_rows(shape_figures(small, by_shape[small]))}
    assert g["batch 1, graphs"][1] == "met" and "2.40x the lean loop" in g["batch 1, graphs"][0], g
    assert g["batch 64, graphs"][1] == "missed", g  # 1.25x the lean loop; far above the floor
    assert KERNELS_POINTER not in g["batch 64, graphs"][0], g  # no kernel lines for this shape
    assert g["time to first token, 512 tokens, batch 1"][1] == "met", g
    assert g["time to first token, 2048 tokens, batch 1"][1] == "missed", g
    assert g["first search"][1] == "met" and "9.5 s" in g["first search"][0], g
    assert g["cached load"][1] == "met", g
    f = shape_figures(big, by_shape[big])
    wb = weight_bytes(SHAPES[big])
    tokens = 32 + 8 + 65 / 2
    assert f["kv64"] == 2 * 32 * 8 * 128 * 2 * tokens * 64, f["kv64"]
    assert abs(f["floor64"] - (wb + f["kv64"]) / 4e12 * 1e3) < 1e-9
    g = {figure: (measured, status) for figure, _, measured, status in goal_rows(f)}
    # 4.6 ms (the cached load's) over 16.06 GB / 4 TB/s = 4.015 ms: 1.15x, met.
    assert g["batch 1, graphs"][1] == "met" and "1.15x the floor" in g["batch 1, graphs"][0], g
    assert ratio(1.3038, 1.3) == "1.304" and ratio(1.2962, 1.3) == "1.296" and ratio(1.36, 1.3) == "1.36"
    # 7/6 = 1.17x the lean loop, but 6.0 ms over (16.06 GB + 0.63 GB) / 4 TB/s = 4.17 ms is 1.44x: missed.
    assert g["batch 64, graphs"][1] == "missed" and g["batch 64, graphs"][0].endswith(KERNELS_POINTER), g
    assert KERNELS_POINTER not in g["batch 1, graphs"][0], g  # met: no pointer
    assert sorted(f["kernels"]) == [1, 64] and f["kernels"][64]["kernel_us_per_step"] == 6200.0, f["kernels"]
    assert g["first search"][1] == "missed" and g["cached load"][1] == "missed", g  # 31 s; the second run searched again
    assert g["time to first token, 512 tokens, batch 1"][1] == "not measured", g
    for needle in ["Machine: GPU NVIDIA H200, driver 580.65, torch 2.11.0, CUDA 13.0, transformers 5.17.0.",
                   "`SHAPES=smollm2-135m,llama-3.1-8b,llama-2-7b bash bench/llama/run.sh shapes OUTDIR`",
                   "| llama-2-7b | all | – | – | skipped: SHAPES_DEADLINE reached before it began |",
                   "| smollm2-135m | batch 1, graphs | ≥ 2x the lean loop (under 1 GB) |",
                   "| llama-3.1-8b | batch 1, graphs | ≤ 1.3x the floor (over 2 GB) |",
                   "1: `pf=2,cluster=1` 0.470→0.420 ms (9 cand.)", "31.0 s (out of budget)",
                   "| smollm2-135m | 7 | 2100 | 3.000 ms | 1.500 ms | 1.000 ms | 0.500 ms | 1.50x |",
                   "torch **exit 1** 50 s", "hf-forward batch 1 prompt 4096: OOM", "KV bytes a step reads = 2 (K and V)",
                   "| smollm2-135m | 30 | 0.27 GB | 4.00 TB/s | 0.250 | 0.600 |",
                   "## Where the time goes", "### llama-3.1-8b",
                   # 4.6 ms measured, 4300 µs of kernels: 300 µs of gaps; floor 16.06 GB / 4 TB/s.
                   f"| 1 | 4600.0 µs | 4300.0 µs | +300.0 µs (+7%) | {wb / 4e12 * 1e6:.1f} µs | 4 | 2 | Version 2025.3.1.0 |",
                   "| 64 | 6000.0 µs | 6200.0 µs | -200.0 µs (-3%) |",
                   "Top kernels, batch 64 (2 in all):", "| `ll_gemv_bf16` | 3.0 | 5580.0 | 1860.00 | 3900 | 90.0% |",
                   "| `ll_rmsnorm` | 1.0 | 430.0 | 430.00 | – | 10.0% |",
                   "- llama-3.1-8b: kernels batch 64: no ncu (Nsight Compute)"]:
        assert needle in md, (needle, md)
    assert md.index("| smollm2-135m | batch 1") < md.index("| llama-3.1-8b | batch 1")
    # Peak memory: lean rows carry none here; a graphsmith and an hf-forward row with it.
    by_mem = {small: [dict(r, peak_mem_bytes=3 * 2**30) if r.get("impl") in ("graphsmith-graphs", "hf-forward") else r
                      for r in by_shape[small]]}
    mem = "\n".join(memory_section([small], {small: shape_figures(small, by_mem[small])}))
    assert "| smollm2-135m | 3.00 | – | – | 3.00 | 3.00 | 3.00 |" in mem, mem
    # The stretch goal, on its shape only.
    one = [dict(r, shape=STRETCH_SHAPE, config=STRETCH_SHAPE) for r in by_shape[small]]
    g = {figure: status for figure, _, _, status in goal_rows(shape_figures(STRETCH_SHAPE, one))}
    assert g["stretch: batch 1, graphs"] == "stretch met", g  # 0.25 ms
    assert "stretch: batch 1, graphs" not in {figure for figure, *_ in goal_rows(shape_figures(small, by_shape[small]))}
    assert md.count("### ") == 1 and md.index("## Goals") < md.index("## Where the time goes"), md
    # Without swap-bench, the report says it was not run.
    md = render(by_shape, [dict(runs[0], swap_bench=False)], "")
    assert "Not run: graphsmith-llama is missing" not in md  # a swap row is present
    md = render({big: by_shape[big]}, [dict(runs[0], swap_bench=False)], "")
    assert "Not run: graphsmith-llama is missing" in md, md
    got = list(annotate(["shape=x", "steps?=64", "prompt_len?=32", "phase=first"],
                        ["noise", '{"prompt_len": 512, "steps": 8}', "{bad", '{"a": 1}']))
    assert got == [{"prompt_len": 512, "steps": 8, "shape": "x", "phase": "first"},
                   {"a": 1, "shape": "x", "phase": "first", "steps": 64, "prompt_len": 32}], got
    old = ['{"kind": "shapes-step", "step": "make"}', '{"kind": "shapes-step", "step": "torch"}',
           '{"impl": "graphsmith-graphs", "phase": "cached"}', '{"impl": "lean-compiled"}',
           '{"kind": "shapes-step", "step": "graphsmith-first"}', '{"kind": "swap"}',
           '{"kind": "kernels", "batch": 1}', '{"kind": "shapes-step", "step": "kernels-b64"}']
    got = list(keep_parts("torch", old))
    assert got == [{"impl": "graphsmith-graphs", "phase": "cached"},
                   {"kind": "shapes-step", "step": "graphsmith-first"}, {"kind": "swap"},
                   {"kind": "kernels", "batch": 1}, {"kind": "shapes-step", "step": "kernels-b64"}], got
    assert [r.get("kind") for r in keep_parts("graphsmith", old)] == ["shapes-step", None, "swap"]
    assert list(keep_parts("graphsmith,torch,swap", old)) == []
    timeline_rows = ['{"kind": "timeline", "batch": 1}', '{"kind": "shapes-step", "step": "timeline-b1"}']
    assert list(keep_parts("graphsmith", timeline_rows)) == [] and len(list(keep_parts("torch", timeline_rows))) == 2
    # timeline/'s summary of a replayed step (summarize.py --json, annotated), on a shape without
    # kernel_times.py lines: its own table, and the pointer from a missed goal.
    tl = {"kind": "timeline", "shape": small, "batch": 64, "graph_id": 7, "launches": 230, "kernels_per_step": 3,
          "step_span_ns": 801000.0, "kinds": {"ll_gemv": {"count": 2, "run_ns": 700000.0, "adds_ns": 650000.0,
                                                           "early_ns": 20000.0},
                                               "ll_attention": {"count": 1, "run_ns": 160000.0, "adds_ns": 150000.0,
                                                                "early_ns": 5000.0}}, "first": [], "shapes": {}}
    f = shape_figures(small, by_shape[small] + [tl])
    section = "\n".join(kernel_section([small], {small: f}))
    for needle in ["### smollm2-135m", "In the replayed graph, batch 64 (`timeline/`, 230 steps): a step spans 801.0 µs "
                   "over 3 kernels.", "| `ll_gemv` | 2 | 650.0 | 700.0 | 20.0 |", "| `ll_attention` | 1 | 150.0 | 160.0 | 5.0 |"]:
        assert needle in section, (needle, section)
    assert "| batch | step (graphsmith) | kernels summed" not in section, section  # no kernel_times.py line
    g = {figure: measured for figure, _, measured, _ in goal_rows(f)}
    assert g["batch 64, graphs"].endswith(KERNELS_POINTER), g  # missed, with a timeline
    print("shapes_report self-test: ok", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    if sys.argv[1:2] == ["--annotate"]:
        for row in annotate(sys.argv[2:], sys.stdin):
            print(json.dumps(row))
        sys.exit(0)
    if sys.argv[1:2] == ["--keep-parts"] and len(sys.argv) == 3:
        for row in keep_parts(sys.argv[2], sys.stdin):
            print(json.dumps(row))
        sys.exit(0)
    print("use: python3 bench/llama/report.py --shapes OUTDIR/shapes [--md OUT.md]; --self-test; --annotate; --keep-parts", file=sys.stderr)
    sys.exit(2)
