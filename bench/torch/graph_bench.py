#!/usr/bin/env python3
"""PyTorch side of the graphsmith benchmark (bench/SCHEMA.md).

Eager: `x.add_(a)` on a 256-element float32 tensor, `a` a Python float. PyTorch launches its
own elementwise kernel for that (not graphsmith's gs_add_scalar_f32), so device times include
its kernel's cost. Graphs: `torch.cuda.CUDAGraph`, captured from the same issuing function.

What is measured for the graph phases (PyTorch folds some of them together):
- capture_us: `g.capture_begin()` .. `g.capture_end()` on a `CUDAGraph(keep_graph=True)`, so
  capture_end does not instantiate (cudaStreamEndCapture and PyTorch's bookkeeping only).
- instantiate_us: the first `g.instantiate()` of that graph (PyTorch instantiates with
  cudaGraphInstantiateFlagAutoFreeOnLaunch).
- graph_block_us (extra field): the whole `with torch.cuda.graph(g):` block with the default
  keep_graph=False, i.e. what most users pay: it synchronizes the device, may collect garbage
  and empty the cache, captures, instantiates and destroys the template.
- upload_us: null (no upload API); first_replay_us: the first `g.replay()` of a fresh
  executable, waited for, which uploads implicitly.
- reinstantiate_us: `g.instantiate()` called again on a keep_graph=True graph (destroys the old
  executable and instantiates anew): PyTorch's only way to refresh an executable.
- per_node_update_us, whole_graph_update_us: null (no API for either).

If this PyTorch has no keep_graph, capture_us is the capture_begin..capture_end time including
instantiation, and instantiate_us/reinstantiate_us are null (the line says "keep_graph": false).

Usage: python3 bench/torch/graph_bench.py --nodes 10,100,1000,10000 [--reps auto] [--workloads chain,forkjoin]
"""

import argparse
import json
import math
import statistics
import sys
import time

LEN = 256
BRANCHES = 4


def log(msg):
    print(f"[pytorch] {msg}", file=sys.stderr, flush=True)


def median(values):
    return statistics.median(values) if values else None


def now_us():
    return time.perf_counter_ns() / 1e3


class Work:
    def __init__(self, torch, workload, nodes):
        self.torch = torch
        self.forkjoin = workload == "forkjoin"
        self.nodes = nodes
        self.main = torch.cuda.Stream()
        self.sides = [torch.cuda.Stream() for _ in range(BRANCHES - 1)] if self.forkjoin else []
        count = BRANCHES if self.forkjoin else 1
        self.bufs = [torch.ones(LEN, dtype=torch.float32, device="cuda") for _ in range(count)]
        torch.cuda.synchronize()

    @property
    def per_branch(self):
        return self.nodes // BRANCHES

    @property
    def kernels(self):
        return BRANCHES * self.per_branch + 2 if self.forkjoin else self.nodes

    def issue(self, a):
        """One run on self.main (the current stream), eagerly or inside an open capture."""
        torch = self.torch
        if not self.forkjoin:
            x = self.bufs[0]
            for _ in range(self.nodes):
                x.add_(a)
            return
        main = self.main
        self.bufs[0].add_(a)  # root
        for s in self.sides:  # fork: each side waits on an event recorded on main
            s.wait_stream(main)
        for k, x in enumerate(self.bufs):
            s = main if k == 0 else self.sides[k - 1]
            with torch.cuda.stream(s):
                for _ in range(self.per_branch):
                    x.add_(a)
        for s in self.sides:  # join
            main.wait_stream(s)
        self.bufs[0].add_(a)  # join kernel

    def expected(self, a):
        """Each buffer's value after one run from 1.0, in float32 and in the GPU's order."""
        import numpy as np

        def add(v, times):
            v = np.float32(v)
            for _ in range(times):
                v = np.float32(v + np.float32(a))
            return v

        if not self.forkjoin:
            return [add(1.0, self.nodes)]
        out = [add(add(add(1.0, 1), self.per_branch), 1)]
        out += [add(1.0, self.per_branch) for _ in range(BRANCHES - 1)]
        return out

    def reset(self):
        for x in self.bufs:
            x.fill_(float("nan"))  # poison
            x.fill_(1.0)
        self.torch.cuda.synchronize()

    def check(self, a):
        import numpy as np

        ok = True
        for k, (x, want) in enumerate(zip(self.bufs, self.expected(a))):
            host = x.cpu().numpy()
            bad = np.nonzero(host.view(np.uint32) != np.full(LEN, want, dtype=np.float32).view(np.uint32))[0]
            if bad.size:
                log(f"  mismatch: buffer {k} element {bad[0]}: got {host[bad[0]]}, want {want}")
                ok = False
        return ok


