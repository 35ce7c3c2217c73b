"""What start-up costs a server that captures one CUDA graph per batch size: a small
Llama-like decoder (random bf16 weights, one decode step against a fixed key/value cache) is
captured with torch.cuda.graph for 35 batch sizes, vLLM's list (1, 2, 4, then 8 to 256 by 8),
largest first into one shared memory pool, as vLLM does. run_gpu.sh runs it under
`graphsmith trace --graphs --json` (case torch-graphs) and times it with and without the tracer.

Every graph is checked: its static output is filled with NaN, the graph is replayed, and the
output must match the eager forward pass computed before the capture.

Usage: python3 torch_graphs.py [--sizes 35] [--replays 10] [--pool shared|private]
Prints "torch_graphs: 35 graphs captured in X s; start-up Y s; replays checked".
"""
import argparse
import sys
import time

t_import = time.perf_counter()
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

D, HEADS, FF, LAYERS, CTX, VOCAB = 1024, 8, 2816, 4, 128, 8192
SIZES = [1, 2, 4] + list(range(8, 257, 8))


class Block(nn.Module):
    def __init__(self, max_batch):
        super().__init__()
        self.norm1 = nn.RMSNorm(D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.out = nn.Linear(D, D, bias=False)
        self.norm2 = nn.RMSNorm(D)
        self.gate_up = nn.Linear(D, 2 * FF, bias=False)
        self.down = nn.Linear(FF, D, bias=False)
        hd = D // HEADS
        self.register_buffer("k_cache", torch.randn(max_batch, HEADS, CTX, hd) * 0.5)
        self.register_buffer("v_cache", torch.randn(max_batch, HEADS, CTX, hd) * 0.5)

    def forward(self, x):
        b = x.shape[0]
        q, _, _ = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q = q.reshape(b, HEADS, 1, D // HEADS)
        a = F.scaled_dot_product_attention(q, self.k_cache[:b], self.v_cache[:b])
        x = x + self.out(a.reshape(b, D))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Decoder(nn.Module):
    def __init__(self, max_batch):
        super().__init__()
        self.blocks = nn.ModuleList(Block(max_batch) for _ in range(LAYERS))
        self.norm = nn.RMSNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


def capture(model, x, sizes, shared):
    """One graph per batch size, largest first; returns {size: (graph, static output, reference)}."""
    pool = torch.cuda.graph_pool_handle() if shared else None
    graphs = {}
    for b in sorted(sizes, reverse=True):
        ref = model(x[:b]).clone()  # eager warm-up and the reference
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool):
            out = model(x[:b])
        graphs[b] = (g, out, ref)
    return graphs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, default=35)
    ap.add_argument("--replays", type=int, default=10)
    ap.add_argument("--pool", choices=["shared", "private"], default="shared")
    args = ap.parse_args()
    sizes = SIZES[: args.sizes]
    torch.manual_seed(0)
    max_batch = max(sizes)
    with torch.device("cuda"):
        model = Decoder(max_batch).to(torch.bfloat16).eval()
        x = torch.randn(max_batch, D, dtype=torch.bfloat16)
    with torch.no_grad():
        t0 = time.perf_counter()
        graphs = capture(model, x, sizes, args.pool == "shared")
        torch.cuda.synchronize()
        captured = time.perf_counter() - t0
        startup = time.perf_counter() - t_import
        for g, _, _ in graphs.values():
            for _ in range(args.replays):
                g.replay()
        torch.cuda.synchronize()
        bad = []
        for b, (g, out, ref) in sorted(graphs.items()):
            out.fill_(float("nan"))
            g.replay()
            torch.cuda.synchronize()
            if not torch.allclose(out.float(), ref.float(), rtol=2e-2, atol=2e-2):
                err = (out.float() - ref.float()).abs().max().item()
                bad.append(f"batch {b}: max error {err}")
    if bad:
        print("torch_graphs: replay differs from the eager pass: " + "; ".join(bad), file=sys.stderr)
        return 1
    print(
        f"torch_graphs: {len(graphs)} graphs captured in {captured:.3f} s; "
        f"start-up {startup:.3f} s; replays checked ({args.replays + 1} per graph)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
