#!/usr/bin/env python3
"""Claim i, the PyTorch half, as found in CUDA-graph tutorials and posts:
"a torch.cuda.graph() re-captured many times leaks unless
the old graph is destroyed explicitly; the Python reference count reaching zero does not
release the CUDA graph (relying on RAII or the GC is high risk)."

Method: one cycle = capture 10 in-place adds with `with torch.cuda.graph(g)`, replay once.
Device memory (torch.cuda.mem_get_info, i.e. cudaMemGetInfo) and host RSS before and after:
  1. 1,000 cycles dropping the only reference to each graph (no explicit destroy call);
  2. 500 cycles keeping every graph in a list, then dropping the list.
Prints `CLAIM i-torch: ... -> verdict`.
"""
import os
import sys
import time


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main():
    try:
        import torch
    except ImportError as e:
        print(f"CLAIM i-torch: not run, PyTorch is not importable ({e}) -> n/a")
        return 0
    if not torch.cuda.is_available():
        print("CLAIM i-torch: not run, PyTorch sees no CUDA device -> n/a")
        return 0
    print(f'claim i-torch: "re-captured torch.cuda graphs leak unless destroyed explicitly"\n'
          f"  program: bench/claims/claim_i_torch_gc.py\n  torch {torch.__version__} (CUDA {torch.version.cuda}), "
          f"{torch.cuda.get_device_name(0)}")
    x = torch.ones(256, device="cuda")
    s = torch.cuda.Stream()

    def cycle():
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            for _ in range(10):
                x.add_(1.0)
        g.replay()
        return g

    def used():
        torch.cuda.synchronize()
        free, _ = torch.cuda.mem_get_info()
        return -free / 2**20

    for _ in range(20):
        cycle()
    d0, h0, t0 = used(), rss_mib(), time.perf_counter()
    n1 = 1000
    for _ in range(n1):
        g = cycle()
        del g
    per = (time.perf_counter() - t0) / n1 * 1e6
    d1, h1 = used(), rss_mib()
    print(f"  1. {n1} cycles dropping each graph: device {d1 - d0:+.1f} MiB, host RSS {h1 - h0:+.1f} MiB ({per:.0f} us per cycle)")
    n2 = 500
    kept = [cycle() for _ in range(n2)]
    d2, h2 = used(), rss_mib()
    del kept
    d3, h3 = used(), rss_mib()
    dev_per, host_per = (d2 - d1) * 1024 / n2, (h2 - h1) * 1024 / n2
    print(f"  2. {n2} cycles keeping every graph: device {d2 - d1:+.1f} MiB ({dev_per:.1f} KiB each), host RSS "
          f"{h2 - h1:+.1f} MiB ({host_per:.1f} KiB each); after dropping the list: device {d3 - d1:+.1f} MiB, "
          f"host {h3 - h1:+.1f} MiB against before")
    flat = abs(d1 - d0) < 4 and h1 - h0 < 32
    released = d3 - d1 < 4
    verdict = "false" if flat and released else "true" if not flat else "partly"
    print(f"CLAIM i-torch: {n1} re-captures dropping each torch.cuda.CUDAGraph: device {d1 - d0:+.1f} MiB, host "
          f"{h1 - h0:+.1f} MiB ({'flat' if flat else 'GROWS'}); {n2} kept graphs held {dev_per:.1f} KiB device + "
          f"{host_per:.1f} KiB host each and dropping the references gave it back (device {d3 - d1:+.1f} MiB): "
          f"the reference count reaching zero destroys the graph -> {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
