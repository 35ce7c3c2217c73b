"""The report's section on rows of `gpu-bin/examples/interleaved` (impl "interleaved"): graphsmith
and plain CUDA C++ timed turn by turn in one process, so both see the same state of the host.
Each row holds, per figure, both sides' medians and the median of the per-rep ratio
(graphsmith / C++) and difference. Rows of several rounds (processes) are merged by taking the
median of every number. Used by report.py; standard library only."""

import statistics

FIGURES = [
    # (key, name, limit kind, limit, smallest N the target applies to): "ratio" targets compare
    # the median per-pair ratio, "diff" the median per-pair difference (µs); None: shown, no target.
    ("replay_device_per_node_us", "replay device time per node", "ratio", 1.02, 0),
    ("replay_submit_us", "replay submit", "diff", 1.0, 0),
    ("eager_submit_us", "eager submit (whole chain)", "ratio", 1.1, 0),
    ("eager_device_per_node_us", "eager device time per node", None, None, 0),
    ("per_node_update_us", "update every kernel node", "ratio", 1.1, 0),
    ("whole_graph_update_us", "whole-graph update", "ratio", 1.1, 0),
    ("instantiate_us", "instantiate", "ratio", 1.05, 0),
    # Capture, begin to end, with graphsmith's journal on and off (C++ has none): targets from
    # 100 nodes up (at 10 a capture is a few µs of fixed cost on either side).
    ("capture_us", "capture, chain (journal on)", "ratio", 1.5, 100),
    ("capture_journal_off_us", "capture, chain (journal off)", "ratio", 1.1, 100),
    ("capture_forkjoin_us", "capture, fork/join (journal on)", "ratio", 1.5, 100),
    ("capture_forkjoin_journal_off_us", "capture, fork/join (journal off)", "ratio", 1.1, 100),
]


SAME_BUFFER = ("buffer", "both")


def merge(rows):
    """{nodes: merged row} from interleaved rows of any number of rounds. Rows of one sharing
    mode are merged: the same buffer (the default) when there are such rows for that N."""
    by_n = {}
    for r in rows:
        by_n.setdefault(r["nodes"], []).append(r)
    out = {}
    for n, runs in by_n.items():
        same = [r for r in runs if r.get("shared", "none") in SAME_BUFFER]
        mode = same[0].get("shared") if same else runs[0].get("shared", "none")
        runs = [r for r in runs if r.get("shared", "none") == mode]
        m = {"nodes": n, "rounds": len(runs), "reps": statistics.median(r.get("reps", 0) for r in runs), "shared": mode,
             "correct": all(r.get("correct_cpp") is True and r.get("correct_graphsmith") is True for r in runs)}
        for key, *_ in FIGURES:
            vals = [r[key] for r in runs if isinstance(r.get(key), dict)
                    and all(isinstance(r[key].get(f), (int, float)) for f in ("cpp", "graphsmith", "ratio", "diff"))]
            if vals:
                m[key] = {f: statistics.median(v[f] for v in vals) for f in ("cpp", "graphsmith", "ratio", "diff")}
        out[n] = m
    return out


def _fmt(v):
    a = abs(v)
    return f"{v:,.0f}" if a >= 1000 else f"{v:.1f}" if a >= 100 else f"{v:.2f}" if a >= 10 else f"{v:.3f}"


def verdict(kind, limit, fig, correct=True):
    """True/False against the target; None without a target, or when the results were wrong
    (timings of wrong results settle nothing)."""
    if not correct:
        return None
    if kind == "ratio":
        return fig["ratio"] <= limit
    if kind == "diff":
        return fig["diff"] <= limit
    return None


HEADLINE = FIGURES[:3]


def headline(merged, mark):
    """The headline targets from the turn-by-turn rows (chain of 1,000, else the largest N):
    markdown lines, empty when there are none."""
    if not merged:
        return []
    same = {n: m for n, m in merged.items() if m["shared"] in SAME_BUFFER}
    if not same:
        return []
    n = 1000 if 1000 in same else max(same)
    m = same[n]
    lines = [f"chain of {n:,} kernels, graphsmith vs plain CUDA C++, timed turn by turn in one process on the same "
             f"buffer ({m['rounds']} round(s) of {m['reps']:g} pairs; medians of the per-pair ratios and differences; "
             "the section \"Turn by turn in one process\" below has every figure):", ""]
    if not m["correct"]:
        lines += ["**No verdict: the results of that run did not match the host reference.**", ""]
        return lines
    lines += [
             "| target | graphsmith vs C++ | per-pair | verdict |", "|---|---:|---:|---:|"]
    for key, name, kind, limit, _ in HEADLINE:
        fig = m.get(key)
        if not fig:
            continue
        ok = verdict(kind, limit, fig, m["correct"])
        target = f"{name} ≤ {limit:.2f}x C++" if kind == "ratio" else f"{name} ≤ C++ + {limit:g} µs"
        per_pair = f"{fig['ratio']:.2f}x" if kind == "ratio" else f"{'+' if fig['diff'] >= 0 else ''}{_fmt(fig['diff'])} µs"
        lines.append(f"| {target} | {_fmt(fig['graphsmith'])} vs {_fmt(fig['cpp'])} µs | {per_pair} | {mark(ok)} |")
    lines.append("")
    return lines


