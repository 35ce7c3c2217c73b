#!/usr/bin/env python3
"""Where a replayed step's time goes, from kernel_timeline.c's records.

    python3 summarize.py kernel_timeline.tsv [--json]
    python3 summarize.py --self-test

Records of one graph launch share its correlation id. The graph launched most often (the decode
step) is taken, its first tenth of launches dropped as warm-up, and each launch's kernels sorted
by start. For each kernel, in the order the step runs them:
  - run: end - start (with programmatic launch this includes the time it spends before its
    wait, overlapping the kernel before);
  - adds: end - the previous kernel's end, the time it adds to the step;
  - early: how long it started before the previous kernel ended (0 without overlap).
Kernels are then grouped by name (medians over launches, summed over a step's kernels of that
name), with the step's span (last end - first start).
"""
import json
import statistics
import sys
from collections import defaultdict


def parse(lines):
    recs = []
    for line in lines:
        f = line.rstrip("\n").split("\t")
        if len(f) != 6:
            continue
        name, start, end, graph, node, corr = f
        recs.append((name, int(start), int(end), int(graph), int(node), int(corr)))
    return recs


def summarize(recs):
    launches = defaultdict(list)
    for r in recs:
        if r[3] != 0:
            launches[(r[3], r[5])].append(r)
    if not launches:
        raise SystemExit("no kernel of a graph launch in the records")
    by_graph = defaultdict(list)
    for (graph, corr), ks in launches.items():
        by_graph[graph].append((corr, sorted(ks, key=lambda r: (r[1], r[2]))))
    graph, steps = max(by_graph.items(), key=lambda kv: len(kv[1]))
    steps.sort()
    steps = steps[len(steps) // 10:]
    n = statistics.mode(len(ks) for _, ks in steps)
    steps = [ks for _, ks in steps if len(ks) == n]
    spans, per_pos = [], [defaultdict(list) for _ in range(n)]
    for ks in steps:
        spans.append(ks[-1][2] - ks[0][1])
        prev_end = ks[0][1]
        for i, k in enumerate(ks):
            per_pos[i]["run"].append(k[2] - k[1])
            per_pos[i]["adds"].append(k[2] - prev_end if i else k[2] - k[1])
            per_pos[i]["early"].append(max(0, prev_end - k[1]) if i else 0)
            prev_end = max(prev_end, k[2])
    names = [k[0] for k in steps[0]]
    kinds = defaultdict(lambda: {"count": 0, "run_ns": 0.0, "adds_ns": 0.0, "early_ns": 0.0})
    for i, name in enumerate(names):
        d = kinds[name]
        d["count"] += 1
        for key in ("run", "adds", "early"):
            d[key + "_ns"] += statistics.median(per_pos[i][key])
    return {
        "graph_id": graph,
        "launches": len(steps),
        "kernels_per_step": n,
        "step_span_ns": statistics.median(spans),
        "kinds": dict(sorted(kinds.items(), key=lambda kv: -kv[1]["adds_ns"])),
    }


def render(s):
    out = [
        f"graph {s['graph_id']}: {s['launches']} launches of {s['kernels_per_step']} kernels, "
        f"median span {s['step_span_ns'] / 1000:.1f} us",
        f"{'kernel':<40} {'per step':>8} {'adds us':>9} {'run us':>9} {'early us':>9}",
    ]
    for name, d in s["kinds"].items():
        out.append(
            f"{name[:40]:<40} {d['count']:>8} {d['adds_ns'] / 1000:>9.1f} "
            f"{d['run_ns'] / 1000:>9.1f} {d['early_ns'] / 1000:>9.1f}"
        )
    return "\n".join(out)


def self_test():
    # Two kernels per step, b starting 1 us before a ends; 20 launches of graph 7, one of graph 3.
    lines = []
    for c in range(20):
        t = 100_000 * c
        lines.append(f"a\t{t}\t{t + 3000}\t7\t1\t{c}\n")
        lines.append(f"b\t{t + 2000}\t{t + 6000}\t7\t2\t{c}\n")
    lines.append("x\t5\t9\t3\t1\t999\n")
    lines.append("not a record\n")
    s = summarize(parse(lines))
    assert s["graph_id"] == 7 and s["kernels_per_step"] == 2 and s["launches"] == 18, s
    assert s["step_span_ns"] == 6000, s
    a, b = s["kinds"]["a"], s["kinds"]["b"]
    assert (a["adds_ns"], a["run_ns"], a["early_ns"]) == (3000, 3000, 0), a
    assert (b["adds_ns"], b["run_ns"], b["early_ns"]) == (3000, 4000, 1000), b
    render(s)
    print("summarize self-test: ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    elif len(sys.argv) >= 2:
        s = summarize(parse(open(sys.argv[1])))
        print(json.dumps(s) if "--json" in sys.argv else render(s))
    else:
        raise SystemExit(__doc__)
