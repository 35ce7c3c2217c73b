#!/usr/bin/env python3
"""transformers' own greedy decode of each prompt, saved for graphsmith-llama's check.

    python3 bench/llama/reference.py --model DIR --prompts bench/llama/prompts.json \
        --set {single,batch8,prompt512,prompt2048} --new-tokens 128 --out REF.safetensors
    python3 bench/llama/reference.py --self-test      # the file layout, with numpy only

Sets of prompts.json: `single` (32 ids), `batch8` (8 prompts of 5 to 48 ids), `prompt512` and
`prompt2048` (one prompt of 512 or 2,048 ids; transformers runs the prompt as one forward, as
graphsmith-llama's chunked prefill is checked against). A prompt plus the new tokens must fit the
model's `max_position_embeddings` (the `tiny` config's 2,048 positions take `prompt512`, not
`prompt2048`): a longer request is refused, since transformers would go on past the positions
the model was made for and graphsmith-llama refuses such a context.

Each prompt runs on its own (batch 1, no padding), greedy (`do_sample=False`, one beam), with
transformers' default dynamic KV cache, bf16 weights and activations. The generation config is
built here from scratch, so nothing the checkpoint's generation_config.json holds (repetition
penalty, temperature, top-k, EOS) changes the choice of token: every generated token is the
argmax of the raw logits of its step, and this script checks that it is.

Tensors for sequence s = 0, 1, ...:
    tokens.s      int32 [P+N]   the prompt, then the N greedy tokens
    prompt_len.s  int32 [1]     P
    logits.s      float32 [N,V] raw logits of decode step i (`output_logits=True`: before any
                                logits processor), the distribution token i was chosen from;
                                step 0 is the last prompt position
Header metadata: {"sequences": "<count>", "new_tokens": "<N>", "model": "<DIR>"}.
The file is written with safetensors' numpy front end (no torch needed to read it back).
"""

import argparse
import json
import os
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def log(msg):
    print(f"[reference] {msg}", file=sys.stderr, flush=True)


def write_reference(path, sequences, new_tokens, model):
    """sequences: list of (prompt list[int], generated list[int], logits np.float32 [N, V])."""
    import numpy as np
    from safetensors.numpy import save_file

    tensors = {}
    for s, (prompt, generated, logits) in enumerate(sequences):
        if len(generated) != new_tokens or logits.shape[0] != new_tokens:
            raise ValueError(f"sequence {s}: {len(generated)} tokens, {logits.shape[0]} logit rows, expected {new_tokens}")
        tensors[f"tokens.{s}"] = np.asarray(list(prompt) + list(generated), dtype=np.int32)
        tensors[f"prompt_len.{s}"] = np.asarray([len(prompt)], dtype=np.int32)
        tensors[f"logits.{s}"] = np.ascontiguousarray(logits, dtype=np.float32)
    meta = {"sequences": str(len(sequences)), "new_tokens": str(new_tokens), "model": str(model)}
    save_file(tensors, path, metadata=meta)


def read_reference(path):
    """(metadata, [(tokens, prompt_len, logits)]) from a reference file."""
    from safetensors import safe_open

    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
        seqs = []
        for s in range(int(meta["sequences"])):
            seqs.append((f.get_tensor(f"tokens.{s}"), int(f.get_tensor(f"prompt_len.{s}")[0]), f.get_tensor(f"logits.{s}")))
    return meta, seqs


def greedy_config(new_tokens):
    """A generation config with nothing but greedy search: no processors, no early stop."""
    from transformers import GenerationConfig

    return GenerationConfig(
        do_sample=False,
        num_beams=1,
        max_new_tokens=new_tokens,
        min_new_tokens=None,
        temperature=None,
        top_k=None,
        top_p=None,
        repetition_penalty=None,
        no_repeat_ngram_size=None,
        eos_token_id=None,
        bos_token_id=None,
        pad_token_id=0,
        output_logits=True,
        return_dict_in_generate=True,
        use_cache=True,
    )


