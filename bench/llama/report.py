#!/usr/bin/env python3
"""Turn the decode benchmark's JSON lines (graphsmith-llama bench, torch_bench.py) into markdown.

    python3 bench/llama/report.py ROWS.jsonl [--md OUT.md] [--command "bash bench/llama/run.sh bench OUTDIR"]
    python3 bench/llama/report.py --shapes OUTDIR/shapes [--md OUT.md] [--command "..."]   # run.sh shapes' report
    python3 bench/llama/report.py --self-test      # made-up rows; checks the output (stdlib only)

Per config: a table (rows: implementation; columns: batch 1/8/64 steps/s, ms per step, peak
memory), the ratio of graphsmith graphs to the best PyTorch contender at each batch, the 1B
floor ratio (graphsmith's ms per step over weight bytes / copy bandwidth of the same run); then
every goal of issue 13 with met/missed, whether PyTorch reached the figures the issue quotes,
the machine and the command; `graphsmith-llama bench-loop` lines (the device-side loop) get a
table of their own. Lines that do not start with `{` are ignored; rows with an "error" field
are listed as failures. `--shapes` renders `run.sh shapes`' folder instead (`shapes_report.py`:
the seven public shapes' goal table).
"""

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

GRAPHSMITH = ["graphsmith-eager", "graphsmith-graphs", "graphsmith-eager-nopdl", "graphsmith-graphs-nopdl"]
PYTORCH = ["hf-generate-eager", "hf-generate-static-compiled", "lean-compiled"]
IMPL_ORDER = GRAPHSMITH + PYTORCH
BATCHES = [1, 8, 64]
CONFIG_ORDER = ["tiny", "small", "1b"]
# The best PyTorch figures issue 13 quotes (H200, PyTorch 2.11, transformers 5.17): steps/s.
ISSUE_FIGURES = [("small", 1, 528.0), ("1b", 1, 384.0), ("1b", 64, 245.0)]


