"""Planted capture faults in PyTorch, for graphsmith trace's GPU tests.

Usage: python3 torch_faults.py <case>. Each case pushes NVTX ranges with torch.cuda.nvtx
("case:<name>" > "capture" > "fault") so that the report can be checked for the range stack at
the failing call. Errors raised by PyTorch are printed and swallowed: the script always exits 0.
"""
import sys

import torch

nvtx = torch.cuda.nvtx


def warm(x):
    # Warm up on a side stream, as torch.cuda.graph's documentation asks.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            y = x * 2 + 1
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    return y


def capture(case, body):
    x = torch.ones(1 << 16, device="cuda")
    warm(x)
    g = torch.cuda.CUDAGraph()
    with nvtx.range("case:" + case):
        try:
            with torch.cuda.graph(g):
                with nvtx.range("capture"):
                    out = body(x)
        except Exception as e:  # noqa: BLE001 - the point is to see what torch raises
            print(f"torch_faults: {case}: torch raised {type(e).__name__}: {e}".splitlines()[0])
            return None
    return g, x, out


def item(x):
    y = x * 2
    with nvtx.range("fault"):
        return y.sum().item()


def nonzero(x):
    y = x * 2
    with nvtx.range("fault"):
        return torch.nonzero(y)


SIDE = []  # a stream made before the capture, never joined to it


def escape(x):
    y = x * 2
    with nvtx.range("fault"):
        with torch.cuda.stream(SIDE[0]):
            z = x + 1
    return y, z


def clean(x):
    return torch.relu(x * 2 + 1).sum()


def main():
    case = sys.argv[1]
    SIDE.append(torch.cuda.Stream())
    body = {"item": item, "nonzero": nonzero, "escape": escape, "clean": clean}[case]
    r = capture(case, body)
    if r is not None and case in ("clean", "escape"):
        g, x, out = r
        for _ in range(10):
            g.replay()
        torch.cuda.synchronize()
        if case == "clean":
            expected = float(torch.relu(x * 2 + 1).sum())
            assert abs(float(out) - expected) < 1e-3, (float(out), expected)
    print(f"torch_faults: {case} done")


if __name__ == "__main__":
    main()
