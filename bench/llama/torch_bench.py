#!/usr/bin/env python3
"""PyTorch's side of the decode benchmark: transformers' generate and a lean gpt-fast-style loop.

    python3 bench/llama/torch_bench.py --model DIR --batch 1,8,64 --steps 128 [--warmup 16] \
        [--impls hf-generate-eager,hf-generate-static-compiled,lean-compiled,hf-forward] [--runs 5] \
        [--config NAME] [--tune] [--ttft 512,2048] [--json]

Contenders (`--impls`, comma-separated):
- `hf-generate-eager`: `model.generate` greedy, transformers' default dynamic KV cache, no compile.
- `hf-generate-static-compiled`: `model.generate` greedy with `cache_implementation="static"`;
  transformers then compiles the one-token forward itself with
  `torch.compile(mode="reduce-overhead")` (CUDA graphs; `CompileConfig`).
- `lean-compiled`: PyTorch's best case, in the style of gpt-fast: the same weights (Q/K/V and
  gate/up fused into one matrix each), a static KV cache held as module buffers, the one-token
  step compiled with `mode="reduce-overhead"` and `fullgraph=True`, decode attention through the
  math SDPA backend (as gpt-fast does, so inductor fuses it), and a plain Python loop with
  `torch.argmax`. Prefill runs uncompiled. Before timing, its prefill logits are compared with
  transformers' forward on the same ids, and its first greedy tokens with transformers' generate
  (fields `check_max_abs_diff`, `check_tokens_agree`).
- `hf-forward`: not a decode contender: transformers' time to first token, for graphsmith-llama
  bench's (`"kind": "ttft"` lines of the same fields). Batch 1, the prompts of `--ttft` lengths
  from prompts.json (`prompt512`, `prompt2048`), one plain `model(input_ids)` forward (bf16,
  nothing compiled, the attention transformers loads by default, named in
  `attn_implementation`; `use_cache` left as a plain forward leaves it: the config's, True, so
  the forward also fills a DynamicCache, as a prefill must), then `torch.argmax` of the last
  position's logits. Device time between CUDA events around the forward and the argmax, wall
  time until the token is read back; two warm-up forwards, then the median of `--runs`. `--batch`
  does not apply to it.

Every batch uses B random prompts of `--prompt-len` ids (fixed seed), all the same length (no
padding). Timing: device time between CUDA events, over `--steps` decode steps after `--warmup`
decode steps of the same run (prefill excluded; compile happens in a first, untimed run); the
median of `--runs` runs. For generate, the events are recorded by a stopping criterion, which
generate calls once per forward, so the timed span covers exactly `--steps` forwards with all of
generate's own per-step work. Peak memory: `torch.cuda.max_memory_allocated()` after a reset
at the start of each (contender, batch) (weights included). The device-to-device copy bandwidth
(`copy_tb_s`, bytes read + written per second) and the floor (`weight_bytes / copy bandwidth`)
are measured in the same process.

One JSON object per (contender, batch) on stdout (bench/llama/README.md has the fields);
progress lines on stderr. Needs no network.
"""

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import torch.nn.attention  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from transformers import StoppingCriteria, StoppingCriteriaList  # noqa: E402

# Where everything runs; a CPU run (tests of the lean model's arithmetic) sets it to "cpu".
DEVICE = "cuda"
IMPLS = ["hf-generate-eager", "hf-generate-static-compiled", "lean-compiled", "hf-forward"]
# Contenders that need transformers' model (the lean one drops it when none comes after it).
NEEDS_HF = {"hf-generate-eager", "hf-generate-static-compiled", "hf-forward"}
PROMPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "prompts.json")


def log(msg):
    print(f"[torch_bench] {msg}", file=sys.stderr, flush=True)


def config_name(model_dir):
    """small-a -> small: the name of the config, as the Rust bench and the report use it."""
    name = os.path.basename(os.path.normpath(model_dir))
    for suffix in ("-a", "-b"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def machine():
    driver = None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        )
        driver = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        pass
    import transformers

    return {
        "gpu": torch.cuda.get_device_name(),
        "driver": driver,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
    }


