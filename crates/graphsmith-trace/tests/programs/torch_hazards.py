"""Two side streams write the two halves of one caching-allocator segment (two tensors, `lo` and
`hi`, one block each) and the main stream reads both, for `graphsmith trace --hazards`'s GPU
tests. Usage: python3 torch_hazards.py joined|racy

- joined: the main stream waits for both side streams before it reads: no hazard;
- racy: it waits only for the first (the second `wait_stream` comes after the read): exactly
  one read-after-write, on `hi`'s block.

Bounded by the driver's allocations (the whole segment) the two writes would overlap; bounded
by the allocator's blocks, as `graphsmith.check` bounds them, they do not. The script prints
`hi`'s address and whether `lo` and `hi` share a segment, and, when the `graphsmith` package is
importable here, what `graphsmith.check` finds in the same graph ("torch_hazards: check N
hazards"), which tests/programs/check.py compares with the tracer's count. Results are checked
on the host (outputs poisoned with NaN first).
"""
import sys

import torch

N = 1 << 16  # 256 KiB of float32: blocks of the small pool's 2 MiB segments


def segment_of(address):
    for s in torch.cuda.memory_snapshot():
        if s["address"] <= address < s["address"] + s["total_size"]:
            return s["address"]
    return None


def main():
    join = {"joined": True, "racy": False}[sys.argv[1]]
    src = torch.arange(2 * N, dtype=torch.float32, device="cuda")
    lo = torch.full((N,), float("nan"), device="cuda")
    hi = torch.full((N,), float("nan"), device="cuda")
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    # Loads the kernels before the capture.
    torch.mul(src[:N], 2.0, out=lo)
    torch.add(src[N:], 1.0, out=hi)
    _ = lo + hi
    lo.fill_(float("nan"))
    hi.fill_(float("nan"))
    torch.cuda.synchronize()
    try:
        g = torch.cuda.CUDAGraph(keep_graph=True)
    except TypeError:  # before PyTorch 2.8: no keep_graph, no graphsmith.check
        g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        main_stream = torch.cuda.current_stream()
        s1.wait_stream(main_stream)
        s2.wait_stream(main_stream)
        with torch.cuda.stream(s1):
            torch.mul(src[:N], 2.0, out=lo)
        with torch.cuda.stream(s2):
            torch.add(src[N:], 1.0, out=hi)
        main_stream.wait_stream(s1)
        if join:
            main_stream.wait_stream(s2)
        total = lo + hi
        main_stream.wait_stream(s2)
    print(f"torch_hazards: hi {hi.data_ptr():#x}")
    print(f"torch_hazards: one segment {segment_of(lo.data_ptr()) == segment_of(hi.data_ptr())}")
    try:
        import graphsmith
    except ImportError as e:
        print(f"torch_hazards: graphsmith not importable ({e})")
    else:
        if hasattr(g, "raw_cuda_graph"):
            r = graphsmith.check(g)
            print(f"torch_hazards: check {len(r.hazards) + len(r.possible_hazards)} hazards")
            print(str(r))
        else:
            print("torch_hazards: graphsmith.check needs PyTorch 2.8 or newer")
    g.replay()  # instantiates (keep_graph) and launches: the tracer checks it here
    torch.cuda.synchronize()
    ok = torch.equal(lo, src[:N] * 2.0) and torch.equal(hi, src[N:] + 1.0)
    if join:
        ok = ok and torch.equal(total, lo + hi)
    print(f"torch_hazards: {sys.argv[1]} {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
