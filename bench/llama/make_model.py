#!/usr/bin/env python3
"""Make a random Llama-architecture checkpoint in the HF layout for graphsmith-llama to load.

    python3 bench/llama/make_model.py --config {tiny,small,1b,SHAPE} --seed N --out DIR [--max-shard-size 1GB]
        [--device {auto,cpu,cuda}] [--skip-reload]
    python3 bench/llama/make_model.py --self-test     # the layout checker on a synthetic file (stdlib only)

`torch.manual_seed(N)`, `LlamaForCausalLM(config).to(torch.bfloat16)` (HF's init, std 0.02),
`save_pretrained(DIR)`: `config.json` + `model.safetensors` (or shards with their index).
SHAPE is one of the seven published shapes of `shapes.py` at full depth (smollm2-135m ...
llama-3.1-8b). `--device auto` (the default) builds those on the GPU when CUDA is available,
directly in bf16 (HF's init run on the device: an 8B model in seconds, not minutes and 32 GB of
fp32 on the CPU), and tiny/small/1b on the CPU as before (their weights for a seed are those of
earlier runs). The same seed on the same device gives the same weights; the CPU and the GPU
draw different ones. `--skip-reload` leaves out the reload comparison below (the layout check
and the forward pass still run), for the large shapes.
config.json is exactly what transformers 5 writes (`rope_parameters`, `dtype`): nothing is added.
(`matrix.py` writes the transformers 4 spelling on purpose, beside it.)

After saving, the tensor table of every safetensors file is read back from its header (stdlib
only) and checked against the config: every expected name present, bf16, the right shape, no
stray tensors. With a GPU, a forward pass over a few prompt ids shows the logits are not
degenerate (std and top-2 margin printed). Needs no network: nothing is downloaded.
"""

import argparse
import json
import os
import struct
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shapes import SHAPES  # noqa: E402

# Shapes of the three configs (bench/llama/README.md); the seven published shapes are added
# below, at full depth.
CONFIGS = {
    "tiny": dict(
        num_hidden_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=512,
        tie_word_embeddings=True,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    ),
    # Shaped like SmolLM2-135M.
    "small": dict(
        num_hidden_layers=30,
        hidden_size=576,
        num_attention_heads=9,
        num_key_value_heads=3,
        intermediate_size=1536,
        vocab_size=49152,
        tie_word_embeddings=True,
        max_position_embeddings=8192,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
    ),
    # Shaped like Llama-3.2-1B.
    "1b": dict(
        num_hidden_layers=16,
        hidden_size=2048,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        intermediate_size=8192,
        vocab_size=128256,
        tie_word_embeddings=True,
        max_position_embeddings=131072,
        rms_norm_eps=1e-5,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    ),
}


CPU_CONFIGS = tuple(CONFIGS)  # built on the CPU under --device auto
CONFIGS.update(SHAPES)


def log(msg):
    print(f"[make_model] {msg}", file=sys.stderr, flush=True)


def expected_tensors(cfg):
    """Name -> shape of every tensor a Llama checkpoint of `cfg` (a config.json dict) holds."""
    h = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or heads
    hd = cfg.get("head_dim") or h // heads
    ffn = cfg["intermediate_size"]
    vocab = cfg["vocab_size"]
    out = {"model.embed_tokens.weight": [vocab, h], "model.norm.weight": [h]}
    if not cfg.get("tie_word_embeddings", False):
        out["lm_head.weight"] = [vocab, h]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = [h]
        out[p + "post_attention_layernorm.weight"] = [h]
        out[p + "self_attn.q_proj.weight"] = [heads * hd, h]
        out[p + "self_attn.k_proj.weight"] = [kv * hd, h]
        out[p + "self_attn.v_proj.weight"] = [kv * hd, h]
        out[p + "self_attn.o_proj.weight"] = [h, heads * hd]
        out[p + "mlp.gate_proj.weight"] = [ffn, h]
        out[p + "mlp.up_proj.weight"] = [ffn, h]
        out[p + "mlp.down_proj.weight"] = [h, ffn]
    return out


DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "I64": 8}