def load(path):
    """(decode rows, errors, loop rows, time-to-first-token rows): `graphsmith-llama bench-loop`
    lines and `bench`'s time-to-first-token lines (`"kind": "ttft"`) go apart."""
    rows, errors, loops, ttfts = [], [], [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                errors.append(f"line {n}: not JSON ({e})")
                continue
            if row.get("kind") == "ttft" and "ttft_device_ms" in row:
                row["config"] = config_name(row.get("config", "?"))
                ttfts.append(row)
            elif "loop_ms_per_step" in row and "host_ms_per_step" in row and "k" in row:
                row["config"] = config_name(row.get("config", "?"))
                loops.append(row)
            elif "error" in row:
                errors.append(f"{row.get('impl')} {row.get('config')} batch {row.get('batch')}: {row['error']}")
            elif all(k in row for k in ("impl", "config", "batch", "steps_per_s")):
                row["config"] = config_name(row["config"])
                rows.append(row)
            else:
                errors.append(f"line {n}: missing impl/config/batch/steps_per_s")
    return rows, errors, loops, ttfts


def config_name(config):
    """The config a row names: graphsmith-llama names a model by its folder
    (`/tmp/llama-models/small-a`) or as `random:<config>:<seed>`; torch_bench.py by the
    folder's name less `-a`/`-b`. All become that short name."""
    if config.startswith("random:"):
        return config.split(":")[1]
    name = os.path.basename(config.rstrip("/"))
    for suffix in ("-a", "-b"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def index(rows):
    """(config, impl, batch) -> row; a repeated key keeps the last row."""
    return {(r["config"], r["impl"], int(r["batch"])): r for r in rows}


def best_pytorch(idx, config, batch):
    cands = [idx[(config, i, batch)] for i in PYTORCH if (config, i, batch) in idx]
    return max(cands, key=lambda r: r["steps_per_s"]) if cands else None


def ms(row):
    return row.get("ms_per_step") or 1e3 / row["steps_per_s"]


def fmt_mem(b):
    return "–" if b is None else f"{b / 2**30:.2f} GiB"


def ordered(values, order):
    return [v for v in order if v in values] + sorted(v for v in values if v not in order)


def config_section(idx, config):
    impls = ordered({k[1] for k in idx if k[0] == config}, IMPL_ORDER)
    batches = ordered({k[2] for k in idx if k[0] == config}, BATCHES)
    out = [f"## Config `{config}`", ""]
    head = "| impl | " + " | ".join(f"batch {b}: steps/s | ms/step | peak mem" for b in batches) + " |"
    out += [head, "|---|" + "---:|---:|---:|" * len(batches)]
    for impl in impls:
        cells = []
        for b in batches:
            r = idx.get((config, impl, b))
            cells += ["–"] * 3 if r is None else [f"{r['steps_per_s']:.1f}", f"{ms(r):.3f}", fmt_mem(r.get("peak_mem_bytes"))]
        out.append(f"| {impl} | " + " | ".join(cells) + " |")
    out.append("")
    out.append("Tokens/s = steps/s × batch. Peak memory includes the weights.")
    out.append("")
    lines = []
    for b in batches:
        gs, pt = idx.get((config, "graphsmith-graphs", b)), best_pytorch(idx, config, b)
        if gs and pt:
            lines.append(f"- batch {b}: graphsmith graphs / best PyTorch ({pt['impl']}) = "
                         f"**{gs['steps_per_s'] / pt['steps_per_s']:.2f}x** ({gs['steps_per_s']:.1f} vs {pt['steps_per_s']:.1f} steps/s)")
    gs1 = idx.get((config, "graphsmith-graphs", 1))
    floor = floor_of(idx, config)
    if gs1 and floor:
        lines.append(f"- floor: weights {floor[1] / 1e9:.3f} GB / copy {floor[2]:.2f} TB/s = {floor[0]:.3f} ms; "
                     f"graphsmith graphs at batch 1 = {ms(gs1):.3f} ms = **{ms(gs1) / floor[0]:.2f}x the floor**")
    if lines:
        out += ["Ratios:", ""] + lines + [""]
    for b in batches:
        r = idx.get((config, "lean-compiled", b))
        if r and "check_max_abs_diff" in r:
            out += [f"lean-compiled against transformers (one prompt, teacher-forced): logits max |diff| "
                    f"{r['check_max_abs_diff']:.4f}, argmax equal at {r.get('check_argmax_agree', '?')} steps; "
                    f"free-running greedy tokens agree for the first {r.get('check_tokens_agree', '?')}.", ""]
            break
    return out


def floor_of(idx, config):
    """(floor_ms, weight_bytes, copy_tb_s), from graphsmith's row of this config if any, else PyTorch's."""
    for impl in IMPL_ORDER:
        for b in BATCHES:
            r = idx.get((config, impl, b))
            if r and r.get("floor_ms") and r.get("weight_bytes") and r.get("copy_tb_s"):
                return r["floor_ms"], r["weight_bytes"], r["copy_tb_s"]
    return None


def goals(idx):
    """[(goal text, status, evidence)] for each goal of issue 13's 'Fast' evidence."""
    out = []

    def speedup(config, batch, want):
        gs, pt = idx.get((config, "graphsmith-graphs", batch)), best_pytorch(idx, config, batch)
        text = f"{config}, batch {batch}: graphsmith graphs ≥ {want}x the best PyTorch figure"
        if not (gs and pt):
            return (text, "not measured", "")
        ratio = gs["steps_per_s"] / pt["steps_per_s"]
        return (text, "met" if ratio >= want else "missed", f"{ratio:.2f}x ({gs['steps_per_s']:.1f} vs {pt['impl']} {pt['steps_per_s']:.1f} steps/s)")

    out.append(speedup("small", 1, 2.0))
    out.append(speedup("1b", 1, 2.0))
    out.append(speedup("small", 64, 1.2))
    out.append(speedup("1b", 64, 1.2))
    gs, floor = idx.get(("1b", "graphsmith-graphs", 1)), floor_of(idx, "1b")
    text = "1b, batch 1: time per token ≤ 1.3x the floor (weight bytes / copy bandwidth, same run)"
    if gs and floor:
        r = ms(gs) / floor[0]
        out.append((text, "met" if r <= 1.3 else "missed", f"{ms(gs):.3f} ms / {floor[0]:.3f} ms = {r:.2f}x"))
    else:
        out.append((text, "not measured", ""))
    gs = idx.get(("small", "graphsmith-graphs", 1))
    text = "small, batch 1: time per token ≤ 500 µs"
    out.append((text, "not measured", "") if not gs else (text, "met" if ms(gs) <= 0.5 else "missed", f"{ms(gs) * 1e3:.0f} µs"))
    return out


def baselines(idx):
    """Whether PyTorch's best case reached the figures the issue quotes."""
    out = []
    for config, batch, want in ISSUE_FIGURES:
        pt = best_pytorch(idx, config, batch)
        text = f"{config}, batch {batch}: best PyTorch ≥ {want:.0f} steps/s"
        if not pt:
            out.append((text, "not measured", ""))
            continue
        got = pt["steps_per_s"]
        status = "reached" if got >= want else ("within 5%" if got >= 0.95 * want else "below")
        out.append((text, status, f"{pt['impl']} {got:.1f} steps/s ({got / want:.2f}x)"))
    return out


def machine(rows):
    for r in rows:
        if r.get("gpu") or r.get("torch"):
            parts = [f"GPU {r.get('gpu', '?')}", f"driver {r.get('driver', '?')}", f"torch {r.get('torch', '?')}"]
            if r.get("cuda"):
                parts.append(f"CUDA {r['cuda']}")
            if r.get("transformers"):
                parts.append(f"transformers {r['transformers']}")
            return ", ".join(parts)
    return "unknown (no row names the machine)"


def loop_section(loops):
    """The device-side loop against K host launches of the step graph (`bench-loop`), and the
    loop with PDL against the step graph without it (issue 14's goal: at least 1.15x on the
    small config). Lines that carry `plain_ms_per_step` measured the plain step graph side by
    side with the loop (turn by turn, one process); otherwise the ratio is taken across passes
    (the no-PDL pass's host launches), and the report says so."""
    if not loops:
        return []
    out = ["## The device-side loop (`graphsmith-llama bench-loop`)", "",
           "| config | batch | K | PDL | loop, ms/step | K launches, ms/step | loop / launches "
           "| plain step graph, ms/step | same tokens |",
           "|---|---:|---:|---|---:|---:|---:|---:|---|"]
    key = lambda r: (CONFIG_ORDER.index(r["config"]) if r["config"] in CONFIG_ORDER else 99, r["config"],
                     r["batch"], r["k"], not r["pdl"])
    for r in sorted(loops, key=key):
        plain_ms = r.get("plain_ms_per_step")
        out.append(f"| {r['config']} | {r['batch']} | {r['k']} | {'on' if r['pdl'] else 'off'} | "
                   f"{r['loop_ms_per_step']:.4f} | {r['host_ms_per_step']:.4f} | "
                   f"{r['host_ms_per_step'] / r['loop_ms_per_step']:.3f}x | "
                   f"{f'{plain_ms:.4f}' if plain_ms else '–'} | "
                   f"{'yes' if r['same_tokens'] and r.get('plain_same_tokens') is not False else '**no**'} |")
    plain = {(r["config"], r["batch"], r["k"]): r for r in loops if not r["pdl"]}
    ratios = []
    for r in sorted(loops, key=key):
        if not r["pdl"]:
            continue
        if r.get("plain_ms_per_step"):
            ratios.append((r, r["plain_ms_per_step"] / r["loop_ms_per_step"], "side by side"))
        elif (r["config"], r["batch"], r["k"]) in plain:
            p = plain[(r["config"], r["batch"], r["k"])]
            ratios.append((r, p["host_ms_per_step"] / r["loop_ms_per_step"], "across passes"))
    if ratios:
        out += ["", "The loop with PDL against the step graph without it (K host launches; side by side: "
                "a second copy of the model, turn by turn in the same run; across passes: the no-PDL "
                "pass's launches):", ""]
        for r, ratio, how in ratios:
            goal = ""
            if r["config"] == "small" and r["batch"] == 1:
                goal = " (goal 1.15x: " + ("met" if ratio >= 1.15 else "**missed**") + ")"
            out.append(f"- {r['config']}, batch {r['batch']}, K = {r['k']}: {ratio:.3f}x, {how}{goal}")
    out.append("")
    return out


def ttft_section(ttfts):
    """graphsmith's time to first token per config, prompt length, batch and mode."""
    if not ttfts:
        return []
    out = ["## Time to first token (`graphsmith-llama bench`)", "",
           "The prompt prefilled (in chunks unless `prefill` says `steps`), lm_head, and the first "
           "token read back; device time between CUDA events on the model's stream, and the host's "
           "wall time; median of the runs, after a warm-up prefill that captures the chunk graphs.", "",
           "| config | prompt | batch | impl | prefill | device, ms | wall, ms | prompt tokens/s | chunks | peak |",
           "|---|---:|---:|---|---|---:|---:|---:|---:|---:|"]
    key = lambda r: (CONFIG_ORDER.index(r["config"]) if r["config"] in CONFIG_ORDER else 99, r["config"],
                     r["prompt_len"], r["batch"], r["impl"])
    for r in sorted(ttfts, key=key):
        prefill = r.get("prefill")
        prefill = f"chunks of {prefill['chunks']}" if isinstance(prefill, dict) else str(prefill)
        out.append(f"| {r['config']} | {r['prompt_len']} | {r['batch']} | {r['impl']} | {prefill} | "
                   f"{r['ttft_device_ms']:.3f} | {r['ttft_wall_ms']:.3f} | {r['prefill_tokens_per_s']:.0f} | "
                   f"{len(r.get('buckets') or [])} | {fmt_mem(r.get('peak_mem_bytes'))} |")
    out.append("")
    return out


def render(rows, errors, command, loops=(), ttfts=()):
    idx = index(rows)
    configs = ordered({k[0] for k in idx}, CONFIG_ORDER)
    out = ["# Llama decode: graphsmith against PyTorch", ""]
    out.append(f"Machine: {machine(rows)}.")
    out.append("")
    out.append(f"Command: `{command}`" if command else "Command: not given.")
    out.append("")
    steps = sorted({r["steps"] for r in rows if r.get("steps")})
    timed = f"{', '.join(map(str, steps))} timed steps" if steps else "timed steps as each program was asked"
    out.append("Decode steps only (prefill excluded), after a warm-up; device time between CUDA events; "
               "median of several runs. Random bf16 weights (`bench/llama/make_model.py`, seed 1), "
               f"prompts of 32 ids, {timed}.")
    out.append("")
    for config in configs:
        out += config_section(idx, config)
    out += ["## Goals (issue 13)", "", "| goal | status | evidence |", "|---|---|---|"]
    out += [f"| {g} | {s} | {e} |" for g, s, e in goals(idx)]
    out += ["", "## PyTorch against the figures the issue quotes", "", "| figure | status | measured |", "|---|---|---|"]
    out += [f"| {g} | {s} | {e} |" for g, s, e in baselines(idx)]
    out.append("")
    out += loop_section(list(loops))
    out += ttft_section(list(ttfts))
    if errors:
        out += ["## Failures", ""] + [f"- {e}" for e in errors] + [""]
    return "\n".join(out)


def self_test():
    def row(impl, config, batch, sps, **kw):
        r = {"impl": impl, "config": config, "batch": batch, "steps_per_s": sps, "ms_per_step": 1e3 / sps,
             "tokens_per_s": sps * batch, "peak_mem_bytes": 3 * 2**30}
        r.update(kw)
        return json.dumps(r)

    floor = dict(weight_bytes=2_471_000_000, copy_tb_s=4.29, floor_ms=2_471_000_000 / 4.29e12 * 1e3)
    lines = [
        "graphsmith-llama: loading...",  # not JSON: ignored
        row("graphsmith-graphs", "small", 1, 2500.0, **floor),
        row("graphsmith-eager", "small", 1, 300.0),
        row("lean-compiled", "small", 1, 530.0, gpu="NVIDIA H200", driver="570.1", torch="2.11.0", transformers="5.17.0",
            check_max_abs_diff=0.03125, check_argmax_agree="32/32", check_tokens_agree="32/32"),
        row("hf-generate-static-compiled", "small", 1, 400.0),
        row("graphsmith-graphs", "small", 64, 700.0),
        row("lean-compiled", "small", 64, 600.0),
        row("graphsmith-graphs", "1b", 1, 1000.0, **floor),
        row("hf-generate-static-compiled", "1b", 1, 380.0),
        row("lean-compiled", "1b", 1, 370.0),
        row("graphsmith-graphs", "1b", 64, 250.0, **floor),
        row("lean-compiled", "1b", 64, 200.0),
        json.dumps({"impl": "hf-generate-eager", "config": "1b", "batch": 8, "error": "RuntimeError: boom"}),
        # bench-loop: the loop with PDL 0.5 ms/step, the step graph without PDL 0.6 (1.2x).
        json.dumps({"impl": "graphsmith-loop", "config": "/m/small-a", "batch": 1, "k": 16, "pdl": True,
                    "loop_ms_per_step": 0.5, "host_ms_per_step": 0.51, "same_tokens": True}),
        json.dumps({"impl": "graphsmith-loop-nopdl", "config": "/m/small-a", "batch": 1, "k": 16, "pdl": False,
                    "loop_ms_per_step": 0.59, "host_ms_per_step": 0.6, "same_tokens": True}),
        # With the plain step graph measured side by side: 0.56 / 0.5 = 1.12x.
        json.dumps({"impl": "graphsmith-loop", "config": "/m/small-a", "batch": 1, "k": 64, "pdl": True,
                    "loop_ms_per_step": 0.5, "host_ms_per_step": 0.51, "plain_ms_per_step": 0.56,
                    "over_plain": 1.12, "same_tokens": True}),
        json.dumps({"kind": "ttft", "impl": "graphsmith-graphs", "config": "/m/1b", "batch": 1, "prompt_len": 2048,
                    "prefill": {"chunks": 512}, "ttft_device_ms": 30.0, "ttft_wall_ms": 31.5,
                    "prefill_tokens_per_s": 68266.7, "buckets": [512, 512, 512, 512], "graphs_captured": 1,
                    "capture_ms": 12.0, "peak_mem_bytes": 3 << 30, "first_token": 7, "runs": 5}),
    ]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "rows.jsonl")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        rows, errors, loops, ttfts = load(path)
        assert len(rows) == 11 and len(errors) == 1 and len(loops) == 3, (len(rows), errors, loops)
        assert len(ttfts) == 1, ttfts
        md = render(rows, errors, "bash bench/llama/run.sh bench out", loops, ttfts)
        md_path = os.path.join(d, "report.md")
        assert main_args([path, "--md", md_path, "--command", "x"]) == 0 and os.path.getsize(md_path) > 0
    g = {text: (status, ev) for text, status, ev in goals(index(rows))}
    expect = {
        "small, batch 1: graphsmith graphs ≥ 2.0x the best PyTorch figure": "met",  # 2500 / 530
        "1b, batch 1: graphsmith graphs ≥ 2.0x the best PyTorch figure": "met",  # 1000 / 380
        "small, batch 64: graphsmith graphs ≥ 1.2x the best PyTorch figure": "missed",  # 700 / 600 = 1.17
        "1b, batch 64: graphsmith graphs ≥ 1.2x the best PyTorch figure": "met",  # 1.25
        "1b, batch 1: time per token ≤ 1.3x the floor (weight bytes / copy bandwidth, same run)": "missed",  # 1.0 / 0.576
        "small, batch 1: time per token ≤ 500 µs": "met",  # 400 µs
    }
    for text, status in expect.items():
        assert g[text][0] == status, (text, g[text])
    assert "hf-generate-static-compiled 380.0" in g["1b, batch 1: graphsmith graphs ≥ 2.0x the best PyTorch figure"][1]
    b = {text: status for text, status, _ in baselines(index(rows))}
    assert b == {"small, batch 1: best PyTorch ≥ 528 steps/s": "reached",
                 "1b, batch 1: best PyTorch ≥ 384 steps/s": "within 5%",
                 "1b, batch 64: best PyTorch ≥ 245 steps/s": "below"}, b
    assert "- small, batch 1, K = 16: 1.200x, across passes (goal 1.15x: met)" in md, md
    assert "- small, batch 1, K = 64: 1.120x, side by side (goal 1.15x: **missed**)" in md, md
    assert "| small | 1 | 16 | on | 0.5000 | 0.5100 | 1.020x | – | yes |" in md, md
    assert "| 1b | 2048 | 1 | graphsmith-graphs | chunks of 512 | 30.000 | 31.500 | 68267 | 4 | 3.00 GiB |" in md, md
    assert "| small | 1 | 64 | on | 0.5000 | 0.5100 | 1.020x | 0.5600 | yes |" in md, md
    for needle in ["GPU NVIDIA H200, driver 570.1, torch 2.11.0, transformers 5.17.0",
                   "`bash bench/llama/run.sh bench out`", "## Config `small`", "## Config `1b`",
                   "**4.72x** (2500.0 vs 530.0 steps/s)", "**1.74x the floor**",
                   "| graphsmith-graphs | 2500.0 | 0.400 | 3.00 GiB | 700.0 | 1.429 | 3.00 GiB |",
                   "| hf-generate-static-compiled | 380.0 | 2.632 | 3.00 GiB | – | – | – |",
                   "hf-generate-eager 1b batch 8: RuntimeError: boom",
                   "logits max |diff| 0.0312, argmax equal at 32/32 steps"]:
        assert needle in md, (needle, md)
    assert md.index("## Config `small`") < md.index("## Config `1b`")
    # Nothing measured: every goal says so rather than met or missed.
    assert all(s == "not measured" for _, s, _ in goals({}))
    # graphsmith-llama names models by folder or as random:<config>:<seed>.
    for given, want in [("/tmp/llama-models/small-a", "small"), ("/m/1b/", "1b"),
                        ("random:tiny:3", "tiny"), ("1b", "1b")]:
        assert config_name(given) == want, (given, config_name(given))
    print("report self-test: ok", file=sys.stderr)
    return 0


def main_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rows", nargs="?")
    ap.add_argument("--md", help="write the markdown here too (it always goes to stdout)")
    ap.add_argument("--command", default="", help="the command that made the rows, quoted in the report")
    ap.add_argument("--shapes", metavar="DIR", help="run.sh shapes' folder of per-shape JSON lines (OUTDIR/shapes)")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args(argv)
    if args.self_test:
        import shapes_report

        return self_test() or shapes_report.self_test()
    if args.shapes:
        import shapes_report

        return shapes_report.main(args.shapes, args.md, args.command)
    if not args.rows:
        ap.error("ROWS.jsonl is required")
    rows, errors, loops, ttfts = load(args.rows)
    md = render(rows, errors, args.command, loops, ttfts)
    if args.md:
        with open(args.md, "w") as f:
            f.write(md + "\n")
    else:
        print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main_args(sys.argv[1:]))