def copy_bandwidth_tb_s(nbytes=1 << 30, reps=20):
    """Device-to-device copy bandwidth, bytes read plus bytes written per second, in TB/s."""
    a = torch.empty(nbytes, dtype=torch.uint8, device=DEVICE)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        b.copy_(a)
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1e3
    del a, b
    torch.cuda.empty_cache()
    return 2 * nbytes * reps / seconds / 1e12


def weight_bytes(model):
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


def prompts(batch, prompt_len, vocab, seed=0):
    g = torch.Generator().manual_seed(seed + batch)
    return torch.randint(3, min(vocab, 512), (batch, prompt_len), generator=g).to(DEVICE)


def greedy_config(new_tokens, static):
    """Plain greedy generation: no processors, no EOS, optionally the static cache (compiled)."""
    from transformers import GenerationConfig

    kwargs = dict(
        do_sample=False,
        num_beams=1,
        max_new_tokens=new_tokens,
        temperature=None,
        top_k=None,
        top_p=None,
        repetition_penalty=None,
        eos_token_id=None,
        bos_token_id=None,
        pad_token_id=0,
        use_cache=True,
    )
    if static:
        kwargs["cache_implementation"] = "static"
        try:
            from transformers import CompileConfig

            kwargs["compile_config"] = CompileConfig(mode="reduce-overhead")
        except ImportError:  # transformers' default compile config is reduce-overhead too
            pass
    else:
        kwargs["disable_compile"] = True
    return GenerationConfig(**kwargs)


class StepEvents(StoppingCriteria):
    """A stopping criterion that never stops and records a CUDA event after every forward."""

    def __init__(self, batch):
        self.events = []
        self.never = torch.zeros(batch, dtype=torch.bool, device=DEVICE)

    def __call__(self, input_ids, scores, **kwargs):
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        self.events.append(e)
        return self.never


def bench_generate(model, static, batch, args):
    """Median device ms per decode step of model.generate, and the run count."""
    ids = prompts(batch, args.prompt_len, model.config.vocab_size)
    mask = torch.ones_like(ids)
    total = args.warmup + args.steps + 1  # forward 0 is the prefill
    gen = greedy_config(total, static)
    model.generation_config = gen  # nothing is filled in from the checkpoint's generation config

    def once():
        rec = StepEvents(batch)
        with torch.no_grad():
            out = model.generate(ids, attention_mask=mask, generation_config=gen,
                                 stopping_criteria=StoppingCriteriaList([rec]))
        torch.cuda.synchronize()
        if out.shape[1] != args.prompt_len + total or len(rec.events) < args.warmup + args.steps + 1:
            raise RuntimeError(f"generate made {out.shape[1] - args.prompt_len} tokens, {len(rec.events)} events")
        return rec.events[args.warmup].elapsed_time(rec.events[args.warmup + args.steps]) / args.steps

    t0 = time.perf_counter()
    once()  # compiles (static) and warms up
    compile_s = time.perf_counter() - t0
    times = [once() for _ in range(args.runs)]
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    return statistics.median(times), compile_s, {"dynamo_graphs": graphs}


