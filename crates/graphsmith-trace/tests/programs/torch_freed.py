"""A graph replayed after memory it reads was freed, in PyTorch, for `graphsmith trace --freed`'s
GPU tests: the LM-head case (a temporary weight read by a captured graph is freed, then the
graph is replayed). Usage: python3 torch_freed.py freed|clean

- freed: `del weight` returns the weight's block to the caching allocator (no driver call: the
  tracer cannot see that); `torch.cuda.empty_cache()` then returns its segment to the driver
  (`cudaFree`), which the tracer sees. The replay is reported before it runs; it would read
  unmapped memory, so the script leaves right after `replay()` returns (`os._exit`).
- clean: an unrelated tensor is freed and the cache emptied before the replays; the weight is
  freed after the last one. Nothing to report; the replays are checked on the host.

Each tensor is 16 MiB, so that the allocator gives it a segment of its own. The script prints
the weight's address and size, and the lines that allocated and freed it ("torch_freed: lines
ALLOC FREE"), which tests/programs/check.py compares with the report.
"""
import inspect
import os
import sys

import torch

N = 4 << 20  # 16 MiB of float32


def line():
    return inspect.currentframe().f_back.f_lineno


def main():
    case = sys.argv[1]
    x = torch.full((N,), 2.0, device="cuda")
    weight = torch.full((N,), 3.0, device="cuda"); alloc_line = line()  # noqa: E702
    scratch = torch.full((N,), 5.0, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up, as torch.cuda.graph's documentation asks
        y = x * weight
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    del y
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = x * weight
    torch.cuda.synchronize()
    print(f"torch_freed: weight {weight.data_ptr():#x} {weight.numel() * 4}", flush=True)
    if case == "freed":
        del weight
        torch.cuda.empty_cache(); free_line = line()  # noqa: E702
        print(f"torch_freed: lines {alloc_line} {free_line}", flush=True)
        g.replay()  # reported at the launch's entry, before it runs
        os._exit(0)  # before the replay's kernel reads unmapped memory
    del scratch
    torch.cuda.empty_cache()
    for _ in range(3):
        out.fill_(float("nan"))
        g.replay()
    torch.cuda.synchronize()
    ok = bool((out == 6.0).all())
    del weight
    print(f"torch_freed: {case} {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
