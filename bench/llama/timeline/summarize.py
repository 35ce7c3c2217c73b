#!/usr/bin/env python3
"""Where a replayed step's time goes, from kernel_timeline.c's records.

    python3 summarize.py kernel_timeline.tsv [--graph last|ID] [--first N] [--json]
    python3 summarize.py --self-test

Records of one graph launch share its correlation id. The graph launched most often (the decode
step; with --graph, the last graph launched or the one of that id, e.g. the step of the last
`--tune` pass) is taken, its first tenth of launches dropped as warm-up, and each launch's
kernels sorted by start. For each kernel, in the order the step runs them:
  - run: end - start (with programmatic launch this includes the time it spends before its
    wait, overlapping the kernel before);
  - adds: end - the previous kernel's end, the time it adds to the step;
  - early: how long it started before the previous kernel ended (0 without overlap).
Kernels are then grouped by name (medians over launches, summed over a step's kernels of that
name), with the step's span (last end - first start). --first N also lists the step's first N
kernels one by one (medians), e.g. the embedding and the first two layers.
"""
import json
import statistics
import sys
from collections import defaultdict


def parse(lines):
    recs = []
    for line in lines:
        f = line.rstrip("\n").split("\t")
        if len(f) not in (6, 10):
            continue
        name, start, end, graph, node, corr = f[:6]
        # The launch's shape, when recorded: grid, block, dynamic shared memory, cluster.
        shape = "grid {} block {} smem {} cluster {}".format(*f[6:]) if len(f) == 10 else ""
        recs.append((name, int(start), int(end), int(graph), int(node), int(corr), shape))
    return recs


def steps_of(recs, graph=None):
    """The kernels of each launch of the chosen graph, sorted by start, warm-up dropped."""
    launches = defaultdict(list)
    for r in recs:
        if r[3] != 0:
            launches[(r[3], r[5])].append(r)
    if not launches:
        raise SystemExit("no kernel of a graph launch in the records")
    by_graph = defaultdict(list)
    for (g, corr), ks in launches.items():
        by_graph[g].append((corr, sorted(ks, key=lambda r: (r[1], r[2]))))
    if graph is None:
        graph = max(by_graph, key=lambda g: len(by_graph[g]))
    elif graph == "last":
        graph = max(by_graph, key=lambda g: max(k[0][1] for _, k in by_graph[g]))
    elif int(graph) in by_graph:
        graph = int(graph)
    else:
        raise SystemExit(f"no graph {graph} in the records (graphs: {sorted(by_graph)})")
    steps = sorted(by_graph[graph])
    steps = steps[len(steps) // 10:]
    n = statistics.mode(len(ks) for _, ks in steps)
    return graph, [ks for _, ks in steps if len(ks) == n]


def per_position(steps):
    """Per kernel of the step, in order: its name and median run, adds and early (ns)."""
    n = len(steps[0])
    per_pos = [defaultdict(list) for _ in range(n)]
    for ks in steps:
        prev_end = ks[0][1]
        for i, k in enumerate(ks):
            per_pos[i]["run"].append(k[2] - k[1])
            per_pos[i]["adds"].append(k[2] - prev_end if i else k[2] - k[1])
            per_pos[i]["early"].append(max(0, prev_end - k[1]) if i else 0)
            prev_end = max(prev_end, k[2])
    return [
        {"name": steps[0][i][0], **{k: statistics.median(v) for k, v in per_pos[i].items()}}
        for i in range(n)
    ]


def summarize(recs, graph=None, first=0):
    graph, steps = steps_of(recs, graph)
    positions = per_position(steps)
    shapes = defaultdict(lambda: defaultdict(int))
    for ks in steps:
        for k in ks:
            if k[6]:
                shapes[k[0]][k[6]] += 1
    kinds = defaultdict(lambda: {"count": 0, "run_ns": 0.0, "adds_ns": 0.0, "early_ns": 0.0})
    for p in positions:
        d = kinds[p["name"]]
        d["count"] += 1
        for key in ("run", "adds", "early"):
            d[key + "_ns"] += p[key]
    return {
        "graph_id": graph,
        "launches": len(steps),
        "kernels_per_step": len(positions),
        "step_span_ns": statistics.median(ks[-1][2] - ks[0][1] for ks in steps),
        "kinds": dict(sorted(kinds.items(), key=lambda kv: -kv[1]["adds_ns"])),
        "first": positions[:first],
        "shapes": {name: dict(c) for name, c in sorted(shapes.items())},
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
    if s["first"]:
        out.append(f"\nthe step's first {len(s['first'])} kernels (medians):")
        out.append(f"{'#':>3} {'kernel':<36} {'adds us':>9} {'run us':>9} {'early us':>9}")
        for i, p in enumerate(s["first"]):
            out.append(
                f"{i:>3} {p['name'][:36]:<36} {p['adds'] / 1000:>9.2f} {p['run'] / 1000:>9.2f} "
                f"{p['early'] / 1000:>9.2f}"
            )
    if s["shapes"]:
        out.append("\nlaunch shapes (launches of each):")
        for name, c in s["shapes"].items():
            for shape, n in c.items():
                out.append(f"  {name[:36]:<36} {shape} x{n}")
    return "\n".join(out)


def self_test():
    # Two kernels per step, b starting 1 us before a ends; 20 launches of graph 7, one of graph 3
    # (launched last).
    lines = []
    for c in range(20):
        t = 100_000 * c
        lines.append(f"a\t{t}\t{t + 3000}\t7\t1\t{c}\n")
        lines.append(f"b\t{t + 2000}\t{t + 6000}\t7\t2\t{c}\n")
    lines.append("x\t5000000\t5000009\t3\t1\t999\t1,1,8\t512,1,1\t0\t1,1,8\n")
    lines.append("not a record\n")
    recs = parse(lines)
    s = summarize(recs, first=2)
    assert s["graph_id"] == 7 and s["kernels_per_step"] == 2 and s["launches"] == 18, s
    assert s["step_span_ns"] == 6000, s
    a, b = s["kinds"]["a"], s["kinds"]["b"]
    assert (a["adds_ns"], a["run_ns"], a["early_ns"]) == (3000, 3000, 0), a
    assert (b["adds_ns"], b["run_ns"], b["early_ns"]) == (3000, 4000, 1000), b
    assert [p["name"] for p in s["first"]] == ["a", "b"] and s["first"][1]["early"] == 1000
    last = summarize(recs, graph="last")
    assert last["graph_id"] == 3, last
    assert last["shapes"] == {"x": {"grid 1,1,8 block 512,1,1 smem 0 cluster 1,1,8": 1}}, last
    assert s["shapes"] == {}, s
    assert "cluster 1,1,8" in render(last)
    assert summarize(recs, graph="7")["graph_id"] == 7
    render(s)
    print("summarize self-test: ok")


def main(argv):
    if argv == ["--self-test"]:
        self_test()
        return
    if not argv:
        raise SystemExit(__doc__)
    graph, first = None, 0
    if "--graph" in argv:
        graph = argv[argv.index("--graph") + 1]
    if "--first" in argv:
        first = int(argv[argv.index("--first") + 1])
    with open(argv[0]) as f:
        s = summarize(parse(f), graph, first)
    print(json.dumps(s) if "--json" in argv else render(s))


if __name__ == "__main__":
    main(sys.argv[1:])