class LeanLayer(nn.Module):
    def __init__(self, sd, i, cfg, dtype):
        super().__init__()
        p = f"model.layers.{i}."
        attn, mlp = p + "self_attn.", p + "mlp."
        cat = lambda names: nn.Parameter(torch.cat([sd[n] for n in names]).contiguous(), requires_grad=False)  # noqa: E731
        self.wqkv = cat([attn + "q_proj.weight", attn + "k_proj.weight", attn + "v_proj.weight"])
        self.wo = nn.Parameter(sd[attn + "o_proj.weight"], requires_grad=False)
        self.w13 = cat([mlp + "gate_proj.weight", mlp + "up_proj.weight"])
        self.w2 = nn.Parameter(sd[mlp + "down_proj.weight"], requires_grad=False)
        self.ln1 = nn.Parameter(sd[p + "input_layernorm.weight"], requires_grad=False)
        self.ln2 = nn.Parameter(sd[p + "post_attention_layernorm.weight"], requires_grad=False)
        self.heads, self.kv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.ffn, self.eps = cfg.intermediate_size, cfg.rms_norm_eps
        self.register_buffer("k_cache", None, persistent=False)
        self.register_buffer("v_cache", None, persistent=False)

    def setup_cache(self, batch, max_seq, dtype):
        shape = (batch, self.kv, max_seq, self.hd)
        self.k_cache = static(torch.zeros(shape, dtype=dtype, device=DEVICE))
        self.v_cache = static(torch.zeros(shape, dtype=dtype, device=DEVICE))

    def forward(self, x, cos, sin, mask, input_pos):
        b, t, _ = x.shape
        h = rms_norm(x, self.ln1, self.eps)
        q, k, v = F.linear(h, self.wqkv).split([self.heads * self.hd, self.kv * self.hd, self.kv * self.hd], dim=-1)
        q = q.view(b, t, self.heads, self.hd).transpose(1, 2)
        k = k.view(b, t, self.kv, self.hd).transpose(1, 2)
        v = v.view(b, t, self.kv, self.hd).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        self.k_cache[:, :, input_pos] = k
        self.v_cache[:, :, input_pos] = v
        rep = self.heads // self.kv
        if t == 1:
            # One token: the `rep` query heads that share a KV head attend as `rep` rows of one
            # head (head h uses KV head h // rep), so the cache is read once, never repeated.
            y = F.scaled_dot_product_attention(
                q.reshape(b, self.kv, rep, self.hd), self.k_cache, self.v_cache, attn_mask=mask, scale=self.hd**-0.5
            ).reshape(b, self.heads, 1, self.hd)
        else:
            keys = self.k_cache.repeat_interleave(rep, dim=1)
            values = self.v_cache.repeat_interleave(rep, dim=1)
            y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.hd**-0.5)
        x = x + F.linear(y.transpose(1, 2).reshape(b, t, self.heads * self.hd), self.wo)
        gate, up = F.linear(rms_norm(x, self.ln2, self.eps), self.w13).split([self.ffn, self.ffn], dim=-1)
        return x + F.linear(F.silu(gate) * up, self.w2)


def static(t):
    """Tell torch.compile's CUDA graphs that t keeps its address (as transformers' StaticCache does)."""
    torch._dynamo.mark_static_address(t)
    return t