def read_header(path):
    """The JSON header of a safetensors file (8-byte little-endian length, then JSON)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", raw)
        if n > size - 8:
            raise ValueError(f"{path}: header length {n} runs past the end of the file ({size} bytes)")
        header = json.loads(f.read(n))
    header["__file_size__"] = size
    header["__data_start__"] = 8 + n
    return header


def check_layout(model_dir, dtype="BF16"):
    """Problems found in the checkpoint in model_dir (an empty list when it is sound)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    want = expected_tensors(cfg)
    problems, seen = [], {}
    for name in files:
        path = os.path.join(model_dir, name)
        header = read_header(path)
        data_len = header.pop("__file_size__") - header.pop("__data_start__")
        header.pop("__metadata__", None)
        for tensor, info in header.items():
            seen[tensor] = name
            start, end = info["data_offsets"]
            numel = 1
            for d in info["shape"]:
                numel *= d
            if end > data_len or end - start != numel * DTYPE_BYTES.get(info["dtype"], 0):
                problems.append(f"{name}: tensor '{tensor}' offsets {start}..{end} do not fit its shape/dtype")
            if tensor not in want:
                problems.append(f"{name}: unexpected tensor '{tensor}'")
                continue
            if info["shape"] != want[tensor]:
                problems.append(f"{name}: tensor '{tensor}' has shape {info['shape']}, expected {want[tensor]}")
            if info["dtype"] != dtype:
                problems.append(f"{name}: tensor '{tensor}' is {info['dtype']}, expected {dtype}")
    for tensor in want:
        if tensor not in seen:
            problems.append(f"tensor '{tensor}' missing from {', '.join(files)}")
    return problems


def build_device(config_name, device, cuda_available):
    """Where the model is built: `cpu` or `cuda` as asked; `auto` builds the published shapes on
    the GPU when there is one, and tiny/small/1b on the CPU."""
    if device == "auto":
        return "cuda" if cuda_available and config_name not in CPU_CONFIGS else "cpu"
    return device


def make(config_name, seed, out, max_shard_size, device="auto", skip_reload=False):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    fields = dict(CONFIGS[config_name])
    rope = dict(fields["rope_parameters"])
    config = LlamaConfig(**fields, bos_token_id=1, eos_token_id=2, pad_token_id=None)
    where = build_device(config_name, device, torch.cuda.is_available())
    log(f"{config_name}: building on {where} with seed {seed} (HF init, initializer_range {config.initializer_range})")
    torch.manual_seed(seed)
    if where == "cuda":
        # Parameters made on the device in bf16 and initialized there (transformers' own
        # from_config(dtype=...) sets the default dtype the same way).
        torch.cuda.manual_seed_all(seed)
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            with torch.device("cuda"):
                model = LlamaForCausalLM(config)
        finally:
            torch.set_default_dtype(previous)
        bad = sorted({str(p.dtype) for p in model.parameters()} - {"torch.bfloat16"})
        if bad:
            log(f"{config_name}: parameters built on the GPU are {bad}, not bf16")
            return 1
        torch.cuda.synchronize()
    else:
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.eval()
    os.makedirs(out, exist_ok=True)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(out, **kwargs)
    params = sum(p.numel() for p in model.parameters())
    log(f"{config_name}: saved {params / 1e6:.1f} M parameters to {out}")

    problems = check_layout(out)
    for p in problems:
        log(f"layout problem: {p}")
    if problems:
        return 1

    # The saved file loads back into an identical model, and its logits are not degenerate.
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if skip_reload:
        log(f"{config_name}: --skip-reload: the saved file is not loaded back (its layout was checked)")
        reloaded = model.to(dev)
    else:
        reloaded = LlamaForCausalLM.from_pretrained(out, dtype=torch.bfloat16).to(dev).eval()
        got = reloaded.config.rope_parameters
        if float(got["rope_theta"]) != rope["rope_theta"] or got.get("rope_type") != rope["rope_type"]:
            log(f"reloaded rope_parameters {got} differ from {rope}")
            return 1
        saved = reloaded.state_dict()
        for name, a in model.state_dict().items():
            if name not in saved or not torch.equal(a.to(dev), saved[name]):
                log(f"tensor '{name}' differs after reloading")
                return 1
    ids = torch.arange(3, 35, device=dev).unsqueeze(0) % config.vocab_size
    with torch.no_grad():
        logits = reloaded(ids).logits[0].float()
    top2 = logits.topk(2, dim=-1).values
    margin = (top2[:, 0] - top2[:, 1]).median().item()
    std = logits.std(dim=-1).median().item()
    distinct = len(set(logits.argmax(-1).tolist()))
    log(f"logits over 32 positions: median std {std:.4f}, median top-2 margin {margin:.4f}, {distinct} distinct argmaxes")
    if not (std > 1e-3 and distinct > 1):
        log("logits look degenerate")
        return 1
    print(json.dumps({"config": config_name, "seed": seed, "dir": out, "parameters": params, "built_on": where}))
    return 0


