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
ESCAPED = []  # a tensor allocated before the capture, written in place by the escaping work


def escape(x):
    # The planted silent escape: a kernel on SIDE, a stream that is not capturing, while the
    # global-mode capture runs. It must not allocate: the caching allocator would cudaMalloc a
    # block for a new tensor on a non-capturing stream, which fails in a global-mode capture
    # (900) and invalidates it; nor synchronize or record an event. So: an in-place op with a
    # Python scalar (no temporary on the device) on a tensor allocated before the capture, on a
    # stream created before it; torch.cuda.stream() only sets the current stream.
    y = x * 2
    z = ESCAPED[0]
    with nvtx.range("fault"):
        with torch.cuda.stream(SIDE[0]):
            z.add_(1)
    return y, z


def clean(x):
    return torch.relu(x * 2 + 1).sum()


def main():
    case = sys.argv[1]
    SIDE.append(torch.cuda.Stream())
    if case == "escape":
        ESCAPED.append(torch.zeros(1 << 16, device="cuda"))
        ESCAPED[0].add_(0)  # loads the in-place add's kernel now, not lazily during the capture
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
        if case == "escape":
            # The escaped add ran once, eagerly, during the capture; the replays do not run it.
            assert bool((out[1] == 1).all()), float(out[1].sum())
    print(f"torch_faults: {case} done")


if __name__ == "__main__":
    main()
