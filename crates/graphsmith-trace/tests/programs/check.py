"""Checks one `graphsmith trace --json` report against tests/programs/expect.json.

Usage: check.py EXPECT.json CASE REPORT.json EXIT_CODE [STDOUT]
STDOUT: the command's standard output (for "buffer_from_stdout").
Prints PASS or FAIL with every mismatch and the values actually found; exits 0 or 1.
"""
import fnmatch
import json
import sys


def matches(actual, allowed):
    """allowed: None (anything), or a list of names/patterns (fnmatch)."""
    if allowed is None:
        return True
    return actual is not None and any(fnmatch.fnmatchcase(actual, a) for a in allowed)


def first_capture(report, pred):
    for p in report["processes"]:
        for c in p["captures"]:
            if pred(c):
                return p, c
    return None, None


def check_call(errs, what, call, exp, process):
    if call is None:
        errs.append(f"{what}: none found")
        return
    for key in ("runtime", "driver"):
        if key in exp and not matches(call.get(key), exp[key]):
            errs.append(f"{what}.{key}: {call.get(key)!r}, expected one of {exp[key]}")
    if "code" in exp and call["code"] != exp["code"]:
        errs.append(f"{what}.code: {call['code']}, expected {exp['code']}")
    if exp.get("thread") and call["thread"]["name"] != exp["thread"]:
        errs.append(f"{what}.thread: {call['thread']}, expected name {exp['thread']}")
    if exp.get("main_thread") and process and call["thread"]["tid"] != process["pid"]:
        errs.append(f"{what}.thread: {call['thread']}, expected the main thread {process['pid']}")
    if "ranges" in exp and call["ranges"] != exp["ranges"]:
        errs.append(f"{what}.ranges: {call['ranges']}, expected {exp['ranges']}")
    if "capturing_ranges" in exp:
        got = [c["ranges"] for c in call.get("capturing", [])]
        if exp["capturing_ranges"] not in got:
            errs.append(f"{what}.capturing ranges: {got}, expected {exp['capturing_ranges']}")
    for s in exp.get("backtrace_contains", []):
        frames = [f.get("symbol", "") for f in call.get("backtrace", [])]
        if not any(s in f for f in frames):
            errs.append(f"{what}.backtrace has no frame with {s!r}: {frames[:16]}")
    if "python_user" in exp:
        # [file name, function]: the innermost frame of the user's code in the Python stack.
        stack = call.get("python", [])
        user = next((f for f in stack if f.get("origin") == "user"), None)
        file, function = exp["python_user"]
        if user is None or not user["file"].endswith(file) or user["function"] != function:
            errs.append(
                f"{what}.python: innermost user frame {user}, expected {file} in {function}"
                f" (python_missing: {call.get('python_missing')}, stack: {stack[:8]})"
            )


def describe(h):
    return (f"{h['kind']} on {h['buffer']:#x}: n{h['first']['node']} {h['first']['label']!r} / "
            f"n{h['second']['node']} {h['second']['label']!r}")