def self_test():
    """Write a synthetic tiny checkpoint header by hand and check the checker on it."""
    cfg = dict(CONFIGS["tiny"])
    want = expected_tensors(cfg)
    assert len(want) == 2 + 9 * cfg["num_hidden_layers"], len(want)
    assert want["model.layers.0.self_attn.k_proj.weight"] == [32, 64]

    def write(dirname, tensors, dtype="BF16", truncate=0):
        header, offset = {}, 0
        for name, shape in tensors.items():
            n = DTYPE_BYTES[dtype]
            for d in shape:
                n *= d
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
            offset += n
        header["__metadata__"] = {"format": "pt"}
        raw = json.dumps(header).encode()
        with open(os.path.join(dirname, "model.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw + b"\0" * (offset - truncate))
        with open(os.path.join(dirname, "config.json"), "w") as f:
            json.dump(cfg, f)

    with tempfile.TemporaryDirectory() as d:
        write(d, want)
        assert check_layout(d) == [], check_layout(d)
        bad = dict(want)
        del bad["model.norm.weight"]
        bad["model.layers.1.mlp.up_proj.weight"] = [128, 63]
        bad["extra"] = [1]
        write(d, bad)
        got = check_layout(d)
        assert any("missing" in p and "model.norm.weight" in p for p in got), got
        assert any("up_proj" in p and "[128, 63]" in p for p in got), got
        assert any("unexpected tensor 'extra'" in p for p in got), got
        write(d, want, dtype="F32")
        assert any("is F32, expected BF16" in p for p in check_layout(d))
        write(d, want, truncate=2)
        assert any("do not fit" in p for p in check_layout(d))
    one_b = dict(CONFIGS["1b"])
    assert expected_tensors(one_b)["model.layers.15.self_attn.q_proj.weight"] == [2048, 2048]
    # The published shapes at full depth, and where --device auto builds each.
    eight_b = expected_tensors(CONFIGS["llama-3.1-8b"])
    assert len(eight_b) == 3 + 9 * 32 and eight_b["lm_head.weight"] == [128256, 4096], len(eight_b)
    assert eight_b["model.layers.31.self_attn.k_proj.weight"] == [1024, 4096]
    assert expected_tensors(CONFIGS["llama-3.2-3b"])["model.layers.27.self_attn.q_proj.weight"] == [3072, 3072]
    assert CONFIGS["smollm2-135m"]["num_hidden_layers"] == 30 and CONFIGS["llama-2-7b"]["num_hidden_layers"] == 32
    assert build_device("llama-3.1-8b", "auto", True) == "cuda"
    assert build_device("llama-3.1-8b", "auto", False) == "cpu"
    assert build_device("small", "auto", True) == "cpu" and build_device("small", "cuda", True) == "cuda"
    print("make_model self-test: ok", file=sys.stderr)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", choices=sorted(CONFIGS))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out")
    ap.add_argument("--max-shard-size", default=None, help="e.g. 1GB: write sharded files with an index")
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                    help="where to build: auto = the GPU for the published shapes when CUDA is available")
    ap.add_argument("--skip-reload", action="store_true",
                    help="do not load the saved file back to compare (large shapes; the layout is still checked)")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.config or not args.out:
        ap.error("--config and --out are required")
    return make(args.config, args.seed, args.out, args.max_shard_size, args.device, args.skip_reload)


if __name__ == "__main__":
    sys.exit(main())