def rms_norm(x, w, eps):
    """transformers' LlamaRMSNorm: in fp32, cast back, then scaled."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * xf.to(x.dtype)


def rope(x, cos, sin):
    """transformers' rotate-half RoPE; cos/sin [T, head_dim] in the activation dtype."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class LeanLlama(nn.Module):
    """The whole decoder as a few matrices and buffers, gpt-fast style."""

    def __init__(self, hf):
        super().__init__()
        cfg = hf.config
        if getattr(cfg, "head_dim", None) is None:
            cfg.head_dim = cfg.hidden_size // cfg.num_attention_heads
        sd = {k: v.detach() for k, v in hf.state_dict().items()}
        self.dtype = sd["model.embed_tokens.weight"].dtype
        self.embed = nn.Parameter(sd["model.embed_tokens.weight"], requires_grad=False)
        head = sd.get("lm_head.weight", sd["model.embed_tokens.weight"])
        self.lm_head = self.embed if head.data_ptr() == self.embed.data_ptr() else nn.Parameter(head, requires_grad=False)
        self.norm = nn.Parameter(sd["model.norm.weight"], requires_grad=False)
        self.eps = cfg.rms_norm_eps
        self.layers = nn.ModuleList(LeanLayer(sd, i, cfg, self.dtype) for i in range(cfg.num_hidden_layers))
        # RoPE tables exactly as transformers makes them: its inv_freq (with the config's
        # scaling), fp32 angles, times attention_scaling, cast to the activation dtype.
        rot = getattr(hf.model, "rotary_emb", None)
        if rot is None:
            rot = next(m for m in hf.modules() if hasattr(m, "inv_freq"))
        self.inv_freq = rot.inv_freq.detach().float().to(DEVICE)
        self.attention_scaling = float(getattr(rot, "attention_scaling", 1.0))
        for name in ("cos", "sin", "causal"):
            self.register_buffer(name, None, persistent=False)

    def setup_caches(self, batch, max_seq):
        for layer in self.layers:
            layer.setup_cache(batch, max_seq, self.dtype)
        pos = torch.arange(max_seq, device=DEVICE, dtype=torch.float32)
        freqs = torch.outer(pos, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos = static((emb.cos() * self.attention_scaling).to(self.dtype))
        self.sin = static((emb.sin() * self.attention_scaling).to(self.dtype))
        self.causal = static(torch.tril(torch.ones(max_seq, max_seq, dtype=torch.bool, device=DEVICE)))

    def forward(self, idx, input_pos):
        x = F.embedding(idx, self.embed)
        cos, sin = self.cos[input_pos], self.sin[input_pos]
        mask = self.causal[None, None, input_pos]
        for layer in self.layers:
            x = layer(x, cos, sin, mask, input_pos)
        return F.linear(rms_norm(x, self.norm, self.eps), self.lm_head)


def decode_one(model, cur, input_pos):
    logits = model(cur, input_pos)
    return torch.argmax(logits[:, -1], dim=-1, keepdim=True)


def lean_check(hf, lean, args, n=32):
    """The lean model against transformers on one prompt: prefill and n-1 one-token steps,
    teacher-forced on generate's own greedy tokens, against transformers' forward over the
    whole sequence; and the first n greedy tokens of both, free-running."""
    p = args.prompt_len
    ids = prompts(1, p, hf.config.vocab_size)
    lean.setup_caches(1, p + n)
    with torch.no_grad():
        gen = greedy_config(n, static=False)
        hf.generation_config = gen
        ref = hf.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gen)[0, p:]
        want = hf(torch.cat([ids[0], ref[:-1]]).unsqueeze(0)).logits[0, p - 1 :].float()
        rows = [lean(ids, torch.arange(p, device=DEVICE))[0, -1]]
        for i in range(n - 1):
            rows.append(lean(ref[i].view(1, 1), torch.tensor([p + i], device=DEVICE))[0, -1])
        got = torch.stack(rows).float()
        diff = (want - got).abs().max().item()
        argmax_agree = int((got.argmax(-1) == want.argmax(-1)).sum().item())
        cur, toks = got[0].argmax().view(1, 1), []
        lean.setup_caches(1, p + n)
        lean(ids, torch.arange(p, device=DEVICE))
        for i in range(n):
            toks.append(cur.item())
            if i + 1 < n:
                cur = lean(cur, torch.tensor([p + i], device=DEVICE))[:, -1].argmax(-1, keepdim=True)
    agree = 0
    while agree < n and toks[agree] == ref[agree].item():
        agree += 1
    log(f"lean vs transformers: logits max |diff| {diff:.4f} over {n} steps (teacher-forced), argmax equal at "
        f"{argmax_agree}/{n}; free-running greedy tokens agree for the first {agree}/{n}")
    return {"check_max_abs_diff": diff, "check_argmax_agree": f"{argmax_agree}/{n}", "check_tokens_agree": f"{agree}/{n}"}


def bench_lean(lean, compiled, batch, args):
    steps = args.warmup + args.steps
    lean.setup_caches(batch, args.prompt_len + steps + 1)
    ids = prompts(batch, args.prompt_len, lean.embed.shape[0])
    out = torch.empty(batch, steps, dtype=torch.long, device=DEVICE)

    def once():
        with torch.no_grad():
            logits = lean(ids, torch.arange(args.prompt_len, device=DEVICE))
            cur = torch.argmax(logits[:, -1], dim=-1, keepdim=True)
            input_pos = torch.tensor([args.prompt_len], device=DEVICE, dtype=torch.long)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
                for i in range(steps):
                    if i == args.warmup:
                        start.record()
                    nxt = compiled(lean, cur, input_pos)
                    input_pos += 1
                    out[:, i : i + 1].copy_(nxt)
                    cur = nxt.clone()
            end.record()
            end.synchronize()
        return start.elapsed_time(end) / args.steps

    t0 = time.perf_counter()
    once()  # compiles and records the CUDA graph for this batch
    compile_s = time.perf_counter() - t0
    times = [once() for _ in range(args.runs)]
    distinct = len(set(out[0].tolist()))
    return statistics.median(times), compile_s, {"distinct_tokens_seq0": distinct}


