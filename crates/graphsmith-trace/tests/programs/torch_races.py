"""Two CUDA graphs over one tensor, replayed on two streams, for `graphsmith trace --hazards`
(races across graphs). Usage: python3 torch_races.py racy|fixed

- g1 spins (`torch.cuda._sleep`, so that a reader that does not wait really reads early), then
  copies `src` into `x`; g2 computes `y = x * 2`.
- racy: g1 replayed on s1 and g2 on s2 with no wait between them: exactly one race, on `x`.
- fixed: `s2.wait_stream(s1)` before g2's replay: no race, and `y` equals `2 * src` bit for bit.

Each of the three rounds poisons `x` and `y` with NaN first and ends with
`torch.cuda.synchronize()`. The script prints `x`'s address for check.py and, for the race, how
many elements of `y` were stale (reported, not tested: a race may or may not show).
"""
import sys

import torch

N = 1 << 20
ROUNDS = 3
SPIN_CYCLES = 20_000_000  # about 10 ms at 2 GHz


def main():
    fixed = {"racy": False, "fixed": True}[sys.argv[1]]
    src = torch.arange(N, dtype=torch.float32, device="cuda") * 0.25 + 1.0
    x = torch.full((N,), float("nan"), device="cuda")
    y = torch.full((N,), float("nan"), device="cuda")
    want = (src * 2.0).cpu()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    # Loads the kernels before the captures.
    torch.cuda._sleep(1000)
    x.copy_(src)
    torch.mul(x, 2.0, out=y)
    torch.cuda.synchronize()
    g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(g1):
        torch.cuda._sleep(SPIN_CYCLES)
        x.copy_(src)
    with torch.cuda.graph(g2):
        torch.mul(x, 2.0, out=y)
    print(f"torch_races: x {x.data_ptr():#x} bytes {x.numel() * x.element_size()}")
    stale = wrong = 0
    for _ in range(ROUNDS):
        x.fill_(float("nan"))
        y.fill_(float("nan"))
        torch.cuda.synchronize()
        with torch.cuda.stream(s1):
            g1.replay()
        if fixed:
            s2.wait_stream(s1)
        with torch.cuda.stream(s2):
            g2.replay()
        torch.cuda.synchronize()
        got = y.cpu()
        differs = got.view(torch.int32) != want.view(torch.int32)
        stale += int((differs & got.isnan()).sum())
        wrong += int((differs & ~got.isnan()).sum())
    if fixed:
        if stale or wrong:
            print(f"torch_races: fixed: {stale} stale and {wrong} wrong elements of y",
                  file=sys.stderr)
            sys.exit(1)
        print(f"torch_races: fixed ok ({ROUNDS} rounds, y == 2 * src bit for bit)")
    else:
        print(f"torch_races: racy stale {stale} of {N * ROUNDS} (wrong {wrong})")
        if wrong:
            sys.exit(1)


if __name__ == "__main__":
    main()
