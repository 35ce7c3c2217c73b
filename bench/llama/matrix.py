#!/usr/bin/env python3
"""The shape matrix: many Llama-architecture configs, saved by transformers itself, decoded by
graphsmith-llama and checked against transformers' own greedy decode.

    python3 bench/llama/matrix.py make  --out DIR [--seed 7] [--jobs 6]      # checkpoints + references (GPU)
    python3 bench/llama/matrix.py check --out DIR --bin gpu-bin/graphsmith-llama --report REPORT.md [--jobs 8]
    python3 bench/llama/matrix.py --self-test                                 # config coverage (stdlib only)

`make` draws at least 24 configs from `--seed` (query-per-KV groups 1, 2, 3, 4 and 8, head_dim
64 and 128, tied and untied embeddings, RoPE default, linear and llama3 with a small
`original_max_position_embeddings`, hidden and FFN sizes that are not powers of two,
vocabularies that are not multiples of 64, bf16, f16 and f32 weights) and adds seven published
shapes at 2 layers (SmolLM2-135M/360M/1.7B, Llama-3.2-1B/3B, Llama-3.1-8B, Llama-2-7B). Each is
built by `LlamaForCausalLM(LlamaConfig(...))` with random weights and written by transformers'
own `save_pretrained` into `DIR/<name>/v5` with nothing added. `DIR/<name>/v4` holds the same
weights (linked) under the spelling transformers 4 wrote (`rope_theta`, `rope_scaling` with
`type` or `rope_type`, `torch_dtype`); transformers is asked to read both and must see the same
RoPE settings. Then `reference.py` records transformers' greedy decode of 128 tokens for one
prompt (`single`), eight prompts of different lengths (`batch8`) and, for scaled RoPE, one
prompt of at least twice the original context (`long`).

`check` runs `graphsmith-llama check` on every config, both spellings, batch 1 and 8, eager and
graphs, and the long prompt, several processes at a time on the one GPU, and writes a Markdown
report with each check's worst ratio to the tolerance. Its closing line is `N passed, N failed`.
"""

import argparse
import concurrent.futures as futures
import json
import os
import random
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
NEW_TOKENS = 128

# Published shapes (their public config.json values; shapes.py holds them at full depth), taken
# at 2 layers (`all_configs`).
sys.path.insert(0, HERE)
from shapes import SHAPES  # noqa: E402


def log(msg):
    print(f"[matrix] {msg}", file=sys.stderr, flush=True)