def check_hazards(errs, exp, report, graphs, stdout_path):
    """--hazards: each graph's check (graph["hazards"]), as src/hazard/mod.rs writes it."""
    checks = [g["hazards"] for g in graphs if g.get("hazards") is not None]
    checked = [c for c in checks if c["state"] == "checked"]
    found = [h for c in checked for h in c["hazards"]]
    if exp.get("hazards_unchecked") and (report.get("hazards_requested") or checks):
        errs.append(f"hazards were checked without --hazards: {checks}")
    if "hazards_checked_min" in exp and len(checked) < exp["hazards_checked_min"]:
        reasons = [c.get("reason") for c in checks if c["state"] != "checked"]
        errs.append(f"{len(checked)} graphs checked for hazards, expected at least "
                    f"{exp['hazards_checked_min']} (not checked: {reasons})")
    if "hazards" in exp:
        total = sum(c["total"] for c in checked)
        if total != exp["hazards"]:
            errs.append(f"{total} hazards, expected {exp['hazards']}: "
                        + "; ".join(describe(h) for h in found[:5]))
    if "hazard_accesses_min" in exp:
        got = max((c["accesses"] for c in checked), default=0)
        if got < exp["hazard_accesses_min"]:
            errs.append(f"{got} memory accesses checked, expected at least "
                        f"{exp['hazard_accesses_min']}: {checked}")
    if "bounds" in exp:
        kinds = [(c.get("bounds") or {}).get("kind") for c in checked]
        if not kinds or any(k != exp["bounds"] for k in kinds):
            errs.append(f"bounds {kinds}, expected {exp['bounds']} for every checked graph: "
                        f"{[c.get('bounds') for c in checked]}")
    check_agrees(errs, exp, checked, stdout_path)
    want = exp.get("hazard")
    if want is None:
        return
    if not found:
        errs.append("no hazard found")
        return
    h = found[0]
    labels = sorted([h["first"]["label"], h["second"]["label"]])
    if "labels" in want and labels != sorted(want["labels"]):
        errs.append(f"hazard between {labels}, expected {sorted(want['labels'])}: {describe(h)}")
    if "kind" in want and h["kind"] != want["kind"]:
        errs.append(f"hazard kind {h['kind']}, expected {want['kind']}")
    if "region_prefix" in want and not (h.get("region") or "").startswith(want["region_prefix"]):
        errs.append(f"hazard on region {h.get('region')!r}, expected one starting with "
                    f"{want['region_prefix']!r}")
    prefix = want.get("buffer_from_stdout")
    if prefix:
        try:
            lines = open(stdout_path).read().splitlines() if stdout_path else []
        except OSError as e:
            lines = []
            errs.append(f"cannot read the command's output: {e}")
        printed = [l[len(prefix):].strip() for l in lines if l.startswith(prefix)]
        if not printed:
            errs.append(f"the command printed no line starting with {prefix!r}")
        else:
            # The buffer is the base of the allocation holding the program's pointer (the same
            # address for a plain cudaMalloc).
            address, size = int(printed[0], 16), h.get("buffer_bytes") or 1
            if not h["buffer"] <= address < h["buffer"] + size:
                errs.append(f"hazard on the allocation {h['buffer']:#x} ({size} bytes), which does "
                            f"not hold the program's buffer {printed[0]}")
            check_range(errs, want, h, lines, address)


def stdout_lines(errs, stdout_path):
    try:
        return open(stdout_path).read().splitlines() if stdout_path else []
    except OSError as e:
        errs.append(f"cannot read the command's output: {e}")
        return []


def check_agrees(errs, exp, checked, stdout_path):
    """The tracer's hazard count equals graphsmith.check's on the same graph, which the program
    printed as "<prefix>N hazards" when the graphsmith package was importable there."""
    prefix = exp.get("check_agrees")
    if not prefix:
        return
    lines = stdout_lines(errs, stdout_path)
    printed = [l[len(prefix):].split()[0] for l in lines if l.startswith(prefix)]
    if not printed:
        why = [l for l in lines if "graphsmith not importable" in l or "needs PyTorch" in l]
        print(f"  note: graphsmith.check did not run in the program ({why or 'no line'}); "
              f"the count is compared with the expected one only")
        return
    total = sum(c["total"] for c in checked)
    if int(printed[0]) != total:
        errs.append(f"graphsmith.check found {printed[0]} hazards, the tracer {total}")
    else:
        print(f"  graphsmith.check agrees: {total} hazards")