def time_region(torch, stream, warmup, reps, work):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    for _ in range(warmup):
        work()
    stream.synchronize()
    submit, device = [], []
    for _ in range(reps):
        start.record(stream)
        t0 = now_us()
        work()
        submit.append(now_us() - t0)
        end.record(stream)
        end.synchronize()
        device.append(start.elapsed_time(end) * 1e3)
    return median(submit), median(device)


def new_graph(torch, keep):
    if keep:
        try:
            return torch.cuda.CUDAGraph(keep_graph=True)
        except TypeError:
            return None
    return torch.cuda.CUDAGraph()


def bench(torch, workload, nodes, reps):
    w = Work(torch, workload, nodes)
    row = {"impl": "pytorch", "workload": workload, "nodes": nodes, "kernels": w.kernels, "reps": reps}
    few = min(reps, 5)
    with torch.cuda.stream(w.main):
        log(f"{workload} N={nodes}: eager")
        row["eager_submit_us"], row["eager_device_us"] = time_region(torch, w.main, 3, reps, lambda: w.issue(0.5))

        log(f"{workload} N={nodes}: capture, instantiate, first replay")
        keep = new_graph(torch, True) is not None
        row["keep_graph"] = keep
        cap, inst, first = [], [], []
        g = None
        for r in range(few + 1):
            g = new_graph(torch, keep)
            torch.cuda.synchronize()
            t0 = now_us()
            g.capture_begin()
            w.issue(0.5)
            g.capture_end()
            t1 = now_us()
            if keep:
                g.instantiate()
            t2 = now_us()
            g.replay()
            w.main.synchronize()
            t3 = now_us()
            if r > 0:
                cap.append(t1 - t0)
                inst.append(t2 - t1)
                first.append(t3 - t2)
            if r < few:
                del g
        row["capture_us"] = median(cap)
        row["instantiate_us"] = median(inst) if keep else None
        row["upload_us"] = None
        row["first_replay_us"] = median(first)

        log(f"{workload} N={nodes}: replay")
        row["replay_submit_us"], row["replay_device_us"] = time_region(torch, w.main, 3, reps, g.replay)

        log(f"{workload} N={nodes}: re-instantiation")
        row["per_node_update_us"] = None
        row["whole_graph_update_us"] = None
        if keep:
            reinst = []
            for r in range(min(reps, 10) + 2):
                t0 = now_us()
                g.instantiate()
                if r >= 2:
                    reinst.append(now_us() - t0)
            row["reinstantiate_us"] = median(reinst)
        else:
            row["reinstantiate_us"] = None

    # The `with torch.cuda.graph(g):` block as users write it (keep_graph=False).
    log(f"{workload} N={nodes}: torch.cuda.graph block")
    blocks = []
    for r in range(few + 1):
        g2 = torch.cuda.CUDAGraph()
        t0 = now_us()
        with torch.cuda.graph(g2, stream=w.main):
            w.issue(0.5)
        if r > 0:
            blocks.append(now_us() - t0)
        del g2
    row["graph_block_us"] = median(blocks)

    log(f"{workload} N={nodes}: correctness")
    with torch.cuda.stream(w.main):
        w.reset()
        w.issue(0.5)
        torch.cuda.synchronize()
        ok = w.check(0.5)
        w.reset()
        g.replay()
        torch.cuda.synchronize()
        ok = w.check(0.5) and ok
    row["correct"] = ok
    for k, v in row.items():
        if isinstance(v, float):
            row[k] = None if math.isnan(v) else round(v, 3)
    print(json.dumps(row), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", default="10,100,1000,10000")
    p.add_argument("--reps", default="auto")
    p.add_argument("--workloads", default="chain,forkjoin")
    args = p.parse_args()
    try:
        import torch
    except ImportError as e:
        log(f"PyTorch is not importable here: {e}")
        return 3
    if not torch.cuda.is_available():
        log("PyTorch sees no CUDA device")
        return 3
    log(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}")
    torch.cuda.init()
    for workload in args.workloads.split(","):
        if workload not in ("chain", "forkjoin"):
            log(f"unknown workload {workload!r}")
            return 2
        for n in (int(s) for s in args.nodes.split(",") if s):
            reps = (20 if n <= 1000 else 5) if args.reps == "auto" else int(args.reps)
            bench(torch, workload, n, reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