def run(args):
    import numpy as np
    import torch
    from transformers import LlamaForCausalLM

    with open(args.prompts) as f:
        prompts = json.load(f)[args.set]
    if prompts and isinstance(prompts[0], int):
        prompts = [prompts]  # a set of one prompt (`single`, `long`)
    model = LlamaForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).to(args.device).eval()
    log(f"{args.model}: rope {model.config.rope_parameters}, {len(prompts)} prompt(s), {args.new_tokens} new tokens each")
    gen = greedy_config(args.new_tokens)
    # generate() fills values left at the global default from model.generation_config (the
    # checkpoint's eos_token_id=2, for one): make the model's own config this greedy one.
    model.generation_config = gen
    sequences = []
    for s, prompt in enumerate(prompts):
        if max(prompt) >= model.config.vocab_size:
            raise ValueError(f"prompt {s} holds id {max(prompt)}, beyond the vocabulary ({model.config.vocab_size})")
        limit = model.config.max_position_embeddings
        if len(prompt) + args.new_tokens > limit:
            log(f"sequence {s}: a prompt of {len(prompt)} tokens plus {args.new_tokens} new tokens is longer than the "
                f"model's {limit} positions (max_position_embeddings): take a shorter set or fewer --new-tokens")
            return 1
        ids = torch.tensor([prompt], dtype=torch.long, device=args.device)
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gen)
        generated = out.sequences[0, len(prompt) :].tolist()
        logits = torch.stack([step[0].float() for step in out.logits]).cpu().numpy()
        if len(generated) != args.new_tokens or logits.shape != (args.new_tokens, model.config.vocab_size):
            log(f"sequence {s}: got {len(generated)} tokens and logits {logits.shape}")
            return 1
        # Greedy on raw logits: each token is the argmax of its step (ties go to the lower id).
        argmax = logits.argmax(axis=-1)
        wrong = [i for i in range(args.new_tokens) if argmax[i] != generated[i]]
        if wrong:
            log(f"sequence {s}: token differs from the raw logits' argmax at steps {wrong[:10]}: a processor ran")
            return 1
        top2 = np.sort(logits, axis=-1)[:, -2:]
        margins = top2[:, 1] - top2[:, 0]
        log(
            f"sequence {s}: prompt {len(prompt)}, logits std {logits.std(axis=-1).mean():.4f}, "
            f"top-2 margin min {margins.min():.4f} median {np.median(margins):.4f}, "
            f"{len(set(generated))} distinct tokens"
        )
        sequences.append((prompt, generated, logits))
    write_reference(args.out, sequences, args.new_tokens, args.model)
    log(f"wrote {args.out}")
    return 0


def self_test():
    import numpy as np

    rng = np.random.default_rng(0)
    seqs = []
    for p in (5, 17):
        logits = rng.standard_normal((4, 512)).astype(np.float32)
        seqs.append((list(range(3, 3 + p)), logits.argmax(-1).tolist(), logits))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ref.safetensors")
        write_reference(path, seqs, 4, "/tmp/m")
        meta, back = read_reference(path)
        assert meta == {"sequences": "2", "new_tokens": "4", "model": "/tmp/m"}, meta
        for (prompt, gen, logits), (tokens, plen, got) in zip(seqs, back):
            assert tokens.dtype == np.int32 and tokens.tolist() == prompt + gen
            assert plen == len(prompt)
            assert got.dtype == np.float32 and got.shape == (4, 512) and np.array_equal(got, logits)
        try:
            write_reference(path, seqs, 5, "/tmp/m")
        except ValueError as e:
            assert "expected 5" in str(e)
        else:
            raise AssertionError("a short sequence was accepted")
    print("reference self-test: ok", file=sys.stderr)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model")
    ap.add_argument("--prompts", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "prompts.json"))
    ap.add_argument("--set", default="single",
                    help="a set of the prompts file: single, batch8, prompt512, prompt2048 (matrix.py's files: long)")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--out")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.model or not args.out:
        ap.error("--model and --out are required")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