def check_site(errs, what, site, exp, prefix):
    """A site of a freed-memory launch (allocated, freed, launch): its call name, native
    frames and innermost Python frame of the user's code."""
    if not any(k.startswith(prefix + "_") for k in exp):
        return
    if site is None:
        errs.append(f"{what}: not recorded")
        return
    if f"{prefix}_call" in exp and not matches(site.get("call"), exp[f"{prefix}_call"]):
        errs.append(f"{what}.call {site.get('call')!r}, expected one of {exp[prefix + '_call']}")
    for s in exp.get(f"{prefix}_backtrace_contains", []):
        frames = [f.get("symbol", "") for f in site.get("backtrace", [])]
        if not any(s in f for f in frames):
            errs.append(f"{what}.backtrace has no frame with {s!r}: {frames[:16]}")
    if f"{prefix}_python_user" in exp:
        stack = site.get("python", [])
        user = next((f for f in stack if f.get("origin") == "user"), None)
        file, function = exp[f"{prefix}_python_user"]
        if user is None or not user["file"].endswith(file) or user["function"] != function:
            errs.append(f"{what}.python: innermost user frame {user}, expected {file} in "
                        f"{function} (python_missing: {site.get('python_missing')})")


def check_freed(errs, exp, procs, stdout_path):
    """--freed: the launches on freed memory (process["freed"]), as src/freed.rs records them."""
    found = [f for p in procs for f in p.get("freed", [])]
    if "freed" in exp and len(found) != exp["freed"]:
        errs.append(f"{len(found)} launches on freed memory, expected {exp['freed']}: "
                    + "; ".join(f"n{f['node']} {f['node_label']!r} bytes {f['start']:#x}+{f['len']}"
                                f" freed by {f['freed']['call']}" for f in found[:5]))
    want = exp.get("freed_first")
    if not want or not found:
        return
    f = found[0]
    if "node_kind" in want and f["node_kind"] != want["node_kind"]:
        errs.append(f"freed: node kind {f['node_kind']}, expected {want['node_kind']}")
    if "label_contains" in want and want["label_contains"] not in f["node_label"]:
        errs.append(f"freed: node label {f['node_label']!r} lacks {want['label_contains']!r}")
    check_site(errs, "freed.allocated", f.get("allocated"), want, "allocated")
    check_site(errs, "freed.freed", f.get("freed"), want, "freed")
    check_site(errs, "freed.launch", f.get("launch"), want, "launch")
    lines = stdout_lines(errs, stdout_path)
    weight = printed_fields(errs, lines, want.get("range_from_stdout"), "<address> <bytes>")
    if weight:
        address, size = int(weight[0], 16), int(weight[1])
        # The node's freed bytes start in the program's buffer (a pointer reaches to the end of
        # its allocation, which may outlast the buffer) and the freed range overlaps it.
        if not address <= f["start"] < address + size:
            errs.append(f"freed bytes {f['start']:#x}+{f['len']} do not start in the program's "
                        f"buffer {address:#x}+{size}")
        if not (f["freed_base"] < address + size
                and address < f["freed_base"] + f["freed_bytes"]):
            errs.append(f"freed range {f['freed_base']:#x}+{f['freed_bytes']} misses the "
                        f"program's buffer {address:#x}+{size}")
    made = printed_fields(errs, lines, want.get("lines_from_stdout"), "<alloc line> <free line>")
    for key, line in zip(("allocated", "freed"), made or ()):
        stack = (f.get(key) or {}).get("python", [])
        user = next((x for x in stack if x.get("origin") == "user"), None)
        if user is None or user["line"] != int(line):
            errs.append(f"freed.{key}: innermost user frame {user}, expected line {line}")


def printed_fields(errs, lines, prefix, shape):
    """The two fields of the first stdout line starting with `prefix` (None when no prefix is
    expected; an error when the line is missing)."""
    if not prefix:
        return None
    printed = [l[len(prefix):].split() for l in lines if l.startswith(prefix)]
    if not printed or len(printed[0]) != 2:
        errs.append(f"the command printed no line '{prefix}{shape}'")
        return None
    return printed[0]


