//! `--graphs` from a recorded event log (tests/fixtures/graphs.jsonl: a Python process with
//! three captures, one of them reusing the graph and executable handles of the first, and a
//! graph built without capture; a C++ process that crashed): attribution, sorting, totals,
//! memory during the capture window, replay counting, the text as a snapshot
//! (`GRAPHSMITH_BLESS=1 cargo test -p graphsmith-trace --test graphs` rewrites it) and the SVG.

use graphsmith_trace::event::read_events;
use graphsmith_trace::graphs::cost::{GraphCost, Made};
use graphsmith_trace::graphs::{plot, plot_path, render_costs, GraphCosts};

const LOG: &str = include_str!("fixtures/graphs.jsonl");
const SNAPSHOT: &str = include_str!("fixtures/graphs.txt");
const MIB: u64 = 1 << 20;

fn costs() -> GraphCosts {
    let (events, bad) = read_events(LOG);
    assert_eq!(bad, 0, "every line of graphs.jsonl parses");
    GraphCosts::build(&events)
}

fn by_number(g: &[GraphCost], number: usize) -> &GraphCost {
    g.iter()
        .find(|g| g.number == number)
        .expect("graph by number")
}

#[test]
fn graphs_are_sorted_by_host_time_then_memory() {
    let c = costs();
    let p = &c.processes[0];
    let order: Vec<(usize, u64)> = p.graphs.iter().map(|g| (g.number, g.cost_ns)).collect();
    assert_eq!(
        order,
        [(1, 7_250_000), (2, 2_030_000), (3, 1_020_000), (4, 100_000)]
    );
    assert_eq!(
        p.graphs.iter().map(|g| g.rank).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    let first = by_number(&p.graphs, 1);
    assert_eq!(first.capture_ns, Some(4_050_000), "begin entry to end exit");
    assert_eq!(first.instantiate_ns, 3_000_000);
    assert_eq!(first.upload_ns, 200_000);
    assert_eq!(first.node_total, 7);
    let began = first.began_at.as_ref().unwrap();
    assert_eq!((began.file.as_str(), began.line), ("bench.py", Some(41)));
    assert!(began.python);
}

#[test]
fn memory_is_what_the_capturing_thread_allocated_during_the_window() {
    let c = costs();
    let p = &c.processes[0];
    let first = by_number(&p.graphs, 1);
    assert_eq!(first.memory.allocated_bytes, 2 * MIB);
    assert_eq!(first.memory.other_thread_allocations, 1);
    assert_eq!(first.memory.other_thread_bytes, MIB);
    let second = by_number(&p.graphs, 2);
    assert_eq!(second.memory.allocations, 2, "cuMemAlloc and cuMemCreate");
    assert_eq!(second.memory.node_bytes, 4 * MIB);
    assert_eq!(second.memory.total_bytes, 26 * MIB);
    assert_eq!(by_number(&p.graphs, 3).memory.total_bytes, 0);
    assert_eq!((p.other_thread_allocations, p.other_thread_bytes), (1, MIB));
    assert_eq!(p.totals.total_bytes, 28 * MIB);
}

#[test]
fn replays_follow_the_instantiation_when_handles_are_reused() {
    let c = costs();
    let p = &c.processes[0];
    let (first, third) = (by_number(&p.graphs, 1), by_number(&p.graphs, 3));
    assert_eq!(first.replays, 100);
    assert_eq!(first.device_mean_ns, Some(50_000));
    assert_eq!(
        third.replays, 7,
        "the reused executable counts from its own instantiation"
    );
    assert_eq!(third.instantiations.len(), 1);
    assert_eq!(
        third.made,
        Made::Capture {
            capture: 3,
            ended: true
        }
    );
    let built = by_number(&p.graphs, 4);
    assert_eq!(built.made, Made::Built);
    assert_eq!(built.capture_ns, None);
    assert_eq!(built.began_at.as_ref().unwrap().file, "build.py");
    assert_eq!(p.totals.replays, 117);
    assert_eq!(p.totals.cost_ns, 10_400_000);
    assert_eq!(p.totals.span_ns, 30_200_000);
    assert!(p.launches_recorded && p.device_time_off.is_none());
}

#[test]
fn a_native_process_gets_its_frame_and_no_device_time_after_a_crash() {
    let c = costs();
    let p = &c.processes[1];
    let g = &p.graphs[0];
    let began = g.began_at.as_ref().unwrap();
    assert_eq!(
        (began.file.as_str(), began.line, began.function.as_str()),
        ("/work/faults.cu", Some(88), "capture_step(int)")
    );
    assert!(!began.python);
    assert_eq!(g.memory.allocated_bytes, 512 * 1024);
    assert_eq!(g.replays, 0);
    assert!(!p.launches_recorded);
    assert!(p
        .device_time_off
        .as_deref()
        .unwrap()
        .contains("did not exit normally"));
}

#[test]
fn the_text_is_the_snapshot() {
    let text = render_costs(&costs());
    let same = text == SNAPSHOT;
    if std::env::var_os("GRAPHSMITH_BLESS").is_some() && !same {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/graphs.txt");
        std::fs::write(&path, &text).expect("GRAPHSMITH_BLESS: rewrite the snapshot");
        panic!(
            "rewrote {}; run again without GRAPHSMITH_BLESS",
            path.display()
        );
    }
    assert!(
        same,
        "tests/fixtures/graphs.txt differs (GRAPHSMITH_BLESS=1 rewrites it):\n{text}"
    );
}

/// Tags open and close in order (the SVG is well-formed as far as its elements go).
fn balanced(svg: &str) -> Result<usize, String> {
    let mut stack: Vec<&str> = Vec::new();
    let mut elements = 0;
    let mut rest = svg;
    while let Some(at) = rest.find('<') {
        let Some(len) = rest[at..].find('>') else {
            return Err("a tag is never closed".into());
        };
        let tag = &rest[at + 1..at + len];
        rest = &rest[at + len + 1..];
        if tag.starts_with('?') || tag.starts_with('!') {
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            match stack.pop() {
                Some(open) if open == name.trim() => {}
                other => return Err(format!("</{name}> closes {other:?}")),
            }
        } else {
            elements += 1;
            if !tag.ends_with('/') {
                stack.push(tag.split_whitespace().next().unwrap_or(""));
            }
        }
    }
    if stack.is_empty() {
        Ok(elements)
    } else {
        Err(format!("never closed: {stack:?}"))
    }
}

#[test]
fn the_plot_is_a_well_formed_svg_with_a_bar_per_graph_and_part() {
    let c = costs();
    let svg = plot::svg(&c).expect("drawn");
    assert!(
        svg.trim_start().starts_with("<svg"),
        "{}",
        &svg[..80.min(svg.len())]
    );
    assert!(svg.trim_end().ends_with("</svg>"));
    let elements = balanced(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
    assert!(elements > 20, "{elements} elements");
    // 4 graphs x (capture, instantiate, upload) + 4 memory bars + legend, background, frames.
    assert!(svg.matches("<rect").count() >= 16, "{svg}");
    assert!(
        svg.contains("process 4242"),
        "the process with the most graphs"
    );
    let dir = std::env::temp_dir().join(format!("gs-graphs-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = plot_path(None, Some(&dir.join("r.json"))).unwrap();
    assert_eq!(path, dir.join("r.svg"));
    plot::write(&path, &c).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), svg);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_json_schema_holds_its_documented_fields() {
    let v = serde_json::to_value(costs()).unwrap();
    let g = &v["processes"][0]["graphs"][0];
    for key in [
        "rank",
        "number",
        "made",
        "graph",
        "thread",
        "began_at",
        "capture_ns",
        "instantiate_ns",
        "upload_ns",
        "cost_ns",
        "instantiations",
        "nodes",
        "node_total",
        "memory",
        "replays",
        "device",
        "device_mean_ns",
    ] {
        assert!(g.get(key).is_some(), "graph lacks {key}: {g}");
    }
    assert_eq!(
        g["made"],
        serde_json::json!({"by": "capture", "capture": 1, "ended": true})
    );
    assert_eq!(g["memory"]["total_bytes"], 2 * MIB);
    assert!(v["processes"][0]["totals"]["span_ns"].is_u64());
}

#[test]
fn no_graph_is_said_plainly() {
    let c = GraphCosts::default();
    assert_eq!(
        render_costs(&c),
        "\ngraph costs: no graph was captured, built or instantiated\n"
    );
    assert_eq!(plot::svg(&c).unwrap_err(), "no graph to plot");
}