def drawn_configs(seed, count=24):
    """`count` configs drawn from `seed`, covering every axis the matrix promises (see the
    module's doc; `coverage` checks it)."""
    rng = random.Random(seed)
    groups = [1, 2, 3, 4, 8]
    ropes = ["default", "linear", "llama3"]
    out = {}
    for i in range(count):
        group = groups[i % len(groups)]
        head_dim = [64, 128][(i // len(groups)) % 2]
        kv = rng.choice([1, 2, 3]) if group >= 4 else rng.choice([1, 2, 3, 5])
        heads = kv * group
        # Hidden equals heads x head_dim for most; every fourth has a wider attention than the
        # residual stream (head_dim given explicitly, as Llama-3.2-3B-style configs do).
        if i % 4 == 3 and heads % 2 == 0:
            hidden = heads * head_dim // 2
        else:
            hidden = heads * head_dim
        ffn = 8 * rng.randint(hidden // 8 * 2, hidden // 8 * 3 + 5)
        vocab = rng.randint(1000, 12000)
        if vocab % 64 == 0:
            vocab += rng.randint(1, 63)
        rope_type = ropes[i % len(ropes)]
        rope = {"rope_type": rope_type, "rope_theta": rng.choice([10000.0, 100000.0, 500000.0])}
        max_pos = 4096
        if rope_type == "linear":
            rope["factor"] = rng.choice([2.0, 4.0, 8.0])
        elif rope_type == "llama3":
            rope.update(factor=rng.choice([8.0, 16.0, 32.0]), low_freq_factor=1.0,
                        high_freq_factor=rng.choice([2.0, 4.0]),
                        original_max_position_embeddings=rng.choice([64, 96, 128]))
        cfg = dict(
            hidden_size=hidden,
            intermediate_size=ffn,
            num_attention_heads=heads,
            num_key_value_heads=kv,
            head_dim=head_dim,
            vocab_size=vocab,
            tie_word_embeddings=(i % 2 == 0),
            max_position_embeddings=max_pos,
            rms_norm_eps=rng.choice([1e-5, 1e-6]),
            rope_parameters=rope,
            num_hidden_layers=rng.choice([2, 2, 3]),
        )
        # A few checkpoints are stored in f16 and f32: the loader converts them to bf16.
        cfg["_store"] = {7: "float16", 13: "float32"}.get(i, "bfloat16")
        out[f"m{i:02d}-g{group}-d{head_dim}-{rope_type}"] = cfg
    return out


def all_configs(seed):
    configs = drawn_configs(seed)
    for name, shape in SHAPES.items():
        cfg = dict(shape, num_hidden_layers=2, _store="bfloat16")
        configs[name] = cfg
    return configs


def coverage(configs):
    """Problems with what `configs` covers (an empty list when the matrix's promises hold)."""
    def group(c):
        return c["num_attention_heads"] // c["num_key_value_heads"]

    def head_dim(c):
        return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]

    def pow2(n):
        return n & (n - 1) == 0

    drawn = {k: v for k, v in configs.items() if k not in SHAPES}
    problems = []
    if len(drawn) < 24:
        problems.append(f"{len(drawn)} drawn configs, want at least 24")
    for g in (1, 2, 3, 4, 8):
        if not any(group(c) == g for c in drawn.values()):
            problems.append(f"no config with {g} query heads per key/value head")
    for d in (64, 128):
        if not any(head_dim(c) == d for c in drawn.values()):
            problems.append(f"no config with head_dim {d}")
    for tied in (True, False):
        if not any(c["tie_word_embeddings"] == tied for c in drawn.values()):
            problems.append(f"no config with tie_word_embeddings {tied}")
    for r in ("default", "linear", "llama3"):
        if not any(c["rope_parameters"]["rope_type"] == r for c in drawn.values()):
            problems.append(f"no config with rope_type {r}")
    small = [c for c in drawn.values() if c["rope_parameters"].get("original_max_position_embeddings", 1e9) <= 128]
    if not small:
        problems.append("no llama3 config with a small original_max_position_embeddings")
    if not any(not pow2(c["hidden_size"]) for c in drawn.values()):
        problems.append("every hidden size is a power of two")
    if not any(not pow2(c["intermediate_size"]) for c in drawn.values()):
        problems.append("every FFN size is a power of two")
    if not any(c["vocab_size"] % 64 for c in drawn.values()):
        problems.append("every vocabulary is a multiple of 64")
    for s in ("float16", "float32"):
        if not any(c["_store"] == s for c in drawn.values()):
            problems.append(f"no checkpoint stored as {s}")
    for name, c in configs.items():
        if c["hidden_size"] % c["num_attention_heads"]:
            problems.append(f"{name}: hidden_size is not a multiple of num_attention_heads (transformers refuses it)")
    if set(SHAPES) - set(configs):
        problems.append(f"missing shapes {sorted(set(SHAPES) - set(configs))}")
    return problems


def long_context(cfg):
    """Length of the long prompt for a scaled config (at least twice its original context), or None."""
    rope = cfg["rope_parameters"]
    if rope["rope_type"] == "llama3":
        return 2 * int(rope["original_max_position_embeddings"]) + 32
    if rope["rope_type"] == "linear":
        return 320
    return None


def prompts_for(cfg, seed):
    """The prompt sets of one config: ids drawn below its vocabulary."""
    rng = random.Random(seed)
    v = cfg["vocab_size"]

    def prompt(n):
        return [rng.randrange(3, v) for _ in range(n)]

    sets = {"single": prompt(32), "batch8": [prompt(n) for n in (5, 17, 32, 9, 48, 23, 41, 12)]}
    n = long_context(cfg)
    if n is not None:
        sets["long"] = prompt(n)
    return sets


def legacy_config(v5):
    """config.json in the spelling transformers 4 wrote, from the one transformers 5 saved."""
    out = {k: v for k, v in v5.items() if k not in ("rope_parameters", "dtype")}
    rope = dict(v5.get("rope_parameters") or {"rope_type": "default", "rope_theta": 10000.0})
    out["rope_theta"] = rope.pop("rope_theta", 10000.0)
    kind = rope.pop("rope_type", "default")
    if kind == "default" and not rope:
        out["rope_scaling"] = None
    else:
        # Older checkpoints name the kind `type`; newer 4.x ones `rope_type`: both are written.
        key = "type" if len(json.dumps(v5, sort_keys=True)) % 2 else "rope_type"
        out["rope_scaling"] = dict(rope, **{key: kind})
    if "dtype" in v5:
        out["torch_dtype"] = v5["dtype"]
    return out


def make_one(name, cfg, seed, out):
    """Build, save (both spellings) and reference one config; runs in its own process."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    sys.path.insert(0, HERE)
    import reference

    fields = {k: v for k, v in cfg.items() if not k.startswith("_")}
    store = getattr(torch, cfg["_store"])
    root = os.path.join(out, name)
    v5, v4 = os.path.join(root, "v5"), os.path.join(root, "v4")
    os.makedirs(v4, exist_ok=True)
    config = LlamaConfig(**fields, bos_token_id=1, eos_token_id=2, pad_token_id=None)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(store).eval()
    model.save_pretrained(v5)
    del model
    with open(os.path.join(v5, "config.json")) as f:
        saved = json.load(f)
    with open(os.path.join(v4, "config.json"), "w") as f:
        json.dump(legacy_config(saved), f, indent=2, sort_keys=True)
    for fname in os.listdir(v5):
        if fname.endswith(".safetensors") or fname.endswith(".index.json"):
            dst = os.path.join(v4, fname)
            if not os.path.exists(dst):
                os.symlink(os.path.join("..", "v5", fname), dst)
    # transformers reads both spellings the same way (reported, not fatal: the checks say more).
    a = LlamaConfig.from_pretrained(v5).rope_parameters
    b = LlamaConfig.from_pretrained(v4).rope_parameters
    # transformers keeps a legacy `type` key beside `rope_type`: compare what it means.
    norm = lambda p: {k: float(x) if isinstance(x, (int, float)) else x for k, x in (p or {}).items() if k != "type"}
    agree = norm(a) == norm(b)
    if not agree:
        log(f"{name}: transformers reads the two spellings differently: {a} vs {b}")
    sets = prompts_for(cfg, seed + 1000)
    prompts = os.path.join(root, "prompts.json")
    with open(prompts, "w") as f:
        json.dump(sets, f)
    for s in sets:
        args = argparse.Namespace(model=v5, prompts=prompts, set=s, new_tokens=NEW_TOKENS,
                                  out=os.path.join(root, f"ref-{s}.safetensors"), device="cuda")
        if reference.run(args) != 0:
            raise RuntimeError(f"{name}: reference.py failed on set {s}")
    return {"name": name, "rope": a, "store": cfg["_store"], "sets": sorted(sets), "agree": agree}


def cmd_make(args):
    configs = all_configs(args.seed)
    problems = coverage(configs)
    if problems:
        for p in problems:
            log(f"coverage: {p}")
        return 1
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "configs.json"), "w") as f:
        json.dump(configs, f, indent=1, sort_keys=True)
    t0 = time.time()
    failed = 0
    with futures.ProcessPoolExecutor(max_workers=args.jobs) as pool:
        jobs = {pool.submit(make_one, n, c, args.seed + i, args.out): n for i, (n, c) in enumerate(configs.items())}
        for fut in futures.as_completed(jobs):
            try:
                r = fut.result()
                log(f"[{time.time() - t0:.0f}s] made {r['name']} ({r['store']}, rope {r['rope']}, sets {r['sets']}, "
                    f"transformers reads both spellings alike: {r['agree']})")
            except Exception as e:  # one config's failure is reported, the rest go on
                failed += 1
                log(f"[{time.time() - t0:.0f}s] FAILED {jobs[fut]}: {e!r}")
    log(f"made {len(configs) - failed} of {len(configs)} configs in {time.time() - t0:.0f}s")
    return 1 if failed else 0


def run_check(binary, model, ref, mode, timeout):
    # The rules' launch choices: many checks share the GPU at once, where a search would time
    # nothing meaningful (tests/gpu_search.rs holds searched choices to the rules' logits).
    cmd = [binary, "check", "--model", model, "--reference", ref, "--mode", mode, "--no-search", "--json"]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"pass": False, "error": f"timed out after {timeout}s", "seconds": timeout}
    row = {"exit": p.returncode, "seconds": round(time.time() - t0, 1)}
    try:
        d = json.loads(p.stdout.strip().splitlines()[-1])
        row["pass"] = bool(d.get("pass")) and p.returncode == 0
        row["worst_ratio"] = max((c.get("worst_ratio", float("inf")) for c in d.get("checks", [])), default=None)
        row["hazards"] = sum(n for _, n in d.get("hazards", []))
        if row["hazards"]:
            row["pass"] = False
    except (ValueError, IndexError):
        row["pass"] = False
        row["error"] = (p.stderr.strip().splitlines() or ["no output"])[-1][:300]
    return row


def run_inspect(binary, model):
    p = subprocess.run([binary, "inspect", "--model", model, "--json"], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or ["no output"])[-1][:300]
    # The values used for decoding; where each came from differs between spellings by design.
    return {k: v[0] for k, v in json.loads(p.stdout)["decoding"].items()}, None


def cmd_check(args):
    with open(os.path.join(args.out, "configs.json")) as f:
        configs = json.load(f)
    tasks = []
    for name, cfg in configs.items():
        root = os.path.join(args.out, name)
        if not os.path.exists(os.path.join(root, "ref-single.safetensors")):
            tasks.append((name, "-", "-", "-", None))
            continue
        for spelling in ("v5", "v4"):
            model = os.path.join(root, spelling)
            for s in ("single", "batch8"):
                for mode in ("eager", "graphs"):
                    tasks.append((name, spelling, s, mode, (model, os.path.join(root, f"ref-{s}.safetensors"), mode)))
            if os.path.exists(os.path.join(root, "ref-long.safetensors")):
                tasks.append((name, spelling, "long", "graphs",
                              (model, os.path.join(root, "ref-long.safetensors"), "graphs")))
    t0 = time.time()
    rows = {}
    with futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        jobs = {}
        for name, spelling, s, mode, what in tasks:
            if what is None:
                rows[(name, spelling, s, mode)] = {"pass": False, "error": "no reference (make failed)"}
                continue
            jobs[pool.submit(run_check, args.bin, *what, args.timeout)] = (name, spelling, s, mode)
        for fut in futures.as_completed(jobs):
            key = jobs[fut]
            rows[key] = fut.result()
            r = rows[key]
            log(f"[{time.time() - t0:.0f}s] {' '.join(key)}: {'ok' if r['pass'] else 'FAILED'} "
                f"ratio {r.get('worst_ratio')} {r.get('error', '')}")
    # Both spellings must be understood the same way (`inspect`), where the binary has it.
    same = {}
    for name in configs:
        root = os.path.join(args.out, name)
        if not os.path.isdir(os.path.join(root, "v5")):
            continue
        a, ea = run_inspect(args.bin, os.path.join(root, "v5"))
        b, eb = run_inspect(args.bin, os.path.join(root, "v4"))
        same[name] = (a is not None and a == b, ea or eb)
    write_report(args, configs, rows, same, time.time() - t0)
    passed = sum(1 for r in rows.values() if r["pass"]) + sum(1 for ok, _ in same.values() if ok)
    failed = len(rows) + len(same) - passed
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


def describe(cfg):
    rope = cfg["rope_parameters"]
    r = rope["rope_type"]
    if r == "linear":
        r += f" x{rope['factor']:g}"
    elif r == "llama3":
        r += f" x{rope['factor']:g}, orig {rope['original_max_position_embeddings']}"
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    return (f"{cfg['num_hidden_layers']}L h{cfg['hidden_size']} ffn{cfg['intermediate_size']} "
            f"{cfg['num_attention_heads']}q/{cfg['num_key_value_heads']}kv d{hd} v{cfg['vocab_size']} "
            f"{'tied' if cfg['tie_word_embeddings'] else 'untied'} {r} θ{rope['rope_theta']:g} {cfg['_store']}")


def write_report(args, configs, rows, same, seconds):
    cols = [(sp, s, m) for sp in ("v5", "v4") for s in ("single", "batch8") for m in ("eager", "graphs")]
    cols += [("v5", "long", "graphs"), ("v4", "long", "graphs")]
    worst = max((r.get("worst_ratio") or 0.0 for r in rows.values() if r["pass"]), default=0.0)
    passed = sum(1 for r in rows.values() if r["pass"])
    lines = [
        "# The shape matrix: graphsmith-llama against transformers",
        "",
        f"{len(configs)} configs, {len(rows)} teacher-forced checks of {NEW_TOKENS} steps: **{passed} passed, "
        f"{len(rows) - passed} failed**; worst ratio to the tolerance among passes {worst:.3f}. "
        f"Both spellings read the same by `inspect`: {sum(1 for ok, _ in same.values() if ok)} of {len(same)}. "
        f"({seconds:.0f} s of checks.)",
        "",
        "Cells: worst |logit difference| / tolerance over every step (tolerance: 16 bf16 ulps of the step's "
        "largest |reference logit|; a pass also needs argmax to agree above the margin and no hazard in any "
        "captured bucket). v5: config.json exactly as transformers 5 saved it; v4: the same weights under "
        "transformers 4's spelling. b1: one prompt; b8: eight prompts of different lengths decoded together; "
        "long: one prompt of at least twice the original context (scaled RoPE only).",
        "",
        "| config | shape | " + " | ".join(f"{sp} {'b1' if s == 'single' else 'b8' if s == 'batch8' else s} {m}"
                                         for sp, s, m in cols) + " | spellings |",
        "|---|---|" + "---:|" * len(cols) + "---|",
    ]
    for name, cfg in configs.items():
        cells = []
        for sp, s, m in cols:
            r = rows.get((name, sp, s, m))
            if r is None:
                cells.append("")
            elif r["pass"]:
                cells.append(f"{r['worst_ratio']:.3f}")
            else:
                err = r.get("error") or f"ratio {r.get('worst_ratio')}, hazards {r.get('hazards')}"
                cells.append(f"**FAIL** ({err})")
        ok, err = same.get(name, (False, "not made"))
        cells.append("same" if ok else f"**differ** ({err})" if err else "**differ**")
        lines.append(f"| {name} | {describe(cfg)} | " + " | ".join(cells) + " |")
    lines += ["", f"Made with `python3 bench/llama/matrix.py make --out DIR --seed {args.seed_used}` and "
              f"`python3 bench/llama/matrix.py check --out DIR --bin gpu-bin/graphsmith-llama --report REPORT.md`."]
    with open(args.report, "w") as f:
        f.write("\n".join(lines) + "\n")
    log(f"wrote {args.report}")


def self_test():
    configs = all_configs(7)
    problems = coverage(configs)
    assert not problems, problems
    assert len(configs) >= 31, len(configs)
    # The same seed draws the same matrix; another seed another one.
    assert all_configs(7) == configs and drawn_configs(8) != drawn_configs(7)
    # Coverage notices a missing axis.
    broken = {k: dict(v, tie_word_embeddings=True) for k, v in configs.items()}
    assert any("tie_word_embeddings False" in p for p in coverage(broken)), coverage(broken)
    # The legacy spelling: theta and scaling at the top, dtype as torch_dtype, nothing of v5's left.
    v5 = {"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
          "dtype": "bfloat16", "hidden_size": 64}
    v4 = legacy_config(v5)
    assert "rope_parameters" not in v4 and "dtype" not in v4 and v4["torch_dtype"] == "bfloat16", v4
    assert v4["rope_theta"] == 5e5 and v4["rope_scaling"]["factor"] == 8.0, v4
    assert v4["rope_scaling"].get("type", v4["rope_scaling"].get("rope_type")) == "llama3", v4
    plain = legacy_config({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4}})
    assert plain["rope_scaling"] is None and plain["rope_theta"] == 1e4, plain
    # Prompts stay inside the vocabulary; the long one is at least twice the original context.
    for cfg in configs.values():
        sets = prompts_for(cfg, 1)
        assert all(3 <= t < cfg["vocab_size"] for p in sets["batch8"] + [sets["single"]] for t in p)
        if cfg["rope_parameters"]["rope_type"] == "llama3":
            orig = cfg["rope_parameters"]["original_max_position_embeddings"]
            assert len(sets["long"]) >= 2 * orig, (len(sets["long"]), orig)
            assert len(sets["long"]) + NEW_TOKENS <= cfg["max_position_embeddings"]
    with tempfile.TemporaryDirectory() as d:
        # The report renders failures and passes.
        args = argparse.Namespace(report=os.path.join(d, "r.md"), seed_used=7)
        one = {"m00": configs[next(iter(configs))]}
        rows = {("m00", "v5", "single", "eager"): {"pass": True, "worst_ratio": 0.25},
                ("m00", "v4", "single", "eager"): {"pass": False, "error": "exit 2"}}
        write_report(args, one, rows, {"m00": (True, None)}, 1.0)
        text = open(args.report).read()
        assert "1 passed, 1 failed" in text and "0.250" in text and "**FAIL** (exit 2)" in text, text
    print("matrix self-test: ok", file=sys.stderr)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", nargs="?", choices=["make", "check"])
    ap.add_argument("--out", help="the matrix's folder")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--jobs", type=int, default=0, help="processes at a time (make: 6, check: 8)")
    ap.add_argument("--bin", default="gpu-bin/graphsmith-llama")
    ap.add_argument("--report")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per check")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.command or not args.out:
        ap.error("give make or check, and --out")
    args.seed_used = args.seed
    if args.command == "make":
        args.jobs = args.jobs or 6
        return cmd_make(args)
    if not args.report:
        ap.error("check needs --report")
    args.jobs = args.jobs or 8
    return cmd_check(args)


if __name__ == "__main__":
    sys.exit(main())