def check_range(errs, want, h, lines, address):
    """The hazard's byte range equals the one the program computed on the host ("<prefix>offset
    len", relative to the program's buffer at `address`)."""
    prefix = want.get("range_from_stdout")
    if not prefix:
        return
    printed = [l[len(prefix):].split() for l in lines if l.startswith(prefix)]
    if not printed or len(printed[0]) != 2:
        errs.append(f"the command printed no line '{prefix}<offset> <len>'")
        return
    offset, length = (int(v) for v in printed[0])
    want_range = (address - h["buffer"] + offset, length)
    if (h["offset"], h["len"]) != want_range:
        errs.append(f"hazard on bytes {h['offset']}+{h['len']} of {h['buffer']:#x}, the host "
                    f"predicts {want_range[0]}+{want_range[1]}")


def check_graph_costs(errs, exp, report, report_path):
    """--graphs: report["graph_costs"], as src/graphs/report.rs writes it."""
    want = exp.get("graph_costs")
    if want is None:
        return
    costs = report.get("graph_costs")
    if costs is None:
        errs.append("no graph_costs in the report (was --graphs given?)")
        return
    procs = costs["processes"]
    graphs = [g for p in procs for g in p["graphs"]]
    captured = [g for g in graphs if g["made"]["by"] == "capture" and g["made"]["ended"]]
    if len(captured) < want.get("captured_min", 0):
        errs.append(f"{len(captured)} captured graphs in graph_costs, expected at least "
                    f"{want['captured_min']}")
    for g in captured:
        what = f"graph #{g['number']} (rank {g['rank']})"
        if not (g["capture_ns"] or 0) > 0:
            errs.append(f"{what}: capture time {g['capture_ns']}, expected > 0")
        if not g["instantiate_ns"] > 0:
            errs.append(f"{what}: instantiation time {g['instantiate_ns']}, expected > 0")
        if not g["node_total"] > 0:
            errs.append(f"{what}: {g['node_total']} nodes, expected > 0")
        if g["replays"] < want.get("replays_each_min", 0):
            errs.append(f"{what}: {g['replays']} replays, expected at least {want['replays_each_min']}")
        at = g.get("began_at") or {}
        if "began_at" in want and not str(at.get("file", "")).endswith(want["began_at"]):
            errs.append(f"{what}: began at {at}, expected a line of {want['began_at']}")
        if want.get("device_time") and not (g.get("device_mean_ns") or 0) > 0:
            off = [p.get("device_time_off") for p in procs]
            errs.append(f"{what}: no device time (device_time_off: {off}, records: "
                        f"{[p.get('device_records') for p in procs]}, unmatched: "
                        f"{[p.get('device_unmatched') for p in procs]})")
    for p in procs:
        costs_ns = [g["cost_ns"] for g in p["graphs"]]
        if costs_ns != sorted(costs_ns, reverse=True):
            errs.append(f"process {p['pid']}: graphs not sorted by cost: {costs_ns[:10]}")
    total = sum(p["totals"]["total_bytes"] for p in procs)
    if total < want.get("memory_min", 0):
        errs.append(f"{total} bytes allocated while capturing, expected at least {want['memory_min']}")
    if want.get("plot"):
        svg = report_path.rsplit(".", 1)[0] + ".svg"
        try:
            text = open(svg).read()
        except OSError as e:
            errs.append(f"no plot beside the JSON report: {e}")
        else:
            if not (text.lstrip().startswith("<svg") and text.rstrip().endswith("</svg>")):
                errs.append(f"{svg} is not an SVG document")
    # Seconds, for the log.
    if procs:
        t = procs[0]["totals"]
        print(f"  graph costs: {len(graphs)} graphs, capture {t['capture_ns'] / 1e9:.3f} s, "
              f"instantiate {t['instantiate_ns'] / 1e9:.3f} s, upload {t['upload_ns'] / 1e9:.3f} s, "
              f"{t['total_bytes'] / 2**20:.1f} MiB while capturing, {t['replays']} replays")