def section(merged, mark):
    """Markdown lines; `mark(ok)` renders a verdict."""
    if not merged:
        return []
    md = ["## Turn by turn in one process", "",
          "The same chain in plain CUDA C++ (bench/cpp/chain_ref.cu, built as a shared library) and in graphsmith, "
          "timed alternately rep by rep in one process (`gpu-bin/examples/interleaved`), so that both sides see the "
          "same state of the host. Ratio and difference are medians of the per-rep values; figures in µs. "
          "The capture rows time begin to end capture of the chain and of a fork/join of four streams "
          "(floor(N/4) kernels each), graphsmith with its journal on and off; their targets apply from 100 nodes. "
          "By default both chains run on the same 1 KB device buffer: kernels this small are sensitive to where "
          "their data lies (on the H200 the C++ chain took 0.973 µs per node on its own buffer and 1.005 µs on "
          "graphsmith's, as fast as graphsmith's chain on it), so sharing it compares the two ways of submitting "
          "the same work rather than two addresses. The per-process tables above use a buffer each.", ""]
    met = missed = 0
    for n in sorted(merged):
        m = merged[n]
        shared = {"none": "", "buffer": "; the C++ side runs on graphsmith's buffer",
                  "stream": "; the C++ side runs on graphsmith's stream",
                  "both": "; the C++ side runs on graphsmith's buffer and stream"}.get(m["shared"], "")
        md.append(f"chain of {n:,} kernels ({m['reps']:g} pairs per round, {m['rounds']} round(s){shared}; "
                  f"results correct on both sides: {'yes' if m['correct'] else '**NO**'}):")
        md.append("")
        md.append("| figure | graphsmith | CUDA C++ | per-pair ratio | per-pair difference | target | verdict |")
        md.append("|---|---:|---:|---:|---:|---:|---:|")
        for key, name, kind, limit, min_n in FIGURES:
            fig = m.get(key)
            if not fig:
                continue
            if n < min_n:
                kind = None
            ok = verdict(kind, limit, fig, m["correct"])
            met += ok is True
            missed += ok is False
            target = "" if kind is None else (f"≤ {limit:.2f}x" if kind == "ratio" else f"≤ +{limit:g} µs")
            md.append(f"| {name} | {_fmt(fig['graphsmith'])} | {_fmt(fig['cpp'])} | {fig['ratio']:.2f}x | "
                      f"{'+' if fig['diff'] >= 0 else ''}{_fmt(fig['diff'])} | {target} | {mark(ok) if ok is not None else ''} |")
        md.append("")
    md.append(f"Turn by turn: {met} met, {missed} missed.")
    md.append("")
    return md


def self_test(expect, mark):
    fig = lambda c, g: {"cpp": c, "graphsmith": g, "ratio": g / c, "diff": g - c}
    row = lambda v, ok=True, shared="buffer": {
        "impl": "interleaved", "nodes": 1000, "reps": 20, "shared": shared, "correct_cpp": True,
        "correct_graphsmith": ok, "replay_device_per_node_us": fig(1.0, v), "replay_submit_us": fig(3.0, 3.0 + v)}
    # Three rounds on the same buffer, and one on own buffers that must not be pooled with them.
    merged = merge([row(1.01), row(1.5), row(1.0), row(9.0, shared="none")])
    expect(merged[1000]["rounds"] == 3 and merged[1000]["correct"] is True, "interleaved rounds merged")
    expect(merged[1000]["shared"] == "buffer", "interleaved: same-buffer rows chosen")
    expect(abs(merged[1000]["replay_device_per_node_us"]["ratio"] - 1.01) < 1e-9, "interleaved median ratio")
    md = "\n".join(section(merged, mark))
    expect("| replay device time per node | 1.010 | 1.000 | 1.01x | +0.010 | ≤ 1.02x | **met** |" in md,
           f"interleaved section: {md}")
    expect("| replay submit | 4.010 | 3.000 | 1.34x | +1.010 | ≤ +1 µs | **MISSED** |" in md, "interleaved diff target")
    expect("Turn by turn: 1 met, 1 missed." in md, "interleaved summary")
    head = "\n".join(headline(merged, mark))
    expect("| replay device time per node ≤ 1.02x C++ | 1.010 vs 1.000 µs | 1.01x | **met** |" in head, f"headline: {head}")
    expect("| replay submit ≤ C++ + 1 µs | 4.010 vs 3.000 µs | +1.010 µs | **MISSED** |" in head, "headline diff")
    # Wrong results: no verdicts; own buffers only: no headline.
    wrong = merge([row(1.0, ok=False)])
    expect("No verdict" in "\n".join(headline(wrong, mark)), "no headline verdict on wrong results")
    expect("**met**" not in "\n".join(section(wrong, mark)), "no section verdict on wrong results")
    expect(headline(merge([row(1.0, shared="none")]), mark) == [], "no headline from own buffers")
    # Capture rows: a target from 100 nodes up only.
    cap = lambda n, g: dict(row(1.0), nodes=n, capture_us=fig(100.0, g), capture_journal_off_us=fig(100.0, g))
    md = "\n".join(section(merge([cap(10, 200.0), cap(100, 120.0)]), mark))
    expect("| capture, chain (journal on) | 200.0 | 100.0 | 2.00x | +100.0 |  |  |" in md, f"capture at 10: {md}")
    expect("| capture, chain (journal on) | 120.0 | 100.0 | 1.20x | +20.00 | ≤ 1.50x | **met** |" in md, "capture on")
    expect("| capture, chain (journal off) | 120.0 | 100.0 | 1.20x | +20.00 | ≤ 1.10x | **MISSED** |" in md, "capture off")
