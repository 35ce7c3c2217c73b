"""The tracer's overhead benchmark: a PyTorch program that captures one training-free forward
pass of a small MLP in a CUDA graph and replays it many times. run_gpu.sh times this whole
process end to end with and without `graphsmith trace` (the issue's limit: 1.10x).

Usage: python3 torch_bench.py [replays]
"""
import sys
import time

import torch

replays = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
t0 = time.perf_counter()
torch.manual_seed(0)
model = torch.nn.Sequential(
    *[m for _ in range(8) for m in (torch.nn.Linear(1024, 1024), torch.nn.GELU())]
).cuda().eval()
x = torch.randn(256, 1024, device="cuda")
with torch.no_grad():
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(20):  # eager warm-up: every kernel launched through the traced APIs
            y = model(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = model(x)
    for _ in range(replays):
        g.replay()
    torch.cuda.synchronize()
print(f"torch_bench: {replays} replays, {time.perf_counter() - t0:.3f} s after import, checksum {float(y.sum()):.3f}")