def check_launch_races(errs, exp, report, stdout_path):
    """--hazards across graphs: report["launch_races"], as src/races/mod.rs writes it."""
    want = exp.get("launch_races")
    if want is None:
        return
    lr = report.get("launch_races")
    if lr is None:
        errs.append("no launch_races in the report (was --hazards given?)")
        return
    procs = [p for p in lr["processes"] if p["report"]["launches"] > 0 or p["report"]["races"]]
    if not procs:
        errs.append(f"no process recorded a graph launch: {lr}")
        return
    races = [r for p in procs for r in p["report"]["races"]]
    launches = sum(p["report"]["launches"] for p in procs)
    if launches < want.get("launches_min", 0):
        errs.append(f"{launches} launches in the sequence, expected at least {want['launches_min']}")
    if not all(p["complete"] for p in procs):
        errs.append("a process wrote no launch-sequence summary at exit")
    if len(races) != want["races"]:
        errs.append(f"{len(races)} races across graphs, expected {want['races']}: "
                    + "; ".join(f"{r['first']['node']} / {r['second']['node']} on {r['buffer']:#x}"
                                for r in races[:5]) + f"; notes: {[p['report']['notes'] for p in procs]}")
    race = want.get("race")
    if race and races:
        r = races[0]
        if r["certain"] != race.get("certain", r["certain"]):
            errs.append(f"race certain={r['certain']}, expected {race['certain']}")
        for side in ("first", "second"):
            w = race.get(side, {})
            got = r[side]
            if "node_contains" in w and w["node_contains"] not in got["node"]:
                errs.append(f"race.{side}.node {got['node']!r} lacks {w['node_contains']!r}")
            if "mode" in w and got["mode"] != w["mode"]:
                errs.append(f"race.{side}.mode {got['mode']}, expected {w['mode']}")
            if "label_contains" in w and w["label_contains"] not in got["graph_label"]:
                errs.append(f"race.{side}.graph_label {got['graph_label']!r} lacks "
                            f"{w['label_contains']!r}")
        if r["first"]["graph"] == r["second"]["graph"]:
            errs.append(f"both sides of the race are one executable: {r['first']['graph_label']}")
        if r["first"]["stream"] == r["second"]["stream"]:
            errs.append(f"both sides of the race are on one stream: {r['first']['stream_label']}")
        prefix = race.get("buffer_from_stdout")
        if prefix:
            lines = stdout_lines(errs, stdout_path)
            printed = [l[len(prefix):].split()[0] for l in lines if l.startswith(prefix)]
            if not printed:
                errs.append(f"the command printed no line '{prefix}<address> ...'")
            elif not r["buffer"] <= int(printed[0], 16) < r["buffer"] + max(r["offset"] + r["len"], 1):
                errs.append(f"race on buffer {r['buffer']:#x}+{r['offset']}..{r['offset'] + r['len']}, "
                            f"the program's buffer is at {printed[0]}")
    if races:
        print(f"  race across graphs: {races[0]['first']['node']} of "
              f"{races[0]['first']['graph_label']} / {races[0]['second']['node']} of "
              f"{races[0]['second']['graph_label']} on {races[0]['buffer']:#x}")


