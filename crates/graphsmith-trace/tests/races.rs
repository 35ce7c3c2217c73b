//! `--hazards` across graphs, from a recorded event log: the races each process found and its
//! summary, per process (a racy one, its fixed twin, one that crashed after a race), asserted
//! in full against a snapshot (`GRAPHSMITH_BLESS=1 cargo test -p graphsmith-trace --test races`
//! rewrites it).

use graphsmith_trace::event::read_events;
use graphsmith_trace::races::{render_races, LaunchRaces};

const LOG: &str = include_str!("fixtures/races.jsonl");
const SNAPSHOT: &str = include_str!("fixtures/races.txt");

fn races() -> LaunchRaces {
    let (events, bad) = read_events(LOG);
    assert_eq!(bad, 0, "every line of races.jsonl parses");
    LaunchRaces::build(&events)
}

#[test]
fn races_render_as_the_snapshot() {
    let text = render_races(&races());
    if std::env::var("GRAPHSMITH_BLESS").as_deref() == Ok("1") {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/races.txt");
        std::fs::write(&path, &text).expect("write the snapshot");
        return;
    }
    assert_eq!(
        text, SNAPSHOT,
        "the report differs from tests/fixtures/races.txt (GRAPHSMITH_BLESS=1 rewrites it)"
    );
}

#[test]
fn each_process_keeps_its_races_and_counts() {
    let r = races();
    let pids: Vec<u32> = r.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, [7001, 7002, 7003]);
    assert_eq!(r.total(), 2);
    let racy = &r.processes[0];
    assert!(racy.complete);
    assert_eq!((racy.report.launches, racy.report.graphs), (6, 2));
    let race = &racy.report.races[0];
    assert!(race.certain);
    assert_eq!(race.first.node, "n1 memcpy#1");
    assert_eq!(race.second.node, "n0 consume");
    assert_eq!(
        race.second.launch_line.as_deref(),
        Some("races.cu:140 in run")
    );
    assert!(r.processes[1].report.races.is_empty() && r.processes[1].complete);
    assert!(!r.processes[2].complete);
}

#[test]
fn no_launch_is_said_plainly() {
    assert_eq!(
        render_races(&LaunchRaces::default()),
        "\ncross-graph races: no graph launch was checked (none was launched)\n"
    );
}

#[test]
fn a_process_that_launched_no_graph_is_left_out() {
    let log = r#"{"ev":"race","what":"summary","pid":9,"seq":1,"launches":0,"graphs":0,"streams":0,"notes":[]}"#;
    let (events, _) = read_events(log);
    let r = LaunchRaces::build(&events);
    assert_eq!(r.processes.len(), 1);
    assert_eq!(
        render_races(&r),
        "\ncross-graph races: no graph launch was checked (none was launched)\n"
    );
}
