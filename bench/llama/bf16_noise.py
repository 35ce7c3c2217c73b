#!/usr/bin/env python3
"""How far transformers' own bf16 decode lies from the same model in float32, in the units of
graphsmith-llama's tolerance rule (bf16 ulps of the step's largest |logit|).

    python3 bench/llama/bf16_noise.py --model DIR --reference REF.safetensors

The reference holds transformers' bf16 logits of each decode step (`reference.py`). This script
loads the same weights upcast to float32, runs the prompt and the reference's greedy tokens in
one teacher-forced forward pass, and prints per sequence the largest and the median, over the
steps, of |bf16 logit - float32 logit| divided by one bf16 ulp of the step's largest |reference
logit|. That is the rounding noise bf16 itself puts into the reference: a bf16 implementation
that differs from transformers by about as many ulps is as near the exact model as transformers.
"""
import argparse
import json
import math
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
from reference import read_reference  # noqa: E402


def ulp(m):
    return 2.0 ** (math.floor(math.log2(m)) - 7) if m > 0 else 2.0 ** -133


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--reference", required=True)
    args = ap.parse_args()
    import numpy as np
    import torch
    from transformers import LlamaForCausalLM

    _, seqs = read_reference(args.reference)
    model = LlamaForCausalLM.from_pretrained(args.model, dtype=torch.float32).cuda().eval()
    out = []
    for s, (tokens, p, ref) in enumerate(seqs):
        n = ref.shape[0]
        ids = torch.tensor(tokens[: p + n - 1], dtype=torch.long, device="cuda")[None]
        with torch.no_grad():
            exact = model(ids).logits[0, p - 1 : p - 1 + n].float().cpu().numpy()
        ratios = []
        for i in range(n):
            m = float(np.abs(ref[i]).max())
            ratios.append(float(np.abs(ref[i] - exact[i]).max()) / ulp(m))
        row = {"model": args.model, "sequence": s, "steps": n,
               "max_ulps": max(ratios), "median_ulps": float(np.median(ratios)),
               "max_abs_diff": float(np.abs(ref - exact).max())}
        out.append(row)
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