def main():
    expect_all, case, report_path, exit_code = sys.argv[1:5]
    stdout_path = sys.argv[5] if len(sys.argv) > 5 else None
    exp = json.load(open(expect_all))[case]
    errs = []
    if "exit" in exp and int(exit_code) != exp["exit"]:
        errs.append(f"exit code {exit_code}, expected {exp['exit']}")
    try:
        report = json.load(open(report_path))
    except (OSError, ValueError) as e:
        print(f"FAIL {case}: no readable report ({e})")
        return 1
    procs = report["processes"]
    caps = [c for p in procs for c in p["captures"]]
    escapes = [(p, e) for p in procs for e in p["escapes"]]
    failed = [c for c in caps if c["outcome"] != "captured" or c["first"]]
    if "note_contains" in exp and not any(exp["note_contains"] in n for n in report["notes"]):
        errs.append(f"notes {report['notes']} lack {exp['note_contains']!r}")
    if "first" in exp:
        p, c = first_capture(report, lambda c: c["first"] is not None)
        check_call(errs, "first failing call", c and c["first"], exp["first"], p)
        if c and "outcome" in exp and c["outcome"] != exp["outcome"]:
            errs.append(f"outcome {c['outcome']}, expected {exp['outcome']}")
        if c and "unjoined_ranges" in exp:
            got = [u["last_ranges"] for u in c["unjoined"]]
            if exp["unjoined_ranges"] not in got:
                errs.append(f"unjoined streams' ranges {got}, expected {exp['unjoined_ranges']}")
        if c and "cascade_contains" in exp:
            names = [i["call"] for i in c["cascade"]]
            for n in exp["cascade_contains"]:
                if n not in names:
                    errs.append(f"cascade {c['cascade']} lacks {n}")
    elif "outcome" in exp:
        if not caps:
            errs.append("no capture recorded")
        elif caps[0]["outcome"] != exp["outcome"]:
            errs.append(f"outcome {caps[0]['outcome']}, expected {exp['outcome']}")
    if "exited_normally" in exp and procs and procs[0]["exited_normally"] != exp["exited_normally"]:
        errs.append(f"exited_normally {procs[0]['exited_normally']}, expected {exp['exited_normally']}")
    if "failed_captures" in exp and len(failed) != exp["failed_captures"]:
        errs.append(f"{len(failed)} failed captures, expected {exp['failed_captures']}: "
                    + "; ".join(f"{c['outcome']} {c['first'] and (c['first']['runtime'], c['first']['driver'], c['first']['code'])}" for c in failed))
    if "escapes" in exp and len(escapes) != exp["escapes"]:
        errs.append(f"{len(escapes)} escapes, expected {exp['escapes']}: "
                    + "; ".join(f"{e['runtime']}/{e['driver']} ranges {e['ranges']}" for _, e in escapes[:5]))
    if "escapes_min" in exp and len(escapes) < exp["escapes_min"]:
        errs.append(f"{len(escapes)} escapes, expected at least {exp['escapes_min']}")
    if "escape" in exp:
        p, e = escapes[0] if escapes else (None, None)
        check_call(errs, "escape", e, exp["escape"], p)
    graphs = [g for p in procs for g in p["graphs"] if g["instantiate"]["code"] == 0]
    if "graphs_min" in exp and len(graphs) < exp["graphs_min"]:
        errs.append(f"{len(graphs)} graphs instantiated, expected at least {exp['graphs_min']}")
    for kind, n in exp.get("nodes_min", {}).items():
        got = max((g["instantiate"]["nodes"].get(kind, 0) for g in graphs), default=0)
        if got < n:
            errs.append(f"{got} {kind} nodes, expected at least {n} ({[g['instantiate']['nodes'] for g in graphs]})")
    check_hazards(errs, exp, report, graphs, stdout_path)
    check_freed(errs, exp, procs, stdout_path)
    check_launch_races(errs, exp, report, stdout_path)
    check_graph_costs(errs, exp, report, report_path)
    if "stdout_contains" in exp:
        try:
            out = open(stdout_path).read() if stdout_path else ""
        except OSError as e:
            out = ""
            errs.append(f"cannot read the command's output: {e}")
        if exp["stdout_contains"] not in out:
            errs.append(f"the command's output lacks {exp['stdout_contains']!r}")
    if "launches_min" in exp:
        got = max((g["launches"] for g in graphs), default=0)
        if got < exp["launches_min"]:
            errs.append(f"{got} graph launches, expected at least {exp['launches_min']}")
    if "nvtx_min" in exp:
        got = max((p["nvtx_instances"] for p in procs), default=0)
        if got < exp["nvtx_min"]:
            errs.append(f"{got} NVTX instances attached, expected at least {exp['nvtx_min']}")
    for p in procs:
        if p["attached"]["state"] == "no":
            errs.append(f"process {p['pid']} untraced: {p['attached']}")
    if errs:
        print(f"FAIL {case}")
        for e in errs:
            print(f"  - {e}")
        return 1
    print(f"PASS {case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
