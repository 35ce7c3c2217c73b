"""graphsmith.check on live CUDA graphs: a side stream's kernel writes `b` while the main
stream reads it, without `wait_stream` (a race), then the same with the wait (clean).

    python examples/python/check_race.py
"""

import torch

import graphsmith


def capture(join):
    a = torch.full((1 << 16,), 1.0, device="cuda")
    b = torch.full((1 << 16,), 3.0, device="cuda")
    side = torch.cuda.Stream()
    g = torch.cuda.CUDAGraph(keep_graph=True)
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            b.mul_(2.0)  # written on the side stream
        if join:
            torch.cuda.current_stream().wait_stream(side)
        c = b + a  # read on the main stream
        torch.cuda.current_stream().wait_stream(side)
    return g, (a, b, c)


for join in (False, True):
    g, keep = capture(join)
    print(f"--- {'with' if join else 'without'} wait_stream ---")
    print(graphsmith.check(g))
