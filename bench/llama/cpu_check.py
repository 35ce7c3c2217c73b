#!/usr/bin/env python3
"""The scripts' torch and transformers code on the CPU, where a GPU is not at hand.

    python3 bench/llama/cpu_check.py     # needs torch and transformers; about a minute

On a tiny checkpoint and one with llama3 RoPE scaling and head_dim set: make_model (save, reload,
layout), reference (greedy = argmax of raw logits, file read back, logits equal to a
teacher-forced forward), the lean model against transformers (teacher-forced logits and
free-running tokens), the lean one-token step traced whole by torch.compile (`aot_eager`: the
same graph inductor gets, no compiler needed) giving the eager tokens, and the generate contender's
step count (a stand-in for CUDA events counts the forwards), and the hf-forward contender's
time-to-first-token lines (their fields and first token). Timings are not checked here.
"""

import json
import os
import sys
import tempfile
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import make_model  # noqa: E402
import reference  # noqa: E402
import torch_bench  # noqa: E402

torch_bench.DEVICE = "cpu"


class CountingEvent:
    """Stands in for torch.cuda.Event: elapsed time = number of events recorded in between."""

    count = 0

    def __init__(self, enable_timing=True):
        CountingEvent.count += 1
        self.i = CountingEvent.count

    def record(self):
        pass

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return float(other.i - self.i)


def check_model(name, folder):
    from transformers import LlamaForCausalLM

    assert make_model.make(name, 1, folder, None) == 0, f"make_model {name}"
    ref = os.path.join(folder, "ref.safetensors")
    args = types.SimpleNamespace(model=folder, prompts=os.path.join(os.path.dirname(__file__), "prompts.json"),
                                 set="batch8", new_tokens=16, out=ref, device="cpu")
    assert reference.run(args) == 0, "reference"
    meta, seqs = reference.read_reference(ref)
    assert meta["sequences"] == "8" and meta["new_tokens"] == "16", meta
    hf = LlamaForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).eval()
    for tokens, plen, logits in seqs:
        with torch.no_grad():
            full = hf(torch.tensor(tokens[:-1], dtype=torch.long).unsqueeze(0)).logits[0, plen - 1 :].float().numpy()
        assert np.abs(full - logits).max() < 0.1, np.abs(full - logits).max()
    lean = torch_bench.LeanLlama(hf).eval()
    check = torch_bench.lean_check(hf, lean, types.SimpleNamespace(prompt_len=32), n=32)
    assert check["check_max_abs_diff"] < 0.1 and check["check_argmax_agree"] in ("32/32", "31/32"), check

    compiled = torch.compile(torch_bench.decode_one, backend="aot_eager", fullgraph=True, dynamic=False)
    lean.setup_caches(2, 64)
    ids = torch_bench.prompts(2, 32, hf.config.vocab_size)
    tokens = {}
    with torch.no_grad():
        for label, step in (("eager", torch_bench.decode_one), ("compiled", compiled)):
            cur = lean(ids, torch.arange(32))[:, -1].argmax(-1, keepdim=True)
            pos, out = torch.tensor([32]), []
            for _ in range(16):
                cur = step(lean, cur, pos).clone()
                pos += 1
                out.append(cur)
            tokens[label] = torch.cat(out, dim=1)
    assert torch.equal(tokens["eager"], tokens["compiled"]), tokens

    real = torch.cuda.Event
    torch.cuda.Event = CountingEvent
    try:
        steps = types.SimpleNamespace(prompt_len=32, warmup=3, steps=5, runs=1)
        ms, _, _ = torch_bench.bench_generate(hf, False, 2, steps)
        assert ms == 1.0, ms  # exactly `steps` forwards between the two events, one event each
        # transformers' time to first token: one line per length the context holds, shaped like
        # graphsmith-llama's ttft lines, its token the argmax of a plain forward's last logits.
        lines = []

        def capture(*args, **kwargs):  # stdout's JSON lines kept; log lines (stderr) printed
            if "file" in kwargs:
                print(*args, **kwargs)
            else:
                lines.append(json.loads(args[0]))

        torch_bench.print = capture
        try:
            ttft_args = types.SimpleNamespace(prompts=os.path.join(os.path.dirname(__file__), "prompts.json"), runs=3)
            failures = torch_bench.bench_hf_forward(hf, name, [512, 2048], ttft_args, {"gpu": "cpu"})
        finally:
            del torch_bench.print
        assert failures == 0, lines
        want_lens = [n for n in (512, 2048) if n < hf.config.max_position_embeddings]
        assert [r["prompt_len"] for r in lines] == want_lens, lines
        with open(ttft_args.prompts) as f:
            prompt512 = json.load(f)["prompt512"]
        with torch.no_grad():
            want = int(hf(torch.tensor([prompt512])).logits[0, -1].argmax())
        for r in lines:
            assert r["kind"] == "ttft" and r["impl"] == "hf-forward" and r["batch"] == 1, r
            assert r["ttft_device_ms"] == 1.0 and r["use_cache"] is True, r  # start and end events only
        assert lines[0]["first_token"] == want, (lines[0], want)
    finally:
        torch.cuda.Event = real
    print(f"cpu_check {name}: ok ({check})", file=sys.stderr)


def main():
    torch.set_num_threads(min(4, os.cpu_count() or 1))
    torch.cuda.synchronize = lambda *a, **k: None  # bench_generate waits for the device
    # bench_hf_forward's memory figures: nothing to reset or read on the CPU.
    torch.cuda.reset_peak_memory_stats = lambda *a, **k: None
    torch.cuda.max_memory_allocated = lambda *a, **k: 0
    mini3 = dict(make_model.CONFIGS["1b"])
    mini3.update(num_hidden_layers=2, hidden_size=256, num_attention_heads=8, num_key_value_heads=2, head_dim=64,
                 intermediate_size=512, vocab_size=1024)
    make_model.CONFIGS["mini-llama3"] = mini3
    with tempfile.TemporaryDirectory() as d:
        for name in ("tiny", "mini-llama3"):
            check_model(name, os.path.join(d, name))
    print("cpu_check: ok", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