def bench_hf_forward(hf, name, lens, args, info):
    """transformers' time to first token at batch 1: one JSON line per prompt length, shaped like
    graphsmith-llama bench's `"kind": "ttft"` lines. A length the model's context cannot hold
    (with one new token) is left out, as graphsmith-llama leaves it out; a length prompts.json
    lacks is an error line."""
    with open(args.prompts) as f:
        table = json.load(f)
    max_pos = hf.config.max_position_embeddings
    failures = 0
    for n in lens:
        ids_list = table.get(f"prompt{n}")
        if not isinstance(ids_list, list) or len(ids_list) != n:
            failures += 1
            print(json.dumps({"kind": "ttft", "impl": "hf-forward", "config": name, "batch": 1, "prompt_len": n,
                              "error": f"{args.prompts} has no prompt{n} of {n} ids"}), flush=True)
            continue
        if n >= max_pos:
            log(f"{name}: hf-forward: a prompt of {n} tokens is left out (max_position_embeddings {max_pos})")
            continue
        ids = torch.tensor([ids_list], dtype=torch.long, device=DEVICE)
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()

        def once():
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            with torch.no_grad():
                start.record()
                logits = hf(ids).logits
                token = torch.argmax(logits[:, -1], dim=-1)
                end.record()
            first = int(token[0].item())
            wall = (time.perf_counter() - t0) * 1e3
            end.synchronize()
            return start.elapsed_time(end), wall, first

        try:
            for _ in range(2):
                once()
            runs = [once() for _ in range(args.runs)]
        except Exception as e:  # one length failing must not hide the others
            failures += 1
            log(f"{name}: hf-forward prompt {n} FAILED: {type(e).__name__}: {e}")
            print(json.dumps({"kind": "ttft", "impl": "hf-forward", "config": name, "batch": 1, "prompt_len": n,
                              "error": f"{type(e).__name__}: {e}"}), flush=True)
            continue
        device_ms = statistics.median(r[0] for r in runs)
        row = {
            "kind": "ttft",
            "impl": "hf-forward",
            "config": name,
            "batch": 1,
            "prompt_len": n,
            "prefill": "forward",
            "ttft_device_ms": device_ms,
            "ttft_wall_ms": statistics.median(r[1] for r in runs),
            "prefill_tokens_per_s": n / (max(device_ms, 1e-9) * 1e-3),
            "buckets": [],
            "graphs_captured": 0,
            "capture_ms": 0.0,
            "peak_mem_bytes": torch.cuda.max_memory_allocated(),
            "first_token": runs[-1][2],
            "runs": args.runs,
            "use_cache": bool(getattr(hf.config, "use_cache", True)),
            "attn_implementation": getattr(hf.config, "_attn_implementation", None),
            **info,
        }
        log(f"{name}: hf-forward prompt {n}: {device_ms:.3f} ms device, {row['ttft_wall_ms']:.3f} ms wall")
        print(json.dumps(row), flush=True)
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--config", help="name in the output (default: the model folder's name less -a/-b)")
    ap.add_argument("--batch", default="1,8,64")
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=16)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--impls", default=",".join(IMPLS[:3]))
    ap.add_argument("--ttft", default="512,2048", help="hf-forward's prompt lengths (prompts.json's promptN)")
    ap.add_argument("--prompts", default=PROMPTS, help="hf-forward's prompts (default: prompts.json beside this file)")
    ap.add_argument("--tune", action="store_true",
                    help="inductor's coordinate-descent tuning, as gpt-fast sets it (slower compile: minutes per batch size)")
    ap.add_argument("--json", action="store_true", help="accepted for symmetry with graphsmith-llama; output is always JSON lines")
    args = ap.parse_args()
    impls = [i for i in args.impls.split(",") if i]
    bad = [i for i in impls if i not in IMPLS]
    if bad:
        ap.error(f"unknown impl(s) {bad}; choose from {IMPLS}")
    batches = [int(b) for b in args.batch.split(",") if b]
    if not torch.cuda.is_available():
        log("no CUDA device")
        return 2

    import torch._inductor.config as inductor

    def set_config(module, key, value):
        if hasattr(module, key):
            setattr(module, key, value)

    set_config(torch._dynamo.config, "recompile_limit", 64)  # one graph per batch size
    set_config(torch._dynamo.config, "cache_size_limit", 64)  # its older name
    set_config(inductor, "fx_graph_cache", True)
    set_config(inductor, "coordinate_descent_tuning", args.tune)  # gpt-fast turns it on
    from transformers import LlamaForCausalLM

    name = args.config or config_name(args.model)
    info = machine()
    log(f"{name}: {info}")
    hf = LlamaForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).to(DEVICE).eval()
    wbytes = weight_bytes(hf)
    copy = copy_bandwidth_tb_s()
    floor_ms = wbytes / (copy * 1e12) * 1e3
    log(f"{name}: weights {wbytes / 1e9:.3f} GB, copy {copy:.2f} TB/s, floor {floor_ms:.3f} ms/step")

    failures = 0
    lean = compiled = None
    for impl in impls:
        extra_impl = {}
        if impl == "hf-forward":
            if hf is None:
                log(f"{name}: hf-forward after lean-compiled: transformers' model was dropped; list it first")
                failures += 1
                continue
            failures += bench_hf_forward(hf, name, [int(n) for n in args.ttft.split(",") if n], args, info)
            continue
        if impl == "lean-compiled":
            lean = LeanLlama(hf).eval()
            extra_impl = lean_check(hf, lean, args)
            if not (NEEDS_HF & set(impls[impls.index(impl) + 1 :])):
                # Nothing after this needs transformers' model: drop its copies of Q/K/V and gate/up.
                hf = None
                gc.collect()
                torch.cuda.empty_cache()
            compiled = torch.compile(decode_one, mode="reduce-overhead", fullgraph=True, dynamic=False)
        for batch in batches:
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            log(f"{name}: {impl} batch {batch}: compiling/warming up, then {args.runs} runs of {args.warmup}+{args.steps} steps")
            try:
                if impl == "lean-compiled":
                    ms, compile_s, extra = bench_lean(lean, compiled, batch, args)
                else:
                    ms, compile_s, extra = bench_generate(hf, impl == "hf-generate-static-compiled", batch, args)
            except Exception as e:  # one contender failing must not hide the others
                failures += 1
                log(f"{name}: {impl} batch {batch} FAILED: {type(e).__name__}: {e}")
                print(json.dumps({"impl": impl, "config": name, "batch": batch, "error": f"{type(e).__name__}: {e}"}), flush=True)
                continue
            row = {
                "impl": impl,
                "config": name,
                "batch": batch,
                "steps": args.steps,
                "warmup": args.warmup,
                "prompt_len": args.prompt_len,
                "steps_per_s": 1e3 / ms,
                "tokens_per_s": batch * 1e3 / ms,
                "ms_per_step": ms,
                "peak_mem_bytes": torch.cuda.max_memory_allocated(),
                "weight_bytes": wbytes,
                "copy_tb_s": copy,
                "floor_ms": floor_ms,
                "compile_s": compile_s,
                "runs": args.runs,
                "tuned": args.tune,
                **extra_impl,
                **extra,
                **info,
            }
            log(f"{name}: {impl} batch {batch}: {1e3 / ms:.1f} steps/s, {ms:.3f} ms/step, "
                f"peak {row['peak_mem_bytes'] / 2**30:.2f} GiB (warm-up {compile_s:.1f} s)")
            print(json.dumps(row), flush=True)
        if impl == "lean-compiled":
            lean = compiled = None
            torch._dynamo.reset()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
